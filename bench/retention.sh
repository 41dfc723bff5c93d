#!/usr/bin/env bash
# Retention keeps the table bounded: writers push EVENTS events (default 1,000,000) through
# the outbox while the relay publishes them and deletes SENT rows older than RETENTION
# (default 30s). Reports live rows and pg_total_relation_size at the start, middle and end.
#   bench/retention.sh [EVENTS] [RETENTION]
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-1000000} retention=${2:-30s}
. scripts/common.sh
common_bench
psqlc "CREATE TABLE aggregate (id int PRIMARY KEY, version int NOT NULL DEFAULT 0);
       INSERT INTO aggregate SELECT g FROM generate_series(1, 10000) g"
work=$(mktemp -d)
cat >"$work/writer.sql" <<'SQL'
\set k random(1, 10000)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('ret', 'k' || :k, 'Updated', jsonb_build_object('k', :k, 'pad', repeat('x', 1000)));
COMMIT;
SQL
OUTBOX_PG_DSN=$dsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT OUTBOX_RETENTION=$retention \
    OUTBOX_HTTP_ADDR= OUTBOX_LOG_LEVEL=warn ./build/outbox-relay >"$work/relay.log" 2>&1 &
relay=$!
BENCH_PIDS+=("$relay")
sample() {
    psqlc "SELECT '$1: events written ' || (SELECT coalesce(max(id), 0) FROM outbox) || ', live rows '
           || (SELECT count(*) FROM outbox) || ', SENT ' || (SELECT count(*) FROM outbox WHERE status = 'SENT')
           || ', pg_total_relation_size ' || pg_size_pretty(pg_total_relation_size('outbox'))
           || ' (' || pg_total_relation_size('outbox') || ' bytes)'"
}
per_client=$((events / 8))
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -t "$per_client" \
    -f "$work/writer.sql" outbox >"$work/pgbench.log" 2>&1 &
writers=$!
sleep 20
sample start
while [ "$(psqlc "SELECT coalesce(max(id), 0) FROM outbox")" -lt $((events / 2)) ]; do sleep 2; done
sample middle
wait "$writers"
until [ "$(psqlc "SELECT count(*) FROM outbox WHERE status = 'PENDING'")" = 0 ]; do sleep 1; done
sample end
grep -E "^tps" "$work/pgbench.log"
rm -rf "$work"
