#!/usr/bin/env bash
# Keep mode's watermark audit at the pace a large table needs: a table retaining N ids
# (default 6,000,000: what 10,000 events/s leave in 10 minutes), every row published (records
# and watermarks as a relay leaves them, written by SQL), OUTBOX_RETENTION R (default 600 s),
# so the audit must pass over the table within R/4 (150 s): the span a turn covers is then
# what 24 h at 10,000 events/s needs (900,001 ids a turn, keep.c). Beside it, writers at E
# events/s (default 1,000) that the relay publishes.
#   bench/audit_pace.sh [--retained N] [--retention SECONDS] [--rate E] [--seconds S] [--out DIR]
# Starts its own PostgreSQL 15 (pg_stat_statements loaded) and Kafka. Over S seconds (default
# 240) it prints every 10 s the audit's whole passes (outbox_watermark_audit_passes_total) and
# the writers' backlog; then
#   RESULT audit_pace first_pass_all_s=..  (seconds until every one of the 64 partitions
#            finished a whole pass; the target is R/4)  pass_s=.. (the last pass's length)
#          audit_ms_per_s=.. (the audit statement's execution time per second of wall time,
#            pg_stat_statements: on a server with cores to spare, its CPU) needed_rows_per_s=..
#            (4 N / R: the retained rows a pass within R/4 reads per second)
#          audit_exec_us_per_event=.. (that time per event of the rate the table stands for, N / R)
#          turn_ms_mean=.. turn_ms_max=.. turns=.. (per turn) max_pending=.. (the writers' rows
#            not yet published, every 10 s)
#          sessions_cpu_pct=.. (CPU of the relay's PostgreSQL sessions, % of a core)
set -euo pipefail
cd "$(dirname "$0")/.."
retained=6000000 retention=600 rate=1000 seconds=240 out=""
. scripts/common.sh
common_flags "[--retained N] [--retention SECONDS] [--rate E] [--seconds S] [--out DIR]" \
    "--retained=retained --retention=retention --rate=rate --seconds=seconds --out=out" "$@"
common_bench_out audit_pace
common_setup
export RELAYTEST_NO_RABBITMQ=1 PG_DURABLE=1
export PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.max = 1000"
relay_pid="" w_pid=""
trap 'kill $w_pid 2>/dev/null || true; common_stop_relay; servers_stop' EXIT
servers_start
dsn=$(common_db audit_pace)
admin="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres"
psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
psqlc "CREATE EXTENSION pg_stat_statements"
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep ./build/outbox-relay migrate >"$out/migrate.log" 2>&1
say "filling $retained published rows (records of about 4 ids each, as marks at a high rate leave them)"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 10000), 'Created', '{\"n\": 1}' FROM generate_series(1, $retained) g"
psqlc "INSERT INTO outbox_published (lease_partition, low, top, ids)
       SELECT lease_partition, min(id), max(id), array_agg(id ORDER BY id) FROM outbox GROUP BY lease_partition, id / 256"
psqlc "INSERT INTO outbox_watermark (lease_partition, w, relay) SELECT lease_partition, max(id), 'filled' FROM outbox GROUP BY 1"
psqlc "VACUUM ANALYZE outbox"
psqlc "VACUUM ANALYZE outbox_published"
common_writer_sql "$dsn" "$out/writer.sql" 10000 1000
port=$(free_ports 1)
url="http://127.0.0.1:$port/metrics"
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep OUTBOX_RETENTION=${retention}s OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT \
    OUTBOX_HTTP_ADDR=127.0.0.1:$port OUTBOX_TOPIC_TEMPLATE=audit_pace OUTBOX_LOG_LEVEL=info \
    ./build/outbox-relay >"$out/relay.log" 2>&1 &
relay_pid=$!
until metric_at "$url" outbox_watermark_audits_total >/dev/null 2>&1; do sleep 0.2; done
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 4 -j 1 -R "$rate" \
    -T "$seconds" -f "$out/writer.sql" audit_pace >"$out/pgbench.txt" 2>&1 &
w_pid=$!
psqlc "SELECT pg_stat_statements_reset()" >/dev/null
sessions() { common_session_ticks "$admin" audit_pace | awk '{ t += $2 } END { print t + 0 }'; }
s0=$(sessions) t0=$(date +%s.%N) start=$SECONDS first_all="" max_pending=0
while [ $((SECONDS - start)) -lt "$seconds" ]; do
    sleep 10
    passes=$(metric_at "$url" outbox_watermark_audit_passes_total)
    published=$(metric_at "$url" outbox_published_total)
    written=$(psqlc "SELECT count(*) FROM outbox WHERE id > $retained")
    pending=$((written - published))
    [ "$pending" -gt "$max_pending" ] && max_pending=$pending
    [ -z "$first_all" ] && [ "$passes" -ge 64 ] && first_all=$((SECONDS - start))
    say "t=$((SECONDS - start))s passes=$passes pending=$pending published=$published"
done
s1=$(sessions) t1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
pass_s=$(metric_at "$url" outbox_watermark_audit_pass_seconds | awk '{ printf "%.1f", $1 }')
read -r calls total p50 mx < <(psqlc "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 1),
       round(max_exec_time::numeric, 1) FROM pg_stat_statements WHERE query LIKE '%EXCEPT SELECT i FROM%'" | tr '|' ' ')
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
printf 'RESULT audit_pace first_pass_all_s=%s pass_s=%s audit_ms_per_s=%s needed_rows_per_s=%s audit_exec_us_per_event=%s turn_ms_mean=%s turn_ms_max=%s turns=%s max_pending=%s sessions_cpu_pct=%s retained=%s retention=%s rate=%s seconds=%s\n' \
    "${first_all:-none}" "$pass_s" \
    "$(awk -v t="$total" -v w="$wall" 'BEGIN { printf "%.1f", t / w }')" \
    "$(awk -v n="$retained" -v r="$retention" 'BEGIN { printf "%.0f", 4 * n / r }')" \
    "$(awk -v t="$total" -v w="$wall" -v n="$retained" -v r="$retention" 'BEGIN { printf "%.2f", t / w * 1000 / (n / r) }')" \
    "$p50" "$mx" "$calls" "$max_pending" \
    "$(awk -v a="$s0" -v b="$s1" -v hz="$hz" -v w="$wall" 'BEGIN { printf "%.1f", (b - a) / hz / w * 100 }')" \
    "$retained" "$retention" "$rate" "$seconds"
say "raw data in $out"
