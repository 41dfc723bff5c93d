#!/usr/bin/env bash
# OUTBOX_ON_SENT=keep: the watermark W of a lease partition never passes a row that is not
# published or parked, and the relay refuses to keep one it cannot prove.
#  - a late row (its writer drew the id and stays open): W of its partition stays below it
#    while later rows of the same partition are published (recorded above W), and passes
#    it once it commits and is published (its records stay below W, for the audit);
#  - the relay killed (SIGKILL) while W is held back there, a new one publishes none of the
#    rows recorded above W again: no duplicate at all in Kafka;
#  - a parked row is passed (it is accounted for), the later row of its key that waits for
#    the requeue is not, and the backlog gauge counts that row alone;
#  - the audit: a row planted below W with OVERRIDING SYSTEM VALUE (an id a rolled-back
#    writer drew) is found, published, counted and logged; before it, the audit found none;
#  - no row of the table was updated or deleted;
#  - start-up refuses a sequence with CACHE 20 and a sequence rewound below the table's
#    rows, and a relay in mark mode refuses the keep-mode table, each with a message that
#    says what is wrong (exit 1).
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db

# the audit goes over all 64 partitions every 640 ms here (60 s by default)
RELAY_ENV=(OUTBOX_DEAD_LETTER_TOPIC= OUTBOX_MAX_ATTEMPTS=1 OUTBOX_WATERMARK_AUDIT_MS=640)
start_relay main >/dev/null
for k in $(keys_in 0 20); do ins_key "$k" >/dev/null; done
wait_until 30 "the first rows SENT" all_sent

# ---- a late row: its writer holds the id open for 8 s
p=$(part_of late)
"$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'E', '{}')" \
    -c "SELECT pg_sleep(8)" -c "COMMIT" >/dev/null &
writer=$!
wait_until 5 "the late row's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = '\''outbox'\''::regclass AND mode = '\''RowExclusiveLock'\'' AND pid <> pg_backend_pid()")" -ge 1 ]'
late=$(psqlc "SELECT last_value FROM outbox_id_seq")
above=()
for k in $(keys_in "$p" 5); do above+=("$(ins_key "$k")"); done
wait_until 20 "the rows above the late one SENT" rows_are 5 "id > $late AND lease_partition = $p AND status = 'SENT'"
# advances run every 500 ms: give W its chances to pass the late row, which it must not. The
# relay's live W (from /status, a snapshot every 0.5 s) is read through that time, and the
# table's (which lags the live one by up to 2 s) after it. A read counts only if the late
# writer is still open after it: in a fresh-clone CI run (c87286c) the wait above took so
# long that the writer's 8 s ran out, the row was published, and W rightly passed it.
late_open() { [ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()")" -ge 1 ]; }
reads=0
for i in 1 2 3 4 5 6 7 8; do
    lw=$(live_w main "$p") || fail "reading the relay's live W of partition $p failed"
    late_open || break
    [ "$lw" -lt "$late" ] || fail "the relay's live W of partition $p is $lw, at or past the late row $late still open"
    reads=$((reads + 1))
    sleep 0.25
done
[ "$reads" -ge 1 ] || fail "the late writer ended before the relay's live W could be read"
w=$(w_of "$p")
[ "$w" -lt "$late" ] || fail "W of partition $p is $w, at or past the late row $late still open"
recs=$(psqlc "SELECT count(*) FROM outbox_published WHERE lease_partition = $p AND top > $w")
[ "$recs" -ge 1 ] || fail "no published record above W for partition $p while the late row is open"
log "late row $late open: W of partition $p stays at $w, $recs published records above it"
kill -KILL "$(relay_pid main)"
wait "$(relay_pid main)" 2>/dev/null || true
start_relay main >/dev/null # a new relay, W still held back by the open writer
wait "$writer" || fail "the late writer failed"
wait_until 20 "the late row SENT" rows_are 1 "id = $late AND status = 'SENT'"
# W moves up to the floors' proof, the highest id this relay has claimed once no writer that
# drew a lower one is still open: the new relay claimed the late row alone (the rest was
# recorded), so W passes the records once it claims a later row of the partition
next=$(ins_key "$(keys_in "$p" 6 | awk '{ print $6 }')")
wait_until 10 "W past the late row's partition" eval '[ "$(w_of "$p")" -ge "$next" ]'
wait_until 10 "no published record left above W" metric_is main outbox_published_records 0
log "late row committed and published: W of partition $p at $(w_of "$p")"

# ---- a parked row is passed; the row of its key that waits for requeue is not
q=$(part_of bad)
bad=$(psqlc "INSERT INTO outbox ($OUTBOX_COLS, topic) VALUES ('order', 'bad', 'E1', '{}', 'bad topic!') RETURNING id")
waiting=$(ins_key bad E2)
for k in $(keys_in "$q" 3); do ins_key "$k" >/dev/null; done
wait_until 20 "the bad row parked" rows_are 1 "id = $bad AND status = 'FAILED'"
wait_until 15 "the backlog gauge at the one waiting row" eval '[ "$(metric main outbox_pending_rows)" = 1 ] && [ "$(metric main outbox_failed_rows)" = 1 ]'
wait_until 10 "W past the parked row" eval '[ "$(w_of "$q")" -ge "$bad" ]'
sleep 1
w=$(w_of "$q")
[ "$w" -lt "$waiting" ] || fail "W of partition $q is $w, past row $waiting that waits behind the parked row"
[ "$(count_where "id = $waiting AND status = 'PENDING'")" = 1 ] || fail "row $waiting did not wait for the requeue"
log "parked row $bad passed by W ($w); row $waiting of its key waits below W's reach"
psqlc "UPDATE outbox SET topic = NULL WHERE id = $bad"
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" requeue --key bad >/dev/null || fail "requeue failed"
wait_until 20 "the requeued key SENT" all_sent
wait_until 10 "W past the requeued key's rows" eval '[ "$(w_of "$q")" -ge "$waiting" ]'

# ---- the audit: a row planted below W is found and published
wait_until 10 "a round of audits" metric_at_least main outbox_watermark_audits_total 128
[ "$(metric main outbox_watermark_gaps_total)" = 0 ] || fail "the audit found rows below W before any was planted"
plant_below_w planted
wait_until 10 "the audit found the planted row" metric_is main outbox_watermark_gaps_total 1
grep -q "1 rows of lease partition $r lie at or below its watermark but were never recorded as published (ids $hole)" \
    "$WORK/relay-main.log" || fail "the audit's log line does not name partition $r and row $hole"
wait_until 10 "the planted row published (recorded)" eval '[ "$(psqlc "SELECT count(*) FROM outbox_published
    WHERE lease_partition = $r AND $hole = ANY(ids)")" = 1 ]'
log "row $hole planted below W of partition $r: found by the audit and published"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder"
dups=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
[ "$dups" = 0 ] || fail "$dups rows published twice: the relay after the SIGKILL republished rows recorded above W"
written=$(psqlc "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox'")
[ "$written" = 1 ] || fail "the relay wrote to rows of the table: $written updates and deletes (1 is the test's own fix)"

# ---- what the proof rests on, refused at start-up
refused() { # WHAT PATTERN
    local rc=0
    env "${RELAY_BASE_ENV[@]}" timeout 30 "$RELAYTEST_RELAY_BIN" >"$WORK/refused.log" 2>&1 || rc=$?
    [ "$rc" = 1 ] && grep -q "$2" "$WORK/refused.log" || fail "$1: exit $rc: $(grep -m2 -E "error|keep" "$WORK/refused.log")"
    log "$1: refused: $(grep -m1 -o "$2.*" "$WORK/refused.log" | cut -c1-100)"
}
relay_env
# a relay of another mode would take every published row for PENDING: it refuses the table
rc=0
env "${RELAY_BASE_ENV[@]}" OUTBOX_ON_SENT=mark timeout 30 "$RELAYTEST_RELAY_BIN" >"$WORK/mark.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "is in keep mode .* OUTBOX_ON_SENT=mark would publish every one of them again" "$WORK/mark.log" ||
    fail "a mark-mode relay on the keep-mode table: exit $rc: $(grep -m2 error "$WORK/mark.log")"
log "a mark-mode relay refused the keep-mode table"
psqlc "ALTER SEQUENCE outbox_id_seq CACHE 20"
refused "CACHE 20" "has CACHE 20"
psqlc "ALTER SEQUENCE outbox_id_seq CACHE 1"
psqlc "SELECT setval('outbox_id_seq', 5)"
refused "a rewound sequence" "was rewound"
log "ok"
