#!/usr/bin/env bash
# 10,000 rows over 100 keys from concurrent writers, on 6-partition topics: all SENT,
# each consumed exactly once, per-key order intact, each key in its murmur2 partition.
# With the RabbitMQ sink (RELAYTEST_SINK=rabbitmq): each consumed exactly once from a queue
# bound to the test's exchange, in per-key order, persistent, message_id the event id.
# In keep mode (RELAYTEST_ON_SENT=keep) also: the relay updated and deleted no row of the
# table, and every lease partition's watermark reached its last row once the relay went idle.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
writers 8 1250 100
wait_until 120 "all 10000 rows SENT" all_sent
[ "$(count_status SENT)" = 10000 ] || fail "expected 10000 SENT, got $(count_status SENT)"
[ "$ON_SENT" != keep ] || wait_until 30 "every watermark at its partition's last row" rows_are 0 \
    "id > (SELECT coalesce(max(w), 0) FROM outbox_watermark w WHERE w.lease_partition = outbox_all.lease_partition)"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "the broker's content does not match the table"
[ "$SINK" = rabbitmq ] || { grep -q "partitions" "$WORK/check.err" && grep -q "has 6 partitions" "$WORK/check.err"; } ||
    fail "topic does not have 6 partitions"
if [ "$ON_SENT" = keep ]; then
    written=$(psqlc "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox'")
    [ "$written" = 0 ] || fail "keep mode wrote to $written rows of the table (updates + deletes)"
    # the records stay below W for the audit; none is left above it
    [ "$(psqlc "SELECT count(*) FROM outbox_published pb LEFT JOIN outbox_watermark wm USING (lease_partition)
                WHERE pb.top > coalesce(wm.w, 0)")" = 0 ] || fail "published records left above the watermarks"
    log "keep mode: no row updated or deleted; watermarks $(psqlc "SELECT min(w) || '..' || max(w) FROM outbox_watermark")"
fi
log "ok"
