#!/usr/bin/env bash
# 10,000 rows over 100 keys from concurrent writers, on 6-partition topics: all SENT,
# each consumed exactly once, per-key order intact, each key in its murmur2 partition.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
writers 8 1250 100
wait_until 120 "all 10000 rows SENT" all_sent
[ "$(count_status SENT)" = 10000 ] || fail "expected 10000 SENT, got $(count_status SENT)"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "Kafka content does not match the table"
grep -q "partitions" "$WORK/check.err" && grep -q "has 6 partitions" "$WORK/check.err" ||
    fail "topic does not have 6 partitions"
log "ok"
