#!/usr/bin/env bash
# What the payload column's type costs: the relay draining the same backlog from a jsonb, a
# json, a text and a bytea payload column (OUTBOX_PAYLOAD_TYPE; docs/OUTBOX-TABLE.md).
#   bench/payloads.sh [--rows N] [--rounds R] [--on-sent keep|mark|delete] [--out DIR]
#   (defaults: 100,000 rows, 3 rounds, keep)
# Starts its own PostgreSQL 15 (durable) and Kafka like bench/bench.sh. Each round, for each
# type: a database with the table migrated for it, N rows of about 1 KB over 1,000 keys (the
# same JSON text in every type; bytea its UTF-8 bytes), VACUUM ANALYZE and a CHECKPOINT, then
# the relay (release build) started and timed until it recorded all N. Prints per round, then
# one RESULT line per type with the medians:
#   RESULT payload=.. rows=.. on_sent=.. drain_eps=.. pg_cpu_us_per_event=.. relay_cpu_us_per_event=..
# (pg_cpu: the whole server's CPU over the drain, scripts/common.sh pg_ticks.)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
rows=100000 rounds=3 on_sent=keep out=""
. scripts/common.sh
common_flags "[--rows N] [--rounds R] [--on-sent keep|mark|delete] [--out DIR]" \
    "--rows=rows --rounds=rounds --on-sent=on_sent --out=out" "$@"
common_bench_out payloads
common_setup
relay_bin=$src/build/outbox-relay
trap 'common_stop_relay; servers_stop' EXIT
export PG_DURABLE=1
servers_start
tick=$(getconf CLK_TCK)
text="jsonb_build_object('n', g, 'pad', repeat('x', 970))::text"
for r in $(seq 1 "$rounds"); do
    for type in jsonb json text bytea; do
        db=p_${type}_$r
        dsn=$(common_db "$db")
        OUTBOX_PG_DSN=$dsn OUTBOX_PAYLOAD_TYPE=$type "$relay_bin" migrate >"$out/migrate-$db.log" 2>&1
        case $type in
            bytea) value="convert_to($text, 'UTF8')" ;;
            *) value="($text)::$type" ;;
        esac
        "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$dsn" \
            -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
                SELECT 'p$r', 'k' || (g % 1000), 'Created', $value FROM generate_series(1, $rows) g" \
            -c "VACUUM ANALYZE outbox" -c "CHECKPOINT"
        p0=$(pg_ticks) t0=$(date +%s%3N)
        common_relay_drain "$dsn" "$on_sent" "payloads.$type.{aggregate_type}" "$out/relay-$type.log" "$rows"
        t1=$(date +%s%3N) p1=$(pg_ticks)
        c=$(awk '{ print $14 + $15 }' "/proc/$relay_pid/stat")
        common_stop_relay
        awk -v n="$rows" -v ms=$((t1 - t0)) 'BEGIN { printf "%.0f\n", n * 1000 / ms }' >>"$out/$type-eps.txt"
        awk -v c=$((p1 - p0)) -v n="$rows" -v hz="$tick" 'BEGIN { printf "%.1f\n", c / hz * 1e6 / n }' >>"$out/$type-pg.txt"
        awk -v c="$c" -v n="$rows" -v hz="$tick" 'BEGIN { printf "%.1f\n", c / hz * 1e6 / n }' >>"$out/$type-relay.txt"
        say "round $r: $type drain $(tail -1 "$out/$type-eps.txt") events/s, PostgreSQL $(tail -1 "$out/$type-pg.txt") us/event," \
            "relay $(tail -1 "$out/$type-relay.txt") us/event"
    done
done
for type in jsonb json text bytea; do
    echo "RESULT payload=$type rows=$rows on_sent=$on_sent drain_eps=$(median <"$out/$type-eps.txt")" \
        "pg_cpu_us_per_event=$(median <"$out/$type-pg.txt") relay_cpu_us_per_event=$(median <"$out/$type-relay.txt")"
done
