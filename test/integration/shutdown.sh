#!/usr/bin/env bash
# The two shutdown paths the README promises besides the clean one (sigterm.sh):
#   1. deliveries still unacknowledged when OUTBOX_SHUTDOWN_TIMEOUT_MS expires (Kafka
#      unreachable): the relay exits 0 at the timeout and every row stays PENDING;
#   2. a second signal during the shutdown: exit 1 at once;
#   3. SIGTERM while the relay is still starting (its start-up session check waiting on a
#      PostgreSQL that does not answer): a clean exit 0, not death by the signal (143).
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

# ---- 3. SIGTERM during start-up: a PostgreSQL of its own, frozen, so that the relay's
# start-up check waits on it (connect_timeout 3 s)
chmod 755 "$WORK" # the server runs as the postgres user when this runs as root
pg_port=$(free_port)
pg_env start "$WORK/pg" "$pg_port"
pm=$(head -1 "$WORK/pg/data/postmaster.pid")
kill -STOP "$pm"
unfreeze() { kill -CONT "$pm" 2>/dev/null || true; bash "$RELAYTEST_SRC/test/env/pg.sh" stop "$WORK/pg" >/dev/null 2>&1 || true; }
trap 'unfreeze; cleanup' EXIT
RELAY_ENV=(OUTBOX_PG_DSN="host=127.0.0.1 port=$pg_port user=postgres dbname=outbox")
start_relay starting >/dev/null
pid=$(relay_pid starting)
sleep 0.5
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
kill -CONT "$pm"
[ "$rc" = 0 ] || fail "SIGTERM during start-up: exit status $rc (want 0)"
log "3. SIGTERM during start-up: exit 0"
log "ok"
