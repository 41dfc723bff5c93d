#!/usr/bin/env bash
# Side by side with Debezium, on the same PostgreSQL and Kafka in one run: what each costs the
# database, what it costs the writers, how fast and how soon it delivers, what it costs itself.
#   bench/debezium.sh [--rows N] [--rounds R] [--seconds S] [--rate E] [--modes "mark delete keep"]
#                     [--exactly-once 0|1] [--out DIR]
#   (defaults: 100,000 rows, 3 rounds, 20 s windows, 1,000 events/s, all three modes, 0)
# --exactly-once 1: both sides exactly-once into Kafka. Connect runs as a distributed worker
# of its own group with exactly.once.source.support=enabled and the connector with
# exactly.once.support=required (KIP-618; transaction.boundary=poll, the default); the relay
# with OUTBOX_EXACTLY_ONCE=1 (a transactional id prefix of its own per start). Counts read a
# topic's end offsets, which then include one transaction marker per partition and
# transaction: a drain is taken as done up to a few hundred messages early on both sides.
# Starts its own PostgreSQL 15 (durable, wal_level=logical) and Kafka like bench/bench.sh, and
# Kafka Connect 4.1.1 standalone with Debezium 3.6.1's PostgreSQL connector and outbox event
# router (String converters; test/env/connect.sh; the JVM with its defaults and a 1 GB heap;
# poll.interval.ms=10) on a Debezium outbox table (uuid key, four text columns, jsonb payload) in database dbz;
# the relay (release build) on the native outbox table, one database per OUTBOX_ON_SENT mode
# (keep mode needs the native layout). Every side runs alone while it is measured.
#
# Each round: first, with nothing running, the writers' rate on each table (8 pgbench
# clients, one 1 KB event per transaction, S seconds) and the CPU PostgreSQL spends on
# inserting N rows into each table. Then per side (Debezium, the relay in each mode), started
# and streaming before anything is written:
#   drain    N rows of 1 KB over 1,000 keys committed in one transaction; timed from the
#            commit until the side's topic holds N messages; then a VACUUM of the table.
#            PostgreSQL CPU per event = the whole server's CPU (every process: backends,
#            walsender, autovacuum, checkpointer, WAL writer; scripts/common.sh pg_ticks)
#            from the insert until the VACUUM ended, less the insert's own (measured with
#            nothing running), over N. The VACUUM stands for the autovacuum work the side
#            leaves behind (mark: dead row versions; delete: dead rows; Debezium and keep:
#            none, only the visibility map).
#   writers  the writers at full rate for S seconds with the side running: their tps, and
#            the backlog at the end of the window (rows committed, not yet in the topic).
#   latency  the writers at E events/s (pgbench --rate, synchronous_commit=off) for S
#            seconds: commit -> consumed p50/p99 (bench/e2e_latency.c, reading the writer's
#            clock_timestamp() from the payload: the same measure for both sides), the rate
#            reached, and the side's process CPU per event over the window.
#   The side's peak RSS (VmHWM) at the end.
# Prints per round, then the medians, one RESULT line per side:
#   RESULT side=.. rows=.. drain_eps=.. pg_cpu_us_per_event=.. writers_tps=.. writers_none_tps=..
#          writers_ratio=.. backlog_end=.. rate=.. p50_ms=.. p99_ms=.. cpu_us_per_event_drain=..
#          cpu_us_per_event_steady=.. rss_mb=..
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
rows=100000 rounds=3 seconds=20 rate=1000 modes="mark delete keep" out="" eos=0
. scripts/common.sh
common_flags "[--rows N] [--rounds R] [--seconds S] [--rate E] [--modes LIST] [--exactly-once 0|1] [--out DIR]" \
    "--rows=rows --rounds=rounds --seconds=seconds --rate=rate --modes=modes --exactly-once=eos --out=out" "$@"
relay_eos=()
if [ "$eos" = 1 ]; then
    export CONNECT_EXACTLY_ONCE=1
    relay_eos=(OUTBOX_EXACTLY_ONCE=1)
fi
common_bench_out debezium-bench

common_setup
bash test/env/connect.sh fetch
ninja -C build test/kafka-admin bench/e2e-latency >/dev/null
relay_bin=$src/build/outbox-relay admin=$src/build/test/kafka-admin e2e=$src/build/bench/e2e-latency
relay_pid="" lat_pid=""
trap 'common_stop_relay; [ -z "$lat_pid" ] || kill "$lat_pid" 2>/dev/null || true; bash test/env/connect.sh stop "$out/connect" >/dev/null 2>&1 || true; servers_stop' EXIT
export PG_DURABLE=1 PG_EXTRA_CONF="wal_level = logical"
# Connect as one would run it (the JVM's own collector and JIT, a 1 GB heap), not as the
# tests start it; Debezium's and Connect's other settings are their defaults.
export CONNECT_JVM_OPTS="-Xms1g -Xmx1g"
servers_start
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
dsn_dbz=$(common_db dbz)
psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$1" -c "$2"; }
OUTBOX_PG_DSN=$dsn_dbz OUTBOX_LAYOUT=debezium "$relay_bin" migrate >"$out/migrate-dbz.log" 2>&1
for m in $modes; do
    eval "dsn_$m=\$(common_db rel_$m)"
    OUTBOX_PG_DSN=$(eval echo "\$dsn_$m") "$relay_bin" migrate >"$out/migrate-$m.log" 2>&1
done
bash test/env/connect.sh outbox-connector outbox-bench "$RELAYTEST_PG_PORT" dbz 'bench.dbz.${routedByValue}' \
    >"$out/connector.properties"
# Debezium polls its queue of decoded changes every 500 ms by default; 10 ms is what a user
# who wants low latency sets (the figures the issue compared against used it)
echo "poll.interval.ms=10" >>"$out/connector.properties"

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hwm_mb() { awk '/VmHWM/ { printf "%.1f\n", $2 / 1024 }' "/proc/$1/status"; }
now_ms() { date +%s%3N; }
tick=$(getconf CLK_TCK)
us_per() { awk -v c="$1" -v n="$2" -v hz="$tick" 'BEGIN { printf "%.1f\n", (n > 0 ? c / hz * 1e6 / n : 0) }'; }

# The two tables' shapes: columns a writer gives, and the expression of a row's payload
# (the writer's clock in ms first: jsonb puts the shorter key first in its text).
payload="jsonb_build_object('ts', (extract(epoch FROM clock_timestamp()) * 1000)::int8, 'pad', repeat('x', 970))"
cols() { # SIDE: the INSERT's column list and the values' prefix for an aggregate type $2, key $3
    if [ "$1" = dbz ]; then echo "(id, aggregatetype, aggregateid, type, payload) SELECT gen_random_uuid(), '$2', $3, 'Created'"
    else echo "(aggregate_type, aggregate_id, event_type, payload) SELECT '$2', $3, 'Created'"; fi
}
dsn_of() { if [ "$1" = dbz ]; then echo "$dsn_dbz"; else eval echo "\$dsn_$1"; fi; }
table_kind() { [ "$1" = dbz ] && echo dbz || echo native; }
topic_of() { echo "bench.$1.$2"; } # SIDE AGGREGATE_TYPE (the relay's template and Debezium's route)
backlog() { # SIDE AGGREGATE_TYPE: N rows in one transaction
    psqlc "$(dsn_of "$1")" "INSERT INTO outbox $(cols "$(table_kind "$1")" "$2" "'k' || (g % 1000)"), $payload FROM generate_series(1, $rows) g"
}
count() { "$admin" --bootstrap "$bootstrap" count "$1" 6; }
wait_count() { # TOPIC N: until it holds N messages (at most 600 s)
    local deadline=$((SECONDS + 600))
    until [ "$(count "$1")" -ge "$2" ]; do
        [ $SECONDS -lt $deadline ] || { say "timed out on $1 at $(count "$1") of $2"; exit 1; }
        sleep 0.05
    done
}
writers() { # SIDE AGGREGATE_TYPE [RATE]: pgbench for $seconds s; prints its tps and count
    local extra=() sync=""
    [ -z "${3:-}" ] || { extra=(--rate "$3"); sync="SET synchronous_commit = off;"; }
    cat >"$out/writer-$1.sql" <<SQL
\set k random(1, 1000)
$sync
INSERT INTO outbox $(cols "$(table_kind "$1")" "$2" "'k' || :k"), $payload;
SQL
    "$PG_BIN/pgbench" -n -c 8 -j 2 -T "$seconds" "${extra[@]}" -f "$out/writer-$1.sql" "$(dsn_of "$1")" \
        >"$out/pgbench-$1-$2.txt" 2>&1 || { cat "$out/pgbench-$1-$2.txt" >&2; exit 1; }
    echo "$(awk '/^tps/ { printf "%.0f", $3 }' "$out/pgbench-$1-$2.txt")" \
        "$(awk '/number of transactions actually processed/ { print $NF }' "$out/pgbench-$1-$2.txt" | cut -d/ -f1)"
}
insert_cost() { # SIDE: PostgreSQL's ticks for the backlog's insert with nothing running
    local t0 t1
    t0=$(pg_ticks)
    backlog "$1" icost
    t1=$(pg_ticks)
    psqlc "$(dsn_of "$1")" "TRUNCATE outbox"
    echo $((t1 - t0))
}

start_side() { # SIDE: Debezium streaming from a new slot, or the relay in mode SIDE; its pid in side_pid
    if [ "$1" = dbz ]; then
        rm -f "$out/connect/offsets"
        bash test/env/connect.sh start "$out/connect" "$bootstrap" "$out/connector.properties" >/dev/null
        until [ "$(psqlc "$dsn_dbz" "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'outbox_bench' AND active")" = 1 ]; do
            sleep 0.2
        done
        sleep 2 # the connector's own start-up is not what is measured
        side_pid=$(cat "$out/connect/connect.pid")
    else
        [ "$eos" != 1 ] || relay_eos=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="bench-$1-$(date +%s%N)")
        env "${relay_eos[@]}" OUTBOX_PG_DSN="$(dsn_of "$1")" OUTBOX_ON_SENT="$1" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$bootstrap" \
            OUTBOX_HTTP_ADDR= OUTBOX_TOPIC_TEMPLATE="bench.$1.{aggregate_type}" "$relay_bin" >>"$out/relay-$1.log" 2>&1 &
        relay_pid=$!
        sleep 1
        side_pid=$relay_pid
    fi
}
stop_side() { # SIDE
    if [ "$1" = dbz ]; then
        bash test/env/connect.sh stop "$out/connect"
        # the next round's Debezium starts afresh: no slot, no offsets
        psqlc "$dsn_dbz" "SELECT pg_drop_replication_slot('outbox_bench')" >/dev/null
        psqlc "$dsn_dbz" "TRUNCATE outbox" # its writers would delete them
    else
        common_stop_relay
    fi
}

sides="dbz $modes"
for r in $(seq 1 "$rounds"); do
    # nothing running: the writers' rate on each table, and the insert's cost
    for k in dbz "${modes%% *}"; do
        res=$(writers "$k" "none$r")
        read -r tps _ <<<"$res"
        psqlc "$(dsn_of "$k")" "TRUNCATE outbox"
        echo "$tps" >>"$out/none-$(table_kind "$k").txt"
        say "round $r: writers with nothing running on the $(table_kind "$k") table: $tps tps"
    done
    for s in $sides; do
        ic=$(insert_cost "$s")
        eval "icost_$s=$ic"
    done
    psqlc "$dsn_dbz" "CHECKPOINT"
    for s in $sides; do
        for a in "d$r" "w$r" "l$r"; do "$admin" --bootstrap "$bootstrap" create-topic "$(topic_of "$s" "$a")" 6 >/dev/null; done
        start_side "$s" # (not in a subshell: stop_side must know the relay's pid)
        pid=$side_pid
        # drain
        c0=$(cpu_ticks "$pid") p0=$(pg_ticks)
        backlog "$s" "d$r"
        t0=$(now_ms)
        wait_count "$(topic_of "$s" "d$r")" "$rows"
        t1=$(now_ms)
        c1=$(cpu_ticks "$pid")
        psqlc "$(dsn_of "$s")" "VACUUM outbox"
        p1=$(pg_ticks)
        eval "ic=\$icost_$s"
        awk -v n="$rows" -v ms=$((t1 - t0)) 'BEGIN { printf "%.0f\n", n * 1000 / ms }' >>"$out/$s-eps.txt"
        us_per $((p1 - p0 - ic)) "$rows" >>"$out/$s-pgcpu.txt"
        us_per $((c1 - c0)) "$rows" >>"$out/$s-cpu-drain.txt"
        # writers at full rate
        res=$(writers "$s" "w$r")
        read -r tps n <<<"$res"
        behind=$((n - $(count "$(topic_of "$s" "w$r")")))
        echo "$tps" >>"$out/$s-tps.txt"
        echo "$behind" >>"$out/$s-behind.txt"
        wait_count "$(topic_of "$s" "w$r")" "$n"
        # latency at the given rate
        "$e2e" --bootstrap "$bootstrap" --topic "$(topic_of "$s" "l$r")" --payload-ts ts >"$out/latency-$s-$r.txt" 2>>"$out/e2e.log" &
        lat_pid=$!
        sleep 2
        c0=$(cpu_ticks "$pid")
        res=$(writers "$s" "l$r" "$rate")
        read -r reached n <<<"$res"
        wait_count "$(topic_of "$s" "l$r")" "$n"
        c1=$(cpu_ticks "$pid")
        sleep 0.5
        kill -TERM "$lat_pid"
        wait "$lat_pid" || true
        lat_pid=""
        echo "$reached" >>"$out/$s-rate.txt"
        us_per $((c1 - c0)) "$n" >>"$out/$s-cpu-steady.txt"
        sed -n 's/.* p50_ms=\([0-9.]*\).*/\1/p' "$out/latency-$s-$r.txt" >>"$out/$s-p50.txt"
        sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' "$out/latency-$s-$r.txt" >>"$out/$s-p99.txt"
        hwm_mb "$pid" >>"$out/$s-rss.txt"
        stop_side "$s"
        say "round $r: $s drain $(tail -1 "$out/$s-eps.txt") events/s, PostgreSQL $(tail -1 "$out/$s-pgcpu.txt") us/event;" \
            "writers $tps tps ($behind behind at the end); at $reached events/s p50 $(tail -1 "$out/$s-p50.txt") ms," \
            "p99 $(tail -1 "$out/$s-p99.txt") ms; its CPU $(tail -1 "$out/$s-cpu-drain.txt") us/event draining," \
            "$(tail -1 "$out/$s-cpu-steady.txt") steady; RSS $(tail -1 "$out/$s-rss.txt") MB"
    done
done
for s in $sides; do
    none=$(median <"$out/none-$(table_kind "$s").txt") tps=$(median <"$out/$s-tps.txt")
    echo "RESULT side=$([ "$s" = dbz ] && echo debezium || echo "relay-$s") exactly_once=$eos rows=$rows" \
        "drain_eps=$(median <"$out/$s-eps.txt") pg_cpu_us_per_event=$(median <"$out/$s-pgcpu.txt")" \
        "writers_tps=$tps writers_none_tps=$none writers_ratio=$(awk -v a="$tps" -v b="$none" 'BEGIN { printf "%.2f", a / b }')" \
        "backlog_end=$(median <"$out/$s-behind.txt") rate=$(median <"$out/$s-rate.txt")" \
        "p50_ms=$(median <"$out/$s-p50.txt") p99_ms=$(median <"$out/$s-p99.txt")" \
        "cpu_us_per_event_drain=$(median <"$out/$s-cpu-drain.txt") cpu_us_per_event_steady=$(median <"$out/$s-cpu-steady.txt")" \
        "rss_mb=$(median <"$out/$s-rss.txt")"
done
