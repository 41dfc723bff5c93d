#!/usr/bin/env bash
# Kafka unavailable for 10 s mid-run: rows stay PENDING, the relay stays up, and the
# backlog drains when the broker returns; nothing lost, per-key order kept. Not one row is
# marked SENT while the broker is down, and the outage counts no attempt (with
# OUTBOX_MAX_ATTEMPTS=1 one counted failure would park a row).
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1)
start_relay main >/dev/null
writers 4 500 100
wait_until 60 "first rows SENT" all_sent
log "stopping Kafka for 10 s"
kafka_stop
# the suite's broker comes back whatever happens here: a failure must not take it from the tests after
trap 'TEST_RC=${TEST_RC:-$?}; port_open "$RELAYTEST_KAFKA_PORT" || kafka_start; cleanup' EXIT
sent0=$(count_status SENT)
writers 4 500 100
sleep 10
pending=$(count_status PENDING)
kill -0 "$(relay_pid main)" || fail "relay exited while Kafka was down"
log "while Kafka was down: $pending rows PENDING, $(count_status SENT) SENT (before: $sent0)"
[ "$(count_status SENT)" = "$sent0" ] || fail "$(($(count_status SENT) - sent0)) rows were marked SENT while Kafka was down"
[ "$pending" = 2000 ] || fail "$pending of the 2000 rows written during the outage PENDING"
kafka_start
wait_until 120 "backlog drained after Kafka returned" all_sent
[ "$(count_where "attempts > 0")" = 0 ] || fail "the outage counted attempts on $(count_where "attempts > 0") rows"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder across a Kafka outage"
log "ok"
