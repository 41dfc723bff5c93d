#!/usr/bin/env bash
# A topic whose partition count grows breaks per-key order for Java-compatible partitioning
# (murmur2 modulo the count). The relay notices it from librdkafka's metadata, logs it once,
# counts it in outbox_topic_partition_changes_total, and keeps relaying.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
ins() {
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'order', 'k' || (g % 50), 'Created', '{}' FROM generate_series(1, $1) g"
}
RELAY_ENV=(OUTBOX_KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS=1000)
start_relay main >/dev/null
ins 300
wait_until 60 "the first rows relayed (topic created with 6 partitions)" all_sent
sleep 6 # one statistics report sees the topic's 6 partitions
[ "$(metric main outbox_topic_partition_changes_total)" = 0 ] || fail "a change counted before any"
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-partitions "$topic" 9 || fail "cannot add partitions"
ins 300
wait_until 60 "the next rows relayed" all_sent
wait_until 30 "the change counted" metric_is main outbox_topic_partition_changes_total 1
grep -q "kafka: topic $topic has 9 partitions, was 6" "$WORK/relay-main.log" || fail "the change was not logged"
stop_relay main || fail "relay exited with $? on SIGTERM"
log "partitions 6 -> 9: logged and counted; relaying went on"
log "ok"
