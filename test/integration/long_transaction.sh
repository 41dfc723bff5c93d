#!/usr/bin/env bash
# A long transaction elsewhere in the database (a REPEATABLE READ reader of the outbox
# table, as pg_dump is) keeps every marked row's dead entry in the pending index. Claims
# start at the proven floors above them instead of walking them (most claims, counted by
# outbox_claims_from_bottom_total), and the floors never pass a row that may still commit:
# a writer that inserted a row and stays open meanwhile (it holds the proof back) has its
# row published when it commits, before the next row of its key, with nothing lost or out
# of order among 14,000 other events. A requeued row (parked, then `outbox-relay requeue`)
# lies below the floors: it is still published before the later rows of its key. And a
# writer that rang the idle relay's doorbell and stays open does not make the next writer
# wait for it (the doorbell's row lock, before schema 5; schema 6's bell is a sequence).
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_LONG_TRANSACTION_SECONDS=2 OUTBOX_MAX_ATTEMPTS=1)
start_relay main >/dev/null
wait_until 30 "the relay's first claim" metric_at_least main outbox_claims_total 1

# the idle relay armed its doorbell; writer A rings it and stays open (ended below)
wait_until 30 "the idle relay to arm its doorbell" bell_armed
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN application_name=writer_a" -c "BEGIN" \
    -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'open', 'E', '{}')" \
    -c "SELECT pg_sleep(60)" -c "COMMIT" >/dev/null 2>&1 &
open_writer=$!
sleep 1
# the next writer neither waits for A nor does the relay (idle again, it arms the doorbell)
for next in next-1 next-2; do
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" -c "SET statement_timeout = '3s'" \
        -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '$next', 'E', '{}')" \
        >/dev/null 2>"$WORK/next.err" || fail "a writer waited for another writer's open transaction: $(cat "$WORK/next.err")"
    wait_until 10 "$next SENT while writer A is open" rows_are 1 "aggregate_id = '$next' AND status = 'SENT'"
    sleep 1.5 # the relay backs off to its poll interval and arms the doorbell again
done
[ "$(psqlc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'writer_a' AND datname = current_database()")" = t ] ||
    fail "writer A was not open any more: the check above proves nothing"
wait "$open_writer" || true # terminated: its row is rolled back
log "a writer that rang the doorbell and stayed open held neither the next writers nor the relay"

# the long reader: a snapshot that reads the outbox, then idles in its transaction
"$PG_BIN/psql" -X -q "$DSN" -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM outbox" \
    -c "SELECT pg_sleep(300)" >/dev/null 2>&1 &
reader=$!
RELAY_PIDS+=("$reader") # killed at exit
wait_until 20 "the relay to name the long transaction" grep -q "long-running transaction" "$WORK/relay-main.log"

# a stalled writer: its row (key late) has an id drawn now and commits after 6 s
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'late', 'E', '{\"n\": 1}')" \
    -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null &
stalled=$!
# a poison row of key bad (a topic name Kafka refuses) and a later row of the same key
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, topic, payload) VALUES ('order', 'bad', 'E', 'no spaces allowed', '{\"n\": 1}')"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'bad', 'E', '{\"n\": 2}')"
writers 4 1000 50 order
wait "$stalled" || fail "the stalled writer failed"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'late', 'E', '{\"n\": 2}')"
# (while the stalled writer was open its row held the floors back, as it must; from now on
# only the reader is open)
exported main outbox_claims_from_bottom_total || fail "no outbox_claims_from_bottom_total"
b0=$(metric main outbox_claims_from_bottom_total) c0=$(metric main outbox_claims_total)
# 10,000 rows: enough claims for the share from the bottom to mean something. (4,000 were
# enough until keep mode's claims got 4 x faster with JIT off: it drained them in 12-19
# claims, below the 20 this check wants, with 0 from the bottom - the property held, the
# sample was too small: failed 2 runs of 4 at c644cb8, long_transaction_keep.)
writers 4 2500 50 order
parked() { [ "$(count_status FAILED)" = 1 ] && [ "$(count_where "status = 'PENDING' AND aggregate_id <> 'bad'")" = 0 ]; }
wait_until 60 "every row but key bad's SENT, its first parked" parked
b1=$(metric main outbox_claims_from_bottom_total) c1=$(metric main outbox_claims_total)
claims=$((c1 - c0)) bottom=$((b1 - b0))
log "with the reader open: $claims claims, $bottom of them from the bottom"
[ "$claims" -ge 20 ] && [ $((bottom * 4)) -le "$claims" ] ||
    fail "claims did not start above the floors: $bottom of $claims from the bottom"

# requeue below the floors: the parked row (now with a valid topic) goes before key bad's next row
psqlc "UPDATE outbox SET topic = NULL WHERE id = (SELECT id FROM outbox_all WHERE aggregate_id = 'bad' AND status = 'FAILED')"
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" requeue --key bad >>"$WORK/requeue.log" 2>&1 ||
    { cat "$WORK/requeue.log"; fail "requeue exited $?"; }
wait_until 30 "the requeued row and its key's next row SENT" all_sent
grep -q "parked rows were requeued; claiming from the bottom" "$WORK/relay-main.log" ||
    fail "the relay did not notice the requeue"
kill "$reader" 2>/dev/null || true
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact >"$WORK/check-all.out" ||
    { cat "$WORK/check-all.out"; fail "rows lost, repeated or out of order (the late row, the requeued one)"; }
log "ok: $(cat "$WORK/check-all.out")"
