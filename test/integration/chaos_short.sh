#!/usr/bin/env bash
# The short chaos run in CI: 20,000 events, 6 SIGKILLs (each after the relay published),
# Kafka restarted twice, PostgreSQL (fsync on) killed with -m immediate once; duplicates
# must show that kills hit rows in flight, and every relay exit is the one we caused.
# RELAYTEST_ON_SENT=delete runs it with acknowledged rows deleted (chaos.sh --on-sent delete);
# RELAYTEST_SINK=rabbitmq with the RabbitMQ sink, the RabbitMQ node restarted instead of Kafka.
. "$(dirname "$0")/lib.sh"
rc=0
# (delete mode: 10,000 events and 4 kills, for CI's time; the full run takes --on-sent too)
events=20000 kills=6
[ "$ON_SENT" = delete ] && events=10000 kills=4
bash "$RELAYTEST_SRC/test/chaos/chaos.sh" --events $events --kills $kills --keys 300 --clients 6 --on-sent "$ON_SENT" --sink "$SINK" \
    >"$WORK/chaos.out" || rc=$?
cat "$WORK/chaos.out"
[ "$rc" = 0 ] || fail "chaos run failed (exit $rc)"
grep -q "^CHAOS .* lost=0 .* order_violations=0 kills=$kills bad_exits=0$" "$WORK/chaos.out" || fail "chaos run failed"
log "ok"
