#!/usr/bin/env bash
# A RabbitMQ node that blocks publishers (a memory alarm: vm_memory_high_watermark lowered
# at run time, so the broker sends connection.blocked and stops reading): the relay does not
# freeze. While publishing waits, /healthz and /metrics answer, the relay keeps its lease
# partitions past OUTBOX_LEASE_TIMEOUT_MS (its PostgreSQL work goes on), nothing is marked
# SENT (no confirm came), the confirms that never come time out
# (OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=2000: the connection is made anew, the rows stay
# PENDING), and SIGTERM ends it within OUTBOX_SHUTDOWN_TIMEOUT_MS + 2 s. Once
# the alarm clears, a new relay publishes every row (lost 0).
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
rmq() { bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" ctl "$RELAYTEST_RABBITMQ_DIR" "$@"; }
unblock() { rmq set_vm_memory_high_watermark 0.2 >/dev/null 2>&1 || true; }
trap 'TEST_RC=${TEST_RC:-$?}; unblock; cleanup' EXIT
setup_db
rmq set_vm_memory_high_watermark absolute 1MB >/dev/null || fail "cannot lower the memory watermark"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g, 'pad', repeat('b', 1000))
       FROM generate_series(1, 20000) g"
RELAY_ENV=(OUTBOX_SHUTDOWN_TIMEOUT_MS=3000 OUTBOX_LEASE_TIMEOUT_MS=3000 OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=2000)
start_relay blocked >/dev/null
wait_until 30 "the relay to see the broker block publishing" grep -q "rabbitmq: the broker blocks publishing" "$WORK/relay-blocked.log"
port=$(http_port blocked)
for i in 1 2 3 4 5 6 7 8; do
    curl -sf --max-time 2 "http://127.0.0.1:$port/healthz" >/dev/null || fail "/healthz did not answer within 2 s while the broker blocks (try $i)"
    curl -sf --max-time 2 "http://127.0.0.1:$port/metrics" >/dev/null || fail "/metrics did not answer within 2 s while the broker blocks (try $i)"
    sleep 1
done
held=$(metric blocked outbox_lease_partitions_held)
[ "$held" = 64 ] || fail "the relay holds $held lease partitions after 8 s blocked (lease timeout 3 s), not 64"
[ "$(count_status SENT)" = 0 ] || fail "$(count_status SENT) rows marked SENT while the broker blocked every publish"
grep -q "rabbitmq: no publisher confirm for row [0-9]* within 2000 ms (the broker blocks publishing)" "$WORK/relay-blocked.log" ||
    fail "no confirm timed out in 8 s blocked (OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=2000)"
log "blocked 8 s: /healthz and /metrics answered, 64 partitions held, 0 SENT, $(grep -c "rabbitmq: no publisher confirm" "$WORK/relay-blocked.log") confirm timeouts"
start=$(date +%s%N)
rc=0
stop_relay blocked || rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
[ "$elapsed_ms" -le 5000 ] || fail "SIGTERM took $elapsed_ms ms while the broker blocks (shutdown timeout 3000 ms + 2 s)"
[ "$rc" = 0 ] || fail "exit status $rc after the shutdown timeout while the broker blocks (want 0, as with Kafka: shutdown.sh)"
log "SIGTERM while blocked: exit $rc after $elapsed_ms ms"
unblock
RELAY_ENV=()
start_relay after >/dev/null
wait_until 120 "every row SENT once the alarm cleared" all_sent
stop_relay after || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "rows lost after the broker blocked publishing"
log "ok"
