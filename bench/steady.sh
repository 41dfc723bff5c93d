#!/usr/bin/env bash
# What the relay costs PostgreSQL at a steady rate, where a sidecar spends its life: writers
# at E events/s (pgbench --rate, one 1 KB jsonb row per transaction, 8 clients), the relay
# (release build) publishing to a real Kafka, in each OUTBOX_ON_SENT mode.
#   bench/steady.sh [--rate E] [--seconds S] [--rounds R] [--modes "mark delete keep"] [--out DIR]
#   (defaults: 1,000 events/s, 30 s windows, 3 rounds, all three modes)
# Starts its own PostgreSQL 15 (pg_stat_statements loaded, track_planning on) and Kafka
# (scripts/servers.sh). Per mode and round, in a fresh database: the relay starts, the writers
# run for S + 5 s, and over the last S seconds it measures
#   sessions_us    CPU of the relay's own PostgreSQL sessions (application_name
#                  'outbox-relay ...', utime + stime from /proc) per event published;
#   relay_us       CPU of the relay's process per event;
#   plan_us, exec_us  planning and execution time of the relay's statements per event
#                  (pg_stat_statements, every statement but the writers'), and the three
#                  statements that cost the most, with calls per second and time per call;
#   idle_pct       then, with the writers stopped and the backlog drained, the relay's
#                  sessions' CPU over 10 s, in percent of a core.
# Prints one line per mode and round, then per mode the medians:
#   RESULT mode=.. rate=.. events_per_s=.. sessions_us=.. relay_us=.. plan_us=.. exec_us=.. idle_pct=..
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh

rate=1000 seconds=30 rounds=3 modes="mark delete keep" out=""
common_flags "[--rate E] [--seconds S] [--rounds R] [--modes \"mark delete keep\"] [--out DIR]" \
    "--rate=rate --seconds=seconds --rounds=rounds --modes=modes --out=out" "$@"
common_bench_out steady
common_setup
export RELAYTEST_NO_RABBITMQ=1
export PG_EXTRA_CONF="shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track_planning = on
pg_stat_statements.max = 1000"
BENCH_PIDS=()
trap 'for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; servers_stop' EXIT
servers_start
admin="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres"
tick_hz=$(getconf CLK_TCK)

# CPU ticks of the relay's sessions in database $1 ("pid ticks" lines)
session_ticks() { common_session_ticks "$admin" "$1"; }
# ticks spent between two session_ticks snapshots, by sessions alive at both
ticks_between() { awk 'NR == FNR { a[$1] = $2; next } ($1 in a) { t += $2 - a[$1] } END { print t + 0 }' "$1" "$2"; }
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run_one() {
    local mode=$1 round=$2 db dsn port pid w0 w1 m0 m1 p0 p1 t0 t1 sess relay events
    db="steady_${mode}_$round"
    dsn=$(common_db "$db")
    "$PG_BIN/psql" -X -q "$dsn" -c "CREATE EXTENSION pg_stat_statements" >/dev/null
    OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
    common_writer_sql "$dsn" "$out/writer-$db.sql" 1000 1000
    port=$(free_ports 1)
    OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=$mode OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT \
        OUTBOX_HTTP_ADDR=127.0.0.1:$port OUTBOX_TOPIC_TEMPLATE="steady.$db" ./build/outbox-relay >"$out/relay-$db.log" 2>&1 &
    pid=$!
    BENCH_PIDS+=("$pid")
    local url="http://127.0.0.1:$port/metrics"
    until metric_at "$url" outbox_marked_total >/dev/null 2>&1; do sleep 0.2; done
    "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -R "$rate" \
        -T "$((seconds + 5))" -f "$out/writer-$db.sql" "$db" >"$out/pgbench-$db.txt" 2>&1 &
    w0=$!
    sleep 5
    "$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$db" \
        -c "SELECT pg_stat_statements_reset()" >/dev/null
    session_ticks "$db" >"$out/s0-$db"
    p0=$(proc_ticks "$pid")
    m0=$(metric_at "$url" outbox_marked_total)
    t0=$(date +%s.%N)
    sleep "$seconds"
    session_ticks "$db" >"$out/s1-$db"
    p1=$(proc_ticks "$pid")
    m1=$(metric_at "$url" outbox_marked_total)
    t1=$(date +%s.%N)
    events=$((m1 - m0))
    "$PG_BIN/psql" -X -At -F ' ' "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$db" -c "
        SELECT round(sum(total_plan_time)::numeric * 1000 / $events, 1), round(sum(total_exec_time)::numeric * 1000 / $events, 1)
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = '$db' AND query NOT LIKE '%UPDATE aggregate%' AND query NOT LIKE 'INSERT INTO outbox%'
          AND query NOT LIKE 'BEGIN%' AND query NOT LIKE 'COMMIT%' AND query NOT LIKE '%pg_stat_statements%'" >"$out/pss-$db"
    "$PG_BIN/psql" -X -At -F ' | ' "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$db" -c "
        SELECT round(calls / $seconds.0, 1) || '/s', round((total_plan_time / calls)::numeric * 1000, 1) || ' us plan',
               round((total_exec_time / calls)::numeric * 1000, 1) || ' us exec', left(regexp_replace(query, '\s+', ' ', 'g'), 90)
        FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
        WHERE d.datname = '$db' AND query NOT LIKE '%UPDATE aggregate%' AND query NOT LIKE 'INSERT INTO outbox%'
          AND query NOT LIKE 'BEGIN%' AND query NOT LIKE 'COMMIT%' AND query NOT LIKE '%pg_stat_statements%'
        ORDER BY total_plan_time + total_exec_time DESC LIMIT 3" >"$out/top-$db"
    wait "$w0" || true
    # idle: the writers stopped, every written row published
    local written
    written=$("$PG_BIN/psql" -X -At "$dsn" -c "SELECT count(*) FROM outbox")
    for _ in $(seq 1 150); do
        [ "$(metric_at "$url" outbox_published_total)" -ge "$written" ] && break
        sleep 0.2
    done
    sleep 3
    session_ticks "$db" >"$out/i0-$db"
    sleep 10
    session_ticks "$db" >"$out/i1-$db"
    kill -TERM "$pid"
    wait "$pid" || true
    sess=$(ticks_between "$out/s0-$db" "$out/s1-$db")
    relay=$((p1 - p0))
    local idle eps plan exec
    idle=$(awk -v t="$(ticks_between "$out/i0-$db" "$out/i1-$db")" -v hz="$tick_hz" 'BEGIN { printf "%.2f", t / hz / 10 * 100 }')
    eps=$(awk -v n="$events" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
    read -r plan exec <"$out/pss-$db"
    printf 'mode=%s round=%s rate=%s events_per_s=%s sessions_us=%s relay_us=%s plan_us=%s exec_us=%s idle_pct=%s\n' \
        "$mode" "$round" "$rate" "$eps" \
        "$(awk -v t="$sess" -v hz="$tick_hz" -v n="$events" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" \
        "$(awk -v t="$relay" -v hz="$tick_hz" -v n="$events" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')" \
        "$plan" "$exec" "$idle" | tee -a "$out/rounds.txt"
    sed 's/^/    /' "$out/top-$db"
}

for round in $(seq 1 "$rounds"); do
    for mode in $modes; do
        say "round $round/$rounds: $mode at $rate events/s for $seconds s"
        run_one "$mode" "$round"
    done
done
for mode in $modes; do
    line="RESULT mode=$mode rate=$rate"
    for f in events_per_s sessions_us relay_us plan_us exec_us idle_pct; do
        line="$line $f=$(grep "^mode=$mode " "$out/rounds.txt" | tr ' ' '\n' | awk -F= -v f="$f" '$1 == f { print $2 }' | median)"
    done
    echo "$line"
done
say "raw data in $out"
