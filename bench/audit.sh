#!/usr/bin/env bash
# outbox-relay audit on a large window: EVENTS rows (default 500,000, 1 KB payloads, 10,000
# keys) relayed to a 6-partition topic, then audited. Prints the audit's wall time, its
# rate and its peak RSS (bounded: the messages go to a temporary table, not to memory).
#   bench/audit.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-500000}
. scripts/common.sh
common_bench
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'audit', 'k' || (g % 10000), 'Updated', jsonb_build_object('n', g, 'pad', repeat('x', 1000))
       FROM generate_series(1, $events) g"
export OUTBOX_PG_DSN=$dsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT OUTBOX_HTTP_ADDR= OUTBOX_LOG_LEVEL=warn
work=$(mktemp -d)
./build/outbox-relay >"$work/relay.log" 2>&1 &
relay=$!
BENCH_PIDS+=("$relay")
until [ "$(psqlc "SELECT count(*) FROM outbox WHERE status = 'PENDING'")" = 0 ]; do sleep 1; done
kill -TERM "$relay"
wait "$relay" || true
start=$(date +%s.%N)
/usr/bin/time -f "%M" -o "$work/rss" ./build/outbox-relay audit --json >"$work/audit.json" 2>"$work/audit.log" || {
    tail -5 "$work/audit.log"
    exit 1
}
end=$(date +%s.%N)
jq -c '{committed, delivered, lost, duplicates, order_violations, completion_ms}' "$work/audit.json"
awk -v n="$events" -v s="$start" -v e="$end" -v rss="$(cat "$work/rss")" 'BEGIN {
    printf "audit of %d rows: %.1f s, %.0f rows/s, peak RSS %.1f MB\n", n, e - s, n / (e - s), rss / 1024 }'
rm -rf "$work"
