#!/usr/bin/env bash
# Kafka unavailable for 10 s mid-run: rows stay PENDING, the relay stays up, and the
# backlog drains when the broker returns; nothing lost, per-key order kept.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
writers 4 500 100
wait_until 60 "first rows SENT" all_sent
log "stopping Kafka for 10 s"
kafka_stop
writers 4 500 100
sleep 10
pending=$(count_status PENDING)
kill -0 "$(relay_pid main)" || fail "relay exited while Kafka was down"
log "while Kafka was down: $pending rows PENDING"
[ "$pending" -gt 0 ] || fail "rows were marked SENT while Kafka was down"
kafka_start
wait_until 120 "backlog drained after Kafka returned" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder across a Kafka outage"
log "ok"
