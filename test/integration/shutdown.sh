#!/usr/bin/env bash
# The two shutdown paths the guarantees promise (docs/RELIABILITY.md, Clean stop) besides the clean one (sigterm.sh):
#   1. deliveries still unacknowledged when OUTBOX_SHUTDOWN_TIMEOUT_MS expires (Kafka
#      unreachable): the relay exits 0 at the timeout and every row stays PENDING;
#   2. a second signal during the shutdown: exit 1 at once;
#   3. SIGTERM while the relay is still starting (its start-up session check waiting on a
#      PostgreSQL that does not answer): a clean exit 0, not death by the signal (143);
#   4. a real broker that takes the Produce requests and never answers them (the project's
#      fault proxy holds every response): exit 0 within the timeout + 2 s, every row sent
#      after the broker went silent still PENDING, and SENT grows by at most the in-flight
#      window after the signal (the relay stops claiming).
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

# ---- 4. a broker that never acknowledges
proxied_kafka
# (the lease timeout is the default, 10 s: its client deadline, 3 s, fell inside the wait
# and purged the queue until the draining relay kept its session in contact)
RELAY_ENV=(OUTBOX_SHUTDOWN_TIMEOUT_MS=3000 OUTBOX_MAX_INFLIGHT=1000)
start_relay silent >/dev/null
wait_until 60 "the 500 rows relayed through the proxy" all_sent
proxy hold on
requests0=$(proxy_stat produce_requests)
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 20), 'Created', '{}' FROM generate_series(1, 3000) g"
reached() { [ "$(proxy_stat produce_requests)" -gt "$requests0" ]; }
wait_until 30 "Produce requests to reach the silent broker" reached
sent0=$(count_status SENT)
start=$(now_ms)
rc=0
stop_relay silent || rc=$?
took=$(($(now_ms) - start))
[ "$rc" = 0 ] || fail "exit status $rc after the shutdown timeout with a silent broker (want 0)"
[ "$took" -le 5000 ] || fail "exited after $took ms with a silent broker (timeout 3000 ms + 2 s)"
grep -q "shutdown: timed out with [1-9][0-9]* deliveries unacknowledged" "$WORK/relay-silent.log" ||
    fail "the shutdown timeout was not logged"
[ "$(count_status SENT)" = 500 ] && [ "$(count_status PENDING)" = 3000 ] ||
    fail "with the broker silent since 500 rows: $(count_status SENT) SENT, $(count_status PENDING) PENDING (want 500, 3000)"
[ $(($(count_status SENT) - sent0)) -le 1000 ] || fail "SENT grew by more than the window after the signal"
log "4. silent broker ($(($(proxy_stat produce_requests) - requests0)) Produce requests unanswered): exit 0 after $took ms, the 3000 rows still PENDING"
proxy hold off

# ---- 3. SIGTERM during start-up: a PostgreSQL of its own, frozen, so that the relay's
# start-up check waits on it (connect_timeout 3 s)
chmod 755 "$WORK" # the server runs as the postgres user when this runs as root
pg_port=$(free_port)
pg_env start "$WORK/pg" "$pg_port"
pm=$(head -1 "$WORK/pg/data/postmaster.pid")
kill -STOP "$pm"
unfreeze() { kill -CONT "$pm" 2>/dev/null || true; bash "$RELAYTEST_SRC/test/env/pg.sh" stop "$WORK/pg" >/dev/null 2>&1 || true; }
trap 'TEST_RC=${TEST_RC:-$?}; unfreeze; proxied_cleanup' EXIT
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
