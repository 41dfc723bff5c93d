#!/usr/bin/env bash
# OUTBOX_ON_SENT=keep: duplicates after a crash stay bounded while the watermark is held
# back. A writer transaction drew an id early and stays open for 60 s (no watermark may pass
# it: the floors' proof stops below it in every partition), and a topic is paused (its rows
# are not published: a topic-level error from librdkafka's mock cluster, as in topic_pause).
# Thousands of rows of the other topic are published meanwhile and recorded above the
# watermarks. The relay is SIGKILLed at 60 s; the one started next republishes only what
# was in flight and not yet recorded: duplicates <= OUTBOX_MAX_INFLIGHT (500 here), although
# every watermark is still below the open writer's row. Then the writer commits, the topic
# comes back, and nothing is lost, per-key order kept.
# (The mock cluster is the fault on top; crash_before_mark_keep shows the bound on the real
# broker without the paused topic and the open writer.)
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db
denied="$TOPIC_PREFIX.payment"
fine="$TOPIC_PREFIX.order"
start_mock --brokers 2 --topic "$denied:6" --topic "$fine:6"
for p in 0 1 2 3 4 5; do
    mock leader "$denied" $p 1
    mock leader "$fine" $p 2
done
mock broker_errors 1 100000 TOPIC_AUTHORIZATION_FAILED
inflight=500
RELAY_ENV=(OUTBOX_TOPIC_PAUSE_MS=2000 OUTBOX_MAX_INFLIGHT=$inflight OUTBOX_BATCH_SIZE=100)
start_relay main >/dev/null

# the open writer: its row's id is drawn now, its transaction ends after 60 s
opened=$(date +%s)
"$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'E', '{}')" \
    -c "SELECT pg_sleep(62)" -c "COMMIT" >/dev/null &
writer=$!
wait_until 10 "the open writer's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = '\''outbox'\''::regclass AND mode = '\''RowExclusiveLock'\'' AND pid <> pg_backend_pid()")" -ge 1 ]'
late=$(psqlc "SELECT last_value FROM outbox_id_seq")
writers 2 100 40 payment
writers 4 1000 400 order
order_sent() { [ "$(psqlc "SELECT count(*) FROM outbox_kept WHERE aggregate_type = 'order' AND status <> 'SENT'")" = 0 ]; }
wait_until 60 "the order rows published" order_sent
grep -q "topic $denied paused" "$WORK/relay-main.log" || fail "the payment topic was never paused"
max_w=$(psqlc "SELECT coalesce(max(w), 0) FROM outbox_watermark")
[ "$max_w" -lt "$late" ] || fail "a watermark ($max_w) passed row $late, whose writer is still open"
recorded=$(psqlc "SELECT coalesce(sum(cardinality(ids)), 0) FROM outbox_published")
log "writer of row $late open, $denied paused: every W below $late (max $max_w), $recorded rows recorded above"
left=$((60 - ($(date +%s) - opened)))
[ "$left" -gt 0 ] && sleep "$left"
log "SIGKILL after the writer has been open $(($(date +%s) - opened)) s"
kill -KILL "$(relay_pid main)"
wait "$(relay_pid main)" 2>/dev/null || true
kill -0 "$writer" 2>/dev/null || fail "the writer ended before the kill"
start_relay main >/dev/null
wait "$writer" || fail "the open writer failed"
for p in 0 1 2 3 4 5; do mock leader "$denied" $p 2; done
wait_until 60 "everything published" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$denied,$fine" --max-duplicates "$inflight" || fail "loss, disorder or more than $inflight duplicates"
log "after the crash: $(check_field duplicates) duplicates (bound $inflight), $(check_field lost) lost"
log "ok"
