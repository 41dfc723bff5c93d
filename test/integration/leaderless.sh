#!/usr/bin/env bash
# One Kafka partition without a leader must not stop the keys of the other partitions
# (mock cluster, 3 brokers, 6 partitions). Partition 0 loses its leader while 6,000 rows on
# 300 keys are written; the relay keeps at most its share of the in-flight window (a
# quarter: OUTBOX_MAX_INFLIGHT=600 -> 150 rows) on that partition, leaves the rest of its
# keys PENDING, and every row of the other five partitions' keys is SENT. The leader comes
# back: everything drains, nothing lost, per-key order kept.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
start_mock --brokers 3 --topic "$topic:6"
mock leader "$topic" 0 1 # while it is empty: the leader it gets back at the end
RELAY_ENV=(OUTBOX_MAX_INFLIGHT=600 OUTBOX_BATCH_SIZE=100)
start_relay main >/dev/null

keys_sql="SELECT 'k' || g FROM generate_series(1, 300) g"
insert_rows() { # N: N rows, round robin over the 300 keys, in id order per key
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'order', 'k' || (1 + g % 300), 'Updated', jsonb_build_object('n', g)
           FROM generate_series(1, $1) g"
}
insert_rows 600
wait_until 60 "first rows SENT" all_sent
sleep 6 # the producer's statistics (every 5 s) tell the relay the topic's partition count

# the keys on partition 0, by the Java client's partitioner
psqlc "$keys_sql" | "$RELAYTEST_CHECK_BIN" --partition-of 6 | awk -F'\t' '$2 == 0 { print $1 }' >"$WORK/stuck_keys"
stuck_list=$(sed "s/.*/'&'/" "$WORK/stuck_keys" | paste -sd,)
log "$(wc -l <"$WORK/stuck_keys") of 300 keys are on partition 0"

mock leader "$topic" 0 -1
insert_rows 6000
stuck_rows=$(count_where "status = 'PENDING' AND aggregate_id IN ($stuck_list)")
others=$(count_where "status = 'PENDING' AND aggregate_id NOT IN ($stuck_list)")
log "$stuck_rows rows on partition 0's keys, $others on the other partitions'"
wait_until 90 "every row of the other partitions' keys SENT" rows_are 0 "status = 'PENDING' AND aggregate_id NOT IN ($stuck_list)"
share_only() { [ "$(metric main outbox_inflight_rows)" -le 150 ]; }
wait_until 20 "no more than partition 0's share (150 rows) in flight" share_only
held=$(count_where "status = 'PENDING' AND aggregate_id IN ($stuck_list)")
inflight=$(metric main outbox_inflight_rows)
log "with partition 0 leaderless: $others rows of other keys SENT, $held of partition 0's keys PENDING, $inflight in flight, held back $(metric main outbox_partition_share_held_back_total) times"
[ "$held" -gt 0 ] || fail "partition 0's rows were all sent without a leader?"
metric_at_least main outbox_partition_share_held_back_total 1 || fail "no row was held back"
grep -q "kafka: partition 0 of $topic holds [0-9]* rows unacknowledged" "$WORK/relay-main.log" || fail "no log line names the partition"

mock leader "$topic" 0 1
wait_until 120 "all rows SENT once the partition has a leader" all_sent
grep -q "kafka: partition 0 of $topic drained; its [0-9]* held keys are claimed again" "$WORK/relay-main.log" ||
    fail "no log line says the partition drained"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$topic" || fail "loss or per-key disorder around the leaderless partition"
mock quit
log "ok"
