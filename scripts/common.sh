#!/usr/bin/env bash
# What the demo, the benchmarks and the chaos run share: installing what they need,
# building, throwaway servers, a database with the outbox table, writer SQL and backlogs,
# and reading one metric. Source it from the repository's top folder.
#   common_setup [BUILD_DIR [BUILDTYPE]]  packages, Kafka jars and a build (default: build, release)
#   common_servers_start / common_servers_stop
#                                         PostgreSQL 15 and Kafka (see scripts/servers.sh)
#   common_db NAME                        creates database NAME; prints its DSN
#   common_backlog DSN ROWS KEYS [BYTES]  inserts ROWS pending events over KEYS keys
#   common_writer_sql DSN FILE KEYS [BYTES]
#                                         a pgbench script: one event per transaction,
#                                         following the writer rule (lock the aggregate row)
#   metric_at URL NAME                    the value of the last sample NAME at URL; fails
#                                         (nothing printed, a message on stderr) when the
#                                         scrape fails or NAME is not exported
#   median                                the median of the numbers on stdin, one per line
#   common_relay_drain DSN MODE TOPICS LOG ROWS
#                                         starts the release relay (OUTBOX_ON_SENT=MODE, topic
#                                         template TOPICS, output appended to LOG) in the
#                                         background and waits until it recorded ROWS (at most
#                                         600 s, else exits 1); sets relay_pid and relay_port.
#                                         common_stop_relay stops it (SIGTERM, waited for)
#   common_bench                          what a benchmark does first: common_setup, the
#                                         servers (stopped, and every pid in BENCH_PIDS
#                                         killed, when the script exits), the outbox table
#                                         migrated in their database; sets dsn and psqlc
_common_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$_common_here/servers.sh"
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin} # the client tools (psql, pgbench) of every script
COMMON_PG_BIN=$PG_BIN

# A script's flags, each "--NAME VALUE", into variables:
#   common_flags "[--rows N] [--out DIR]" "--rows=rows --out=out" "$@"
# anything else prints the usage line and exits 2.
common_flags() {
    local usage=$1 spec=$2 pair var
    shift 2
    while [ $# -gt 0 ]; do
        var=""
        for pair in $spec; do
            [ "${pair%%=*}" = "$1" ] && var=${pair#*=}
        done
        if [ -z "$var" ] || [ $# -lt 2 ]; then
            echo "usage: $0 $usage" >&2
            exit 2
        fi
        printf -v "$var" '%s' "$2"
        shift 2
    done
}

# A bench's output folder ($out when given, else a new one under /tmp) and its say(), which
# logs "# [time NAME] ..." on stderr: common_bench_out NAME
common_bench_out() {
    out=${out:-$(mktemp -d "/tmp/outbox-$1.XXXXXX")}
    mkdir -p "$out"
    _common_bench_name=$1
    say() { printf '# [%s %s] %s\n' "$(date +%H:%M:%S)" "$_common_bench_name" "$*" >&2; }
}

common_setup() {
    local build=${1:-build} type=${2:-release}
    bash "$_common_here/deps.sh"
    bash "$_common_here/../test/env/kafka.sh" fetch
    [ -f "$build/build.ninja" ] || meson setup "$build" --buildtype="$type" >/dev/null
    ninja -C "$build" >/dev/null
}

common_servers_start() { servers_start; }
common_servers_stop() { servers_stop; }

common_db() {
    "$COMMON_PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
        -c "CREATE DATABASE $1" >&2
    echo "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$1"
}

common_backlog() {
    local dsn=$1 rows=$2 keys=$3 bytes=${4:-1000}
    "$COMMON_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$dsn" -c \
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'k' || (g % $keys), 'Created',
                jsonb_build_object('n', g, 'pad', repeat('x', greatest($bytes - 30, 0)))
         FROM generate_series(1, $rows) g" -c "VACUUM ANALYZE outbox"
}

common_writer_sql() {
    local dsn=$1 file=$2 keys=$3 bytes=${4:-1000}
    "$COMMON_PG_BIN/psql" -X -q "$dsn" -c "CREATE TABLE IF NOT EXISTS aggregate (id int PRIMARY KEY, version int NOT NULL DEFAULT 0);
        INSERT INTO aggregate SELECT g FROM generate_series(1, $keys) g ON CONFLICT DO NOTHING" >/dev/null
    cat >"$file" <<SQL
\set k random(1, $keys)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('order', 'k' || :k, 'Updated', jsonb_build_object('k', :k, 'pad', repeat('x', $((bytes > 30 ? bytes - 30 : 0)))));
COMMIT;
SQL
}

# common_fresh_metric URL NAME: NAME from a fresh /metrics snapshot (the relay renders one
# every 0.5 s: read at a random moment a counter lags by up to half a second). Waits for the
# value to change (polled every 20 ms, at most 0.8 s), so what is read right after it is
# compared with a snapshot tens of ms old.
common_fresh_metric() {
    local m0 m
    m0=$(metric_at "$1" "$2") m=$m0
    for _ in $(seq 1 40); do
        sleep 0.02
        m=$(metric_at "$1" "$2")
        [ "$m" != "$m0" ] && break
    done
    echo "$m"
}

metric_at() {
    local body value
    body=$(curl -sf "$1") || { echo "metric_at: scraping $1 failed" >&2; return 1; }
    value=$(awk -v m="$2" '$1 == m { v = $2; found = 1 } END { if (found) print v }' <<<"$body")
    [ -n "$value" ] || { echo "metric_at: $2 is not exported at $1" >&2; return 1; }
    echo "$value"
}

# CPU ticks of the whole PostgreSQL server: the postmaster, its live children and the children
# that have exited (the postmaster's cutime + cstime: autovacuum workers, ended sessions)
pg_ticks() {
    local pm t=0 c
    pm=$(head -1 "$RELAYTEST_PG_DIR/data/postmaster.pid")
    t=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$pm/stat")
    for c in $(cat "/proc/$pm/task/$pm/children" 2>/dev/null); do
        c=$(awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null) && t=$((t + c))
    done
    echo "$t"
}

common_relay_drain() {
    local deadline=$((SECONDS + 600))
    relay_port=$(free_ports 1)
    OUTBOX_PG_DSN=$1 OUTBOX_ON_SENT=$2 OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT \
        OUTBOX_HTTP_ADDR=127.0.0.1:$relay_port OUTBOX_TOPIC_TEMPLATE=$3 ./build/outbox-relay >>"$4" 2>&1 &
    relay_pid=$!
    until [ "$(metric_at "http://127.0.0.1:$relay_port/metrics" outbox_marked_total 2>/dev/null || echo 0)" -ge "$5" ]; do
        [ $SECONDS -lt $deadline ] || { echo "common_relay_drain: $5 rows not recorded in 600 s ($4)" >&2; exit 1; }
        sleep 0.05
    done
}
relay_pid=""
# common_steady DB BOOTSTRAP TOPIC RATE SECONDS OUT: commit -> consumed of TOPIC
# (bench/e2e_latency.c, its LATENCY line in OUT/latency-DB.txt, its pid in lat_pid, to stop
# with TERM) while pgbench runs OUT/writer-DB.sql in DB at RATE transactions/s for SECONDS s
# (8 clients; OUT/pgbench-DB.txt), with 2 s before and after.
lat_pid=""
common_steady() {
    local db=$1 bootstrap=$2 topic=$3 rate=$4 seconds=$5 out=$6
    ./build/bench/e2e-latency --bootstrap "$bootstrap" --topic "$topic" >"$out/latency-$db.txt" 2>/dev/null &
    lat_pid=$!
    sleep 2
    "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -R "$rate" -T "$seconds" \
        -f "$out/writer-$db.sql" "$db" >"$out/pgbench-$db.txt" 2>&1
    sleep 2
}
common_stop_relay() { [ -z "$relay_pid" ] || { kill -TERM "$relay_pid" 2>/dev/null || true; wait "$relay_pid" 2>/dev/null || true; relay_pid=""; }; }

# CPU ticks (utime + stime) of the relay's PostgreSQL sessions in database DB, one "pid ticks"
# line each: common_session_ticks ADMIN_DSN DB
common_session_ticks() {
    local pid
    for pid in $("$COMMON_PG_BIN/psql" -X -At "$1" -c "SELECT pid FROM pg_stat_activity
                 WHERE datname = '$2' AND application_name LIKE 'outbox-relay %'"); do
        awk -v p="$pid" '{ print p, $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || true
    done
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

common_bench() {
    common_setup
    BENCH_PIDS=()
    trap 'for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; servers_stop' EXIT
    servers_start
    dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=outbox"
    psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }
    OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
}
