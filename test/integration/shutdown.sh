#!/usr/bin/env bash
# The two shutdown paths the README promises besides the clean one (sigterm.sh):
#   1. deliveries still unacknowledged when OUTBOX_SHUTDOWN_TIMEOUT_MS expires (Kafka
#      unreachable): the relay exits 0 at the timeout and every row stays PENDING;
#   2. a second signal during the shutdown: exit 1 at once.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 20), 'Created', '{}' FROM generate_series(1, 500) g"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---- 1. the shutdown timeout
RELAY_ENV=(OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1 OUTBOX_SHUTDOWN_TIMEOUT_MS=2000)
start_relay t >/dev/null
wait_until 30 "rows claimed and handed to the producer" metric_at_least t outbox_inflight_rows 1
start=$(now_ms)
rc=0
stop_relay t || rc=$?
took=$(($(now_ms) - start))
[ "$rc" = 0 ] || fail "exit status $rc after the shutdown timeout (want 0)"
grep -q "shutdown: timed out with [1-9][0-9]* deliveries unacknowledged" "$WORK/relay-t.log" ||
    fail "the shutdown timeout was not logged"
[ "$took" -ge 1900 ] && [ "$took" -lt 10000 ] || fail "exited after $took ms (timeout 2000 ms)"
[ "$(count_status PENDING)" = 500 ] || fail "$(count_status PENDING) of 500 rows PENDING after the timeout"
log "1. shutdown timeout: exit 0 after $took ms, 500 rows still PENDING"

# ---- 2. a second signal
RELAY_ENV=(OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1 OUTBOX_SHUTDOWN_TIMEOUT_MS=60000)
start_relay s >/dev/null
wait_until 30 "rows claimed and handed to the producer" metric_at_least s outbox_inflight_rows 1
pid=$(relay_pid s)
kill -TERM "$pid"
wait_until 10 "the first signal starts the shutdown" grep -q "shutdown: stop claiming" "$WORK/relay-s.log"
start=$(now_ms)
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
took=$(($(now_ms) - start))
[ "$rc" = 1 ] || fail "exit status $rc after a second signal (want 1)"
[ "$took" -lt 2000 ] || fail "a second signal took $took ms to end the relay"
grep -q "shutdown: second signal, exiting at once" "$WORK/relay-s.log" || fail "the second signal was not logged"
log "2. second signal: exit 1 after $took ms"
log "ok"
