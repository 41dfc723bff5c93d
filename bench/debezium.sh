#!/usr/bin/env bash
# Side by side with Debezium on one Debezium outbox table: how fast each gets a committed
# backlog into Kafka, and what each costs in memory and CPU.
#   bench/debezium.sh [--rows N] [--rounds R] [--out DIR]   (defaults: 100,000 rows, 3 rounds)
# Starts its own PostgreSQL (durable, wal_level=logical) and Kafka like bench/bench.sh, and
# Kafka Connect 4.1.1 standalone with Debezium 3.6.1's PostgreSQL connector and outbox event
# router (String converters; test/env/connect.sh; the JVM with its defaults and a 1 GB heap).
# Each round:
#   Debezium: the relay stopped, Connect streaming from a new slot; N rows of 1 KB over
#             1,000 keys committed in one transaction; timed from the commit until its
#             topic holds N messages (its CPU counted from before the insert).
#   relay:    Connect stopped; the same N rows committed again; the relay (OUTBOX_LAYOUT=
#             debezium, release build, delete-on-send) started; timed from its start until
#             its topic holds N messages.
# Each side has the CPU to itself while it drains. Prints the medians and
#   RESULT debezium_side_by_side rows=.. debezium_eps=.. relay_eps=.. ratio=..
#          debezium_rss_mb=.. relay_rss_mb=.. debezium_cpu_us_per_event=.. relay_cpu_us_per_event=..
# (rss: the process's peak resident set, VmHWM; cpu: user+system time of the process over
# the drain per event; for Debezium the Connect worker's JVM).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
rows=100000 rounds=3 out=""
. scripts/common.sh
common_flags "[--rows N] [--rounds R] [--out DIR]" "--rows=rows --rounds=rounds --out=out" "$@"
common_bench_out debezium-bench

common_setup
bash test/env/connect.sh fetch
ninja -C build test/kafka-admin >/dev/null
relay_bin=$src/build/outbox-relay admin=$src/build/test/kafka-admin
relay_pid=""
stop_relay() { [ -z "$relay_pid" ] || { kill -TERM "$relay_pid" 2>/dev/null || true; wait "$relay_pid" 2>/dev/null || true; relay_pid=""; }; }
trap 'stop_relay; bash test/env/connect.sh stop "$out/connect" >/dev/null 2>&1 || true; servers_stop' EXIT
export PG_DURABLE=1 PG_EXTRA_CONF="wal_level = logical"
# Connect as one would run it (the JVM's own collector and JIT, a 1 GB heap), not as the
# tests start it; Debezium's and Connect's other settings are their defaults.
export CONNECT_JVM_OPTS="-Xms1g -Xmx1g"
servers_start
dsn=$(common_db dbz)
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
OUTBOX_PG_DSN=$dsn OUTBOX_LAYOUT=debezium "$relay_bin" migrate >"$out/migrate.log" 2>&1

bash test/env/connect.sh outbox-connector outbox-bench "$RELAYTEST_PG_PORT" dbz 'bench.dbz.${routedByValue}' \
    >"$out/connector.properties"

backlog() { # AGGREGATE_TYPE: N rows in one transaction, as Debezium's writers shape them
    psqlc "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
           SELECT gen_random_uuid(), '$1', 'k' || (g % 1000), 'Created',
                  jsonb_build_object('n', g, 'pad', repeat('x', 970))
           FROM generate_series(1, $rows) g"
}
count() { "$admin" --bootstrap "$bootstrap" count "$1" 6; }
wait_count() { # TOPIC: until it holds $rows messages (at most 600 s)
    local deadline=$((SECONDS + 600))
    until [ "$(count "$1")" -ge "$rows" ]; do
        [ $SECONDS -lt $deadline ] || { say "timed out on $1 at $(count "$1") of $rows"; exit 1; }
        sleep 0.05
    done
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hwm_mb() { awk '/VmHWM/ { printf "%.1f\n", $2 / 1024 }' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
tick=$(getconf CLK_TCK)

for r in $(seq 1 "$rounds"); do
    # Debezium: Connect streaming; the backlog committed; until its topic holds it all.
    topic_d=r$r
    "$admin" --bootstrap "$bootstrap" create-topic "bench.dbz.$topic_d" 6 >/dev/null
    bash test/env/connect.sh start "$out/connect" "$bootstrap" "$out/connector.properties" >/dev/null
    jpid=$(cat "$out/connect/connect.pid")
    until [ "$(psqlc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'outbox_bench' AND active")" = 1 ]; do
        sleep 0.2
    done
    sleep 2 # the connector's own start-up CPU is not the drain's
    c0=$(cpu_ticks "$jpid")
    backlog "$topic_d" # pgoutput sends a transaction's changes once it committed
    t0=$(now_ms)
    wait_count "bench.dbz.$topic_d"
    t1=$(now_ms)
    c1=$(cpu_ticks "$jpid")
    hwm_mb "$jpid" >>"$out/debezium_rss.txt"
    awk -v n="$rows" -v ms=$((t1 - t0)) 'BEGIN { printf "%.0f\n", n * 1000 / ms }' >>"$out/debezium_eps.txt"
    awk -v n="$rows" -v c=$((c1 - c0)) -v hz="$tick" 'BEGIN { printf "%.1f\n", c / hz * 1e6 / n }' >>"$out/debezium_cpu.txt"
    say "round $r: Debezium $(tail -1 "$out/debezium_eps.txt") events/s ($((t1 - t0)) ms), peak RSS $(tail -1 "$out/debezium_rss.txt") MB, $(tail -1 "$out/debezium_cpu.txt") us CPU per event"
    bash test/env/connect.sh stop "$out/connect"
    # the next round's Debezium starts afresh: no slot, no offsets (it would otherwise read
    # the relay's round from the WAL first)
    psqlc "SELECT pg_drop_replication_slot('outbox_bench')" >/dev/null
    rm -f "$out/connect/offsets"
    psqlc "DELETE FROM outbox" # Debezium leaves its rows (its writers delete them)

    # The relay: the same backlog committed, the relay started, until its topic holds it all.
    topic_r=r$r
    "$admin" --bootstrap "$bootstrap" create-topic "bench.relay.$topic_r" 6 >/dev/null
    backlog "$topic_r"
    psqlc "VACUUM ANALYZE outbox"
    t0=$(now_ms)
    OUTBOX_PG_DSN=$dsn OUTBOX_LAYOUT=debezium OUTBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap OUTBOX_HTTP_ADDR= \
        OUTBOX_TOPIC_TEMPLATE="bench.relay.{aggregate_type}" "$relay_bin" >>"$out/relay.log" 2>&1 &
    relay_pid=$!
    wait_count "bench.relay.$topic_r"
    t1=$(now_ms)
    c1=$(cpu_ticks "$relay_pid")
    hwm_mb "$relay_pid" >>"$out/relay_rss.txt"
    stop_relay
    awk -v n="$rows" -v ms=$((t1 - t0)) 'BEGIN { printf "%.0f\n", n * 1000 / ms }' >>"$out/relay_eps.txt"
    awk -v n="$rows" -v c="$c1" -v hz="$tick" 'BEGIN { printf "%.1f\n", c / hz * 1e6 / n }' >>"$out/relay_cpu.txt"
    say "round $r: relay $(tail -1 "$out/relay_eps.txt") events/s ($((t1 - t0)) ms), peak RSS $(tail -1 "$out/relay_rss.txt") MB, $(tail -1 "$out/relay_cpu.txt") us CPU per event"
    psqlc "VACUUM outbox"
done
d=$(median <"$out/debezium_eps.txt") rl=$(median <"$out/relay_eps.txt")
echo "RESULT debezium_side_by_side rows=$rows debezium_eps=$d relay_eps=$rl ratio=$(awk -v a="$rl" -v b="$d" 'BEGIN { printf "%.2f", a / b }')" \
    "debezium_rss_mb=$(median <"$out/debezium_rss.txt") relay_rss_mb=$(median <"$out/relay_rss.txt")" \
    "debezium_cpu_us_per_event=$(median <"$out/debezium_cpu.txt") relay_cpu_us_per_event=$(median <"$out/relay_cpu.txt")"
