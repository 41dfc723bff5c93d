#!/usr/bin/env bash
# The short chaos run in CI: 20,000 events, 6 SIGKILLs (each after the relay published),
# Kafka restarted twice, PostgreSQL (fsync on) killed with -m immediate once; duplicates
# must show that kills hit rows in flight, and every relay exit is the one we caused.
# RELAYTEST_ON_SENT=delete runs it with acknowledged rows deleted (chaos.sh --on-sent delete);
# RELAYTEST_SINK=rabbitmq with the RabbitMQ sink, the RabbitMQ node restarted instead of Kafka;
# RELAYTEST_EXACTLY_ONCE=1 with OUTBOX_EXACTLY_ONCE=1 (duplicates 0 for read_committed), and
# RELAYTEST_TRANSACTION_GROUPS=4 with four transaction groups besides.
. "$(dirname "$0")/lib.sh"
rc=0
# (delete mode: 10,000 events and 4 kills, for CI's time; the full run takes --on-sent too)
events=20000 kills=6
[ "$ON_SENT" = delete ] && events=10000 kills=4
# A broker of its own (the run restarts it twice), so that it can run beside other tests:
# a Kafka, or with RabbitMQ a node (AMQP, distribution and epmd on three ports).
if [ "$SINK" = kafka ]; then
    own_kafka=$(free_ports 2)
    bash "$RELAYTEST_SRC/test/env/kafka.sh" start "$WORK/kafka" "$own_kafka" >"$WORK/kafka.out" 2>&1 ||
        { cat "$WORK/kafka.out"; fail "the chaos run's Kafka did not start"; }
    trap 'TEST_RC=${TEST_RC:-$?}; bash "$RELAYTEST_SRC/test/env/kafka.sh" kill "$WORK/kafka" >/dev/null 2>&1 || true; cleanup' EXIT
    export RELAYTEST_KAFKA_PORT=$own_kafka RELAYTEST_KAFKA_DIR=$WORK/kafka
else
    own_rabbitmq=$(free_ports 3)
    bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" start "$WORK/rabbitmq" "$own_rabbitmq" >"$WORK/rabbitmq.out" 2>&1 ||
        { cat "$WORK/rabbitmq.out"; fail "the chaos run's RabbitMQ node did not start"; }
    trap 'TEST_RC=${TEST_RC:-$?}; bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" kill "$WORK/rabbitmq" >/dev/null 2>&1 || true; cleanup' EXIT
    export RELAYTEST_RABBITMQ_PORT=$own_rabbitmq RELAYTEST_RABBITMQ_DIR=$WORK/rabbitmq
fi
bash "$RELAYTEST_SRC/test/chaos/chaos.sh" --events $events --kills $kills --keys 300 --clients 6 --on-sent "$ON_SENT" --sink "$SINK" \
    --exactly-once "${RELAYTEST_EXACTLY_ONCE:-0}" --groups "${RELAYTEST_TRANSACTION_GROUPS:-1}" \
    >"$WORK/chaos.out" || rc=$?
cat "$WORK/chaos.out"
[ "$rc" = 0 ] || fail "chaos run failed (exit $rc)"
grep -q "^CHAOS .* lost=0 .* order_violations=0 kills=$kills bad_exits=0$" "$WORK/chaos.out" || fail "chaos run failed"
log "ok"
