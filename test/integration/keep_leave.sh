#!/usr/bin/env bash
# A table leaves keep mode (`outbox-relay migrate --leave-keep`) while writers go on: the step
# is refused while a keep relay runs on the table (nothing changed); after that relay stopped,
# every row keep mode called SENT is SENT in the table itself, the parked row FAILED with its
# reason and attempts, the keep-mode state gone (rows at or below W, and rows recorded above a
# W a late writer holds back); rows at or below W that were never published stay PENDING: a
# parked row requeued after the relay stopped (which `<table>_kept` shows PENDING) and a row
# planted below W that the audit (off here) never reached; a relay in mark mode then takes the
# table (not refused) and publishes the rest: every row in Kafka exactly once, in per-key order.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "keep_leave runs with RELAYTEST_ON_SENT=keep"
setup_db
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1 OUTBOX_WATERMARK_AUDIT_MS=86400000)
# rows that can never be published (an invalid topic name): parked in keep mode's table; the
# second is requeued (its topic fixed) once the keep relay has stopped
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       VALUES ('order', 'p-topic', 'E1', '{}', 'bad topic!'), ('order', 'p-requeue', 'E1', '{}', 'bad topic!')"
requeued=$(psqlc "SELECT id FROM outbox WHERE aggregate_id = 'p-requeue'")
start_relay main >/dev/null
writers 4 2000 50 &
wpid=$!
wait_until 60 "the poison rows parked" rows_are 2 "status = 'FAILED'"
wait_until 60 "1,000 rows published in keep mode" rows_at_least 1000 "status = 'SENT'"

leave() { OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=mark "$RELAYTEST_RELAY_BIN" migrate --leave-keep; }
rc=0
leave >"$WORK/leave-refused.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$WORK/leave-refused.log"; fail "--leave-keep with a keep relay running: expected exit 1, got $rc"; }
grep -q "still running on public.outbox" "$WORK/leave-refused.log" ||
    { cat "$WORK/leave-refused.log"; fail "the refusal does not say a relay is still running"; }
[ "$(psqlc "SELECT count(*) FROM outbox WHERE status <> 'PENDING'")" = 0 ] || fail "the refused step changed rows"
[ "$(psqlc "SELECT count(*) > 0 FROM outbox_watermark")" = t ] || fail "the refused step removed the watermarks"

# a row below W that no record names (the audit would find it: its next turn there is hours away)
plant_below_w planted

# a late row: its writer holds the id open through the stop and the step, so its partition's
# W stays below it while later rows are recorded above W (the step's second kind of SENT)
"$PG_BIN/psql" -X -q -At "$DSN application_name=late_writer" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'E', '{}')" \
    -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null &
late_writer=$!
# later rows of the late row's partition, published and recorded above its W (the writers
# above may have ended by now: in a fresh-clone CI run they had, and nothing was recorded
# above any W, so the step's second kind of SENT went untested and the check below failed)
wait_until 5 "the late row's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name = '\''late_writer'\'' AND datname = current_database() AND backend_xid IS NOT NULL")" = 1 ]'
lp=$(part_of late)
for k in $(keys_in "$lp" 3); do ins_key "$k" >/dev/null; done
wait_until 10 "rows of the late row's partition recorded above its W" eval \
    '[ "$(psqlc "SELECT count(*) FROM outbox_published WHERE lease_partition = '"$lp"' AND top > $(w_of "$lp")")" -ge 1 ]'
stop_relay main || fail "the keep relay exited with $? on SIGTERM"
# the requeued row: PENDING again below W (W passed it while it was parked), not yet published
[ "$requeued" -le "$(w_of "$(part_of p-requeue)")" ] || fail "W never passed the parked row $requeued"
psqlc "UPDATE outbox SET topic = NULL WHERE id = $requeued"
OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=keep "$RELAYTEST_RELAY_BIN" requeue --id "$requeued" >"$WORK/requeue.log" 2>&1 ||
    { cat "$WORK/requeue.log"; fail "requeue --id $requeued failed"; }
grep -q "requeued 1 parked row" "$WORK/requeue.log" || { cat "$WORK/requeue.log"; fail "the row was not requeued"; }
[ "$(psqlc "SELECT status FROM outbox_kept WHERE id = $requeued")" = PENDING ] ||
    fail "outbox_kept shows the requeued row $requeued as $(psqlc "SELECT status FROM outbox_kept WHERE id = $requeued")"
# what keep mode says was published (and parked) when its relay stopped (the planted row reads
# as SENT until the audit reaches it: docs/OUTBOX-TABLE.md)
psqlc "CREATE TABLE kept_sent AS SELECT id FROM outbox_kept WHERE status = 'SENT' AND id <> $hole"
kept=$(psqlc "SELECT count(*) FROM kept_sent")
leave >"$WORK/leave.log" 2>&1 || { cat "$WORK/leave.log"; fail "--leave-keep failed"; }
grep "left keep mode" "$WORK/leave.log" | sed 's/^/# /'
above=$(sed -n 's/.* and \([0-9]*\) recorded above them.*/\1/p' "$WORK/leave.log")
[ "${above:-0}" -gt 0 ] || fail "no row was recorded above its watermark (the late row should have held one back)"
[ "$(psqlc "SELECT count(*) FROM kept_sent k JOIN outbox o USING (id) WHERE o.status = 'SENT' AND o.sent_at IS NOT NULL")" = "$kept" ] ||
    fail "not every row keep mode called SENT ($kept) is SENT in the table"
[ "$(psqlc "SELECT count(*) FROM outbox WHERE status = 'SENT'")" = "$kept" ] ||
    fail "rows keep mode had not published were marked SENT"
[ "$(psqlc "SELECT status || ' ' || attempts || ' ' || (last_error LIKE '%not a valid Kafka topic name%')
            FROM outbox WHERE aggregate_id = 'p-topic'")" = "FAILED 1 true" ] ||
    fail "the parked row: $(psqlc "SELECT status, attempts, last_error FROM outbox WHERE aggregate_id = 'p-topic'")"
[ "$(psqlc "SELECT string_agg(status, ' ' ORDER BY id) FROM outbox WHERE id IN ($requeued, $hole)")" = "PENDING PENDING" ] ||
    fail "the requeued row and the planted one: $(psqlc "SELECT id, status FROM outbox WHERE id IN ($requeued, $hole)")"
grep -q "2 rows at or below the watermarks left PENDING" "$WORK/leave.log" ||
    fail "the step does not count the 2 rows at or below W left PENDING"
[ "$(psqlc "SELECT (SELECT count(*) FROM outbox_watermark) + (SELECT count(*) FROM outbox_published)
                   + (SELECT count(*) FROM outbox_parked)")" = 0 ] || fail "keep mode's state is still there"

# mark mode from now on: the relay is not refused, and publishes what is left
ON_SENT=mark
psqlc "DROP VIEW outbox_all"
outbox_all_view
start_relay main >/dev/null
wait "$wpid" || fail "writers failed"
wait "$late_writer" || fail "the late writer failed"
wait_until 120 "every row but the parked one SENT in mark mode" rows_are 1 "status <> 'SENT'"
stop_relay main || fail "the mark relay exited with $? on SIGTERM"
CHECK_WHERE="status = 'SENT'" check "$TOPIC_PREFIX.order" --exact ||
    fail "through the switch: rows lost, published twice or out of key order"
log "ok: $kept rows published in keep mode, $(count_status SENT) in all (the requeued and the planted row once each), the parked row FAILED"
