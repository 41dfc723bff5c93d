#!/usr/bin/env bash
# Exactly-once against the default mode, one run, the same servers (scripts/servers.sh:
# PostgreSQL 15 with fsync on, single-node Kafka 4.1.1), mark mode, release build. Per round
# and mode (off: OUTBOX_EXACTLY_ONCE=0; on: 1), in a fresh database and topic:
#   drain_eps   a backlog of N rows (1 KB JSON over 10,000 keys) drained, rows recorded per s;
#   p50_ms, p99_ms  commit -> consumed with read_committed (bench/e2e_latency.c: now - the
#               message timestamp, which is the row's created_at) with writers at E events/s
#               for S s (pgbench --rate, 8 clients), after the drain;
#   threads, rss_mb  the relay's threads and resident memory at the end of the steady part.
# Prints one line per round and mode, then the medians:
#   RESULT mode=off|on drain_eps=.. p50_ms=.. p99_ms=.. threads=.. rss_mb=..
#   bench/exactly_once.sh [--rows N] [--rate E] [--seconds S] [--rounds R] [--out DIR]
#   (defaults: 100,000 rows, 1,000 events/s, 30 s, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
rows=100000 rate=1000 seconds=30 rounds=3 out=""
common_flags "[--rows N] [--rate E] [--seconds S] [--rounds R] [--out DIR]" \
    "--rows=rows --rate=rate --seconds=seconds --rounds=rounds --out=out" "$@"
common_bench_out exactly-once
common_setup
ninja -C build bench/e2e-latency >/dev/null
export PG_DURABLE=1 RELAYTEST_NO_RABBITMQ=1
trap 'common_stop_relay; [ -z "$lat_pid" ] || kill "$lat_pid" 2>/dev/null || true; servers_stop' EXIT
servers_start
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT

one() { # round mode(off|on): prints "drain_eps p50 p99 threads rss_mb"
    local round=$1 mode=$2 db="eo_${1}_$2" dsn t0 t1 lat_pid prefix
    dsn=$(common_db "$db")
    OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
    common_backlog "$dsn" "$rows" 10000 1000 >/dev/null
    common_writer_sql "$dsn" "$out/writer-$db.sql" 10000 1000
    prefix="bench$round$mode$$"
    export OUTBOX_EXACTLY_ONCE=0 OUTBOX_TRANSACTIONAL_ID_PREFIX="$prefix" OUTBOX_PROGRESS_TOPIC="$prefix.progress"
    [ "$mode" = off ] || OUTBOX_EXACTLY_ONCE=1
    t0=$(date +%s.%N)
    common_relay_drain "$dsn" mark "$prefix.{aggregate_type}" "$out/relay-$db.log" "$rows"
    t1=$(date +%s.%N)
    common_steady "$db" "$bootstrap" "$prefix.order" "$rate" "$seconds" "$out"
    local threads rss
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$relay_pid/status")
    rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$relay_pid/status")
    kill -TERM "$lat_pid"
    wait "$lat_pid" || true
    common_stop_relay
    local p50 p99
    p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    awk -v n="$rows" -v a="$t0" -v b="$t1" -v p50="$p50" -v p99="$p99" -v t="$threads" -v r="$rss" \
        'BEGIN { printf "%.0f %s %s %s %s\n", n / (b - a), p50, p99, t, r }'
}

: >"$out/results.txt" # (an --out folder of an earlier run: its rounds are not this run's)
for round in $(seq 1 "$rounds"); do
    for mode in off on; do
        read -r eps p50 p99 threads rss < <(one "$round" "$mode")
        echo "$mode $eps $p50 $p99 $threads $rss" >>"$out/results.txt"
        say "round $round, exactly-once $mode: drain $eps events/s; at $rate events/s commit -> consumed p50 $p50 ms, p99 $p99 ms; $threads threads, $rss MB"
    done
done
for mode in off on; do
    med() { awk -v m="$mode" -v c="$1" '$1 == m { print $c }' "$out/results.txt" | median; }
    echo "RESULT mode=$mode drain_eps=$(med 2) p50_ms=$(med 3) p99_ms=$(med 4) threads=$(med 5) rss_mb=$(med 6)"
done
