#!/usr/bin/env bash
# What transaction groups cost (OUTBOX_EXACTLY_ONCE=1, OUTBOX_TRANSACTION_GROUPS), one run, the
# same servers (scripts/servers.sh: PostgreSQL 15 with fsync on, single-node Kafka 4.1.1),
# mark mode, release build. Per round and case, in a fresh database and topic:
#   case gG    one relay with G groups;  case gGx2  two relays of the table with G groups
#   drain_eps  a backlog of N rows (1 KB JSON over 10,000 keys) drained, rows recorded per s
#              (both relays' together in a gGx2 case: they start at once and share the groups)
#   start_ms   from the relay's start to its last group's progress record read (the fences
#              and reads, G init_transactions; the first relay's in a gGx2 case)
#   p50_ms, p99_ms  commit -> consumed with read_committed (bench/e2e_latency.c) with writers
#              at E events/s for S s after the drain (8 clients)
#   threads, rss_mb, kafka_conns  the (first) relay's threads, resident memory and TCP
#              connections to the broker at the end of the steady part
# Prints one line per round and case, then the medians:
#   RESULT case=.. drain_eps=.. start_ms=.. p50_ms=.. p99_ms=.. threads=.. rss_mb=.. kafka_conns=..
#   bench/exactly_once_groups.sh [--cases "g1 g4 g16 g4x2"] [--rows N] [--rate E] [--seconds S]
#                                [--rounds R] [--out DIR]
#   (defaults: those cases, 100,000 rows, 1,000 events/s, 20 s, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
cases="g1 g4 g16 g4x2" rows=100000 rate=1000 seconds=20 rounds=3 out=""
common_flags "[--cases LIST] [--rows N] [--rate E] [--seconds S] [--rounds R] [--out DIR]" \
    "--cases=cases --rows=rows --rate=rate --seconds=seconds --rounds=rounds --out=out" "$@"
common_bench_out exactly-once-groups
common_setup
ninja -C build bench/e2e-latency >/dev/null
export PG_DURABLE=1 RELAYTEST_NO_RABBITMQ=1
second=""
trap 'common_stop_relay; [ -z "$second" ] || kill -TERM "$second" 2>/dev/null || true
      [ -z "$lat_pid" ] || kill "$lat_pid" 2>/dev/null || true; servers_stop' EXIT
servers_start
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT

marked() { metric_at "http://127.0.0.1:$1/metrics" outbox_marked_total 2>/dev/null || echo 0; }

one() { # round case: prints "drain_eps start_ms p50 p99 threads rss_mb kafka_conns"
    local round=$1 c=$2 groups relays=1 db="eog_${1}_$2" dsn t0 t1 prefix port2="" log
    groups=${c#g}
    groups=${groups%x2}
    [ "$c" = "${c%x2}" ] || relays=2
    dsn=$(common_db "$db")
    OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
    common_backlog "$dsn" "$rows" 10000 1000 >/dev/null
    common_writer_sql "$dsn" "$out/writer-$db.sql" 10000 1000
    prefix="benchg$round$c$$"
    export OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTION_GROUPS="$groups" OUTBOX_TRANSACTIONAL_ID_PREFIX="$prefix" \
        OUTBOX_PROGRESS_TOPIC="$prefix.progress"
    log=$out/relay-$db.log
    t0=$(date +%s.%N)
    if [ "$relays" = 2 ]; then
        port2=$(free_ports 1)
        OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=mark OUTBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap \
            OUTBOX_HTTP_ADDR=127.0.0.1:$port2 OUTBOX_TOPIC_TEMPLATE="$prefix.{aggregate_type}" \
            ./build/outbox-relay >>"$out/relay-$db-2.log" 2>&1 &
        second=$!
    fi
    # (common_relay_drain waits for its own relay's count: with two, for the sum here)
    common_relay_drain "$dsn" mark "$prefix.{aggregate_type}" "$log" $((relays == 2 ? 1 : rows))
    while [ "$relays" = 2 ] && [ $(($(marked "$relay_port") + $(marked "$port2"))) -lt "$rows" ]; do
        sleep 0.05
    done
    t1=$(date +%s.%N)
    local start_ms
    start_ms=$(grep "progress record read in" "$log" | head -"$groups" | tail -1 | cut -c1-23 |
        { read -r ts; date -d "${ts/T/ }" +%s.%N; } |
        awk -v a="$t0" '{ printf "%.0f", ($1 - a) * 1000 }')
    common_steady "$db" "$bootstrap" "$prefix.order" "$rate" "$seconds" "$out"
    local threads rss conns
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$relay_pid/status")
    rss=$(awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$relay_pid/status")
    conns=$(ss -tnp state established "( dport = :$RELAYTEST_KAFKA_PORT )" | grep -c "pid=$relay_pid," || true)
    kill -TERM "$lat_pid"
    wait "$lat_pid" || true
    common_stop_relay
    [ -z "$second" ] || { kill -TERM "$second" 2>/dev/null || true; wait "$second" 2>/dev/null || true; second=""; }
    local p50 p99
    p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    awk -v n="$rows" -v a="$t0" -v b="$t1" -v s="$start_ms" -v p50="$p50" -v p99="$p99" -v t="$threads" \
        -v r="$rss" -v k="$conns" 'BEGIN { printf "%.0f %s %s %s %s %s %s\n", n / (b - a), s, p50, p99, t, r, k }'
}

: >"$out/results.txt" # (an --out folder of an earlier run: its rounds are not this run's)
for round in $(seq 1 "$rounds"); do
    for c in $cases; do
        read -r eps start p50 p99 threads rss conns < <(one "$round" "$c")
        echo "$c $eps $start $p50 $p99 $threads $rss $conns" >>"$out/results.txt"
        say "round $round, $c: drain $eps events/s; groups fenced and read $start ms after the start; at $rate events/s commit -> consumed p50 $p50 ms, p99 $p99 ms; $threads threads, $rss MB, $conns connections to Kafka"
    done
done
for c in $cases; do
    med() { awk -v m="$c" -v k="$1" '$1 == m { print $k }' "$out/results.txt" | median; }
    echo "RESULT case=$c drain_eps=$(med 2) start_ms=$(med 3) p50_ms=$(med 4) p99_ms=$(med 5) threads=$(med 6) rss_mb=$(med 7) kafka_conns=$(med 8)"
done
