#!/usr/bin/env bash
# The relay's benchmark: starts a throwaway PostgreSQL 15 (durable: fsync on) and Kafka
# with the test scripts, and measures in one run
#   1. ceiling     PostgreSQL alone draining the backlog: select 1,000 rows from the head of
#                  the pending index, mark (or delete) them by id - the ceiling the drain is
#                  judged against, which does not move with the relay's design; and the
#                  relay's own claim and mark (or delete) statements alone (ceiling_relay_eps)
#   2. throughput  the relay draining a backlog (1 KB JSON payloads, 10,000 keys) into Kafka
#   3. latency     commit -> consumed at a steady 2,000 events/s from 8 concurrent writers
#   4. writers     writer tps (8 clients, one outbox row per transaction) with vs without relay,
#                  and against a Debezium-layout table (uuid key, four text columns, jsonb
#                  payload, no trigger) with nothing running: writer_vs_plain
#   5. cost        relay CPU per event, peak RSS with the backlog, CPU while idle
#   6. growth      drain throughput over the first vs the last 10% of events through one table
# Full mode repeats 1-5 three times and reports medians; --quick runs once, smaller; --smoke
# (what CI runs) once and smaller still: its figures only show that every stage works.
#   bench/bench.sh [--quick] [--out DIR] [--on-sent mark|delete|keep]   (the relay's OUTBOX_ON_SENT;
#   the drain is judged against the ceiling of the same statement: mark, or delete)
# The last line is:
#   RESULT ceiling_eps=.. ceiling_relay_eps=.. throughput_eps=.. ratio=.. p50_ms=.. p99_ms=.. p999_ms=.. writer_ratio=..
#          writer_vs_plain=.. cpu_us_per_event=.. steady_cpu_us_per_event=.. rss_mb=.. idle_cpu_pct=.. growth_ratio=..
#          wal_ratio=.. pg_cpu_us_per_event=.. naive_eps=.. naive_ratio=.. first_msg_ms=.. on_sent=..
# (wal_ratio: WAL the relay writes per event while draining / WAL of the writer's insert;
#  pg_cpu_us_per_event: PostgreSQL's CPU over the drain per event; naive_ratio: the drain
#  against bench/naive_relay.py, the pinned hand-written poller, on the same backlog;
#  first_msg_ms: commit -> marked of the first event to a topic the relay has not used yet)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
quick=0 out="" on_sent=mark
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1; shift ;;
    --smoke) quick=2; shift ;;
    --out) out=$2; shift 2 ;;
    --on-sent) on_sent=$2; shift 2 ;;
    *) echo "usage: $0 [--quick | --smoke] [--out DIR] [--on-sent mark|delete|keep]" >&2; exit 2 ;;
    esac
done
if [ $quick = 2 ]; then # CI's smoke run: every stage once, small
    N=20000 GROWTH=20000 LAT_S=5 WRITER_S=3 IDLE_S=3 REPEATS=1
elif [ $quick = 1 ]; then
    N=100000 GROWTH=150000 LAT_S=15 WRITER_S=8 IDLE_S=10 REPEATS=1
else
    N=1000000 GROWTH=3000000 LAT_S=60 WRITER_S=20 IDLE_S=60 REPEATS=3
fi
. scripts/common.sh
common_bench_out bench
RELAYTEST_EXTRA_PACKAGES="gnuplot-nox python3-psycopg2 python3-confluent-kafka" common_setup
relay_bin=$src/build/outbox-relay
export PG_DURABLE=1
trap 'kill_relay; servers_stop' EXIT
servers_start
dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=bench"
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
http_port=$((RELAYTEST_KAFKA_PORT + 7))
psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }
"$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" -c "CREATE DATABASE bench"
OUTBOX_PG_DSN=$dsn "$relay_bin" migrate >/dev/null 2>&1
rows=outbox # where a row's status is read: in keep mode the relay's view of it
[ "$on_sent" = keep ] && rows=outbox_kept
psqlc "CREATE FUNCTION bench_wait_sent(row_id bigint) RETURNS void LANGUAGE plpgsql AS \$\$
       BEGIN -- returns once the row is no longer pending (marked, deleted, or past the watermark)
         WHILE EXISTS (SELECT 1 FROM $rows WHERE id = row_id AND (status || '') = 'PENDING') LOOP
           PERFORM pg_sleep(0.001);
         END LOOP;
       END \$\$"
psqlc "CREATE TABLE aggregate (id int PRIMARY KEY, version int NOT NULL DEFAULT 0);
       INSERT INTO aggregate SELECT g FROM generate_series(1, 10000) g"
# Writers commit with synchronous_commit=off so that the latency figure measures the relay,
# not the disk's fsync queue (created_at is then the commit time within a millisecond).
# writer_sql FILE INSERT: one event per transaction, the aggregate row locked first.
writer_sql() {
    cat >"$1" <<SQL
\\set k random(1, 10000)
BEGIN;
SET LOCAL synchronous_commit = off;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
$2
  VALUES ('bench', 'k' || :k, 'Updated', jsonb_build_object('k', :k, 'pad', repeat('x', 1000)));
COMMIT;
SQL
}
writer_sql "$out/writer.sql" "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)"
# The same writers on a table of Debezium's outbox layout, with nothing reading it.
psqlc "CREATE TABLE plain_outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
         tracingspancontext text, payload jsonb)"
writer_sql "$out/writer-plain.sql" "INSERT INTO plain_outbox (aggregatetype, aggregateid, type, payload)"

relay_pid=
start_relay() { # [port] [name]
    env OUTBOX_PG_DSN="$dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$bootstrap" OUTBOX_HTTP_ADDR="127.0.0.1:${1:-$http_port}" \
        OUTBOX_TOPIC_TEMPLATE="bench.{aggregate_type}" OUTBOX_LOG_LEVEL=warn OUTBOX_RELAY_NAME="${2:-bench}" \
        OUTBOX_ON_SENT="$on_sent" \
        "$relay_bin" >>"$out/relay.log" 2>&1 &
    relay_pid=$!
    local port=${1:-$http_port}
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return 0; sleep 0.1; done
}
kill_relay() {
    [ -n "$relay_pid" ] || return 0
    kill -TERM "$relay_pid" 2>/dev/null || true
    wait "$relay_pid" 2>/dev/null || true
    relay_pid=
}
metric() { metric_at "http://127.0.0.1:$http_port/metrics" "$1"; }
marked() { metric outbox_marked_total; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
tick_hz=$(getconf CLK_TCK)
backlog() { # rows: a backlog of 1 KB JSON rows over 10,000 keys, vacuumed and analysed
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'bench', 'k' || (g % 10000), 'Created', jsonb_build_object('seq', g, 'pad', repeat(md5(g::text), 30))
           FROM generate_series(1, $1) g"
    wal_inserted=$(wal_lsn)
    psqlc "VACUUM ANALYZE outbox"
}
# WAL positions (the insert position: what was written, flushed or not)
wal_lsn() { psqlc "SELECT pg_current_wal_insert_lsn()"; }
wal_bytes() { psqlc "SELECT '$2'::pg_lsn - '$1'::pg_lsn"; }
# first_message_ms TYPE: commits one event of aggregate type TYPE and prints the milliseconds
# until the relay has it acknowledged and marked (or deleted): an upper bound of commit -> ack.
first_message_ms() {
    "$PG_BIN/psql" -X -q -At "$dsn" <<SQL
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('$1', 'k1', 'Created', '{}') RETURNING id AS first_id, clock_timestamp() AS first_t0 \\gset
\\o /dev/null
SELECT bench_wait_sent(:first_id);
\\o
SELECT round(extract(epoch FROM clock_timestamp() - :'first_t0') * 1000);
SQL
}
# naive_drain: the pinned hand-written poller (bench/naive_relay.py, its defaults) drains a
# backlog of N rows like the relay's on its own table in database bench_naive; prints events/s
# from its connection's start to the last row's sent_at (both PostgreSQL's clock).
naive_drain() {
    local ndsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=bench_naive" pid t0=""
    "$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
        -c "DROP DATABASE IF EXISTS bench_naive" -c "CREATE DATABASE bench_naive" >&2
    OUTBOX_PG_DSN=$ndsn /usr/bin/python3 bench/naive_relay.py migrate
    "$PG_BIN/psql" -X -q -At "$ndsn" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'bench', 'k' || (g % 10000), 'Created', jsonb_build_object('seq', g, 'pad', repeat(md5(g::text), 30))
           FROM generate_series(1, $N) g" -c "VACUUM ANALYZE outbox" >&2
    OUTBOX_PG_DSN=$ndsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap /usr/bin/python3 bench/naive_relay.py >>"$out/naive.log" 2>&1 &
    pid=$!
    while [ -z "$t0" ]; do
        t0=$(psqlc "SELECT extract(epoch FROM backend_start) FROM pg_stat_activity
                    WHERE datname = 'bench_naive' AND backend_type = 'client backend'")
        [ -n "$t0" ] || sleep 0.02
    done
    while [ "$("$PG_BIN/psql" -X -q -At "$ndsn" -c "SELECT EXISTS (SELECT 1 FROM outbox WHERE status = 'PENDING')")" = t ]; do
        sleep 0.25
    done
    kill -TERM "$pid"
    wait "$pid" || true
    "$PG_BIN/psql" -X -q -At "$ndsn" -c "SELECT round($N / (extract(epoch FROM max(sent_at)) - $t0)) FROM outbox"
}
now() { date +%s.%N; }

for run in $(seq 1 $REPEATS); do
    say "run $run/$REPEATS: ceilings over $N rows"
    # the judged ceiling of the mode (plain: select 1,000 rows from the pending index's head,
    # mark or delete them by id), then the relay's own claim and mark (or delete) alone
    variants="plain relay"
    [ "$on_sent" = delete ] && variants="plain-delete delete"
    for v in $variants; do
        psqlc "TRUNCATE outbox"
        backlog "$N"
        ./build/bench/pg-ceiling --pg-dsn "$dsn" --variant "$v" | tee -a "$out/ceiling-$v.txt" >&2
    done

    say "run $run/$REPEATS: relay draining $N rows"
    psqlc "TRUNCATE outbox"
    w0=$(wal_lsn)
    backlog "$N"
    w1=$(wal_lsn)
    start_relay
    c0=$(cpu_ticks "$relay_pid")
    p0=$(pg_ticks)
    # The clock starts at the last moment no claim had run yet (connecting and getting a
    # producer id are not draining); the metrics snapshot lags, so this errs early.
    t0=$(now)
    while [ "$(metric outbox_claims_total)" = 0 ]; do
        t0=$(now)
        sleep 0.02
    done
    : >"$out/drain-$run.tsv"
    while [ "$(marked)" != "$N" ]; do
        printf '%s\t%s\n' "$(now)" "$(marked)" >>"$out/drain-$run.tsv"
        sleep 0.5
    done
    t1=$(now)
    w2=$(wal_lsn)
    c1=$(cpu_ticks "$relay_pid")
    p1=$(pg_ticks)
    rss_kb=$(awk '/VmHWM/ { print $2 }' "/proc/$relay_pid/status")
    # WAL per event: the writers' insert vs the relay's drain (claims, marks, its lease and
    # state rows, autovacuum if it ran meanwhile); the backlog's own VACUUM is excluded
    ins_b=$(wal_bytes "$w0" "$wal_inserted") drain_b=$(wal_bytes "$w1" "$w2")
    awk -v i="$ins_b" -v d="$drain_b" -v n="$N" 'BEGIN { printf "%.0f\t%.0f\t%.3f\n", i / n, d / n, d / i }' >>"$out/wal.txt"
    say "WAL per event: insert $(awk -v i="$ins_b" -v n="$N" 'BEGIN { printf "%.0f", i / n }') bytes, relay's drain $(awk -v d="$drain_b" -v n="$N" 'BEGIN { printf "%.0f", d / n }') bytes"
    awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f\n", n / (b - a) }' >>"$out/throughput.txt"
    awk -v n="$N" -v c="$((c1 - c0))" -v hz="$tick_hz" 'BEGIN { printf "%.2f\n", c / hz * 1e6 / n }' >>"$out/cpu.txt"
    awk -v k="$rss_kb" 'BEGIN { printf "%.1f\n", k / 1024 }' >>"$out/rss.txt"
    # PostgreSQL's CPU over the drain: the relay's statements, plus what the server does
    # meanwhile on its own (WAL writer, checkpointer, autovacuum) - an upper bound
    awk -v n="$N" -v c="$((p1 - p0))" -v hz="$tick_hz" 'BEGIN { printf "%.2f\n", c / hz * 1e6 / n }' >>"$out/pg-cpu.txt"
    say "PostgreSQL CPU over the drain: $(tail -1 "$out/pg-cpu.txt") us/event"
    say "drained in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"

    say "run $run/$REPEATS: the first event to a topic the relay has not produced to yet"
    fresh="fresh$run$$"
    ./build/test/kafka-admin --bootstrap "$bootstrap" create-topic "bench.$fresh" 3
    sleep 1
    first_message_ms "$fresh" >>"$out/first.txt"
    say "first event to bench.$fresh: $(tail -1 "$out/first.txt") ms from commit to acknowledged (and marked)"

    say "run $run/$REPEATS: idle CPU for $IDLE_S s"
    sleep 2
    c0=$(cpu_ticks "$relay_pid")
    sleep "$IDLE_S"
    c1=$(cpu_ticks "$relay_pid")
    awk -v c="$((c1 - c0))" -v hz="$tick_hz" -v s="$IDLE_S" 'BEGIN { printf "%.3f\n", c / hz / s * 100 }' >>"$out/idle.txt"

    say "run $run/$REPEATS: latency at 2,000 events/s for $LAT_S s"
    curl -sf "http://127.0.0.1:$http_port/metrics" >"$out/metrics-before-$run.txt"
    ./build/bench/e2e-latency --bootstrap "$bootstrap" --topic bench.bench >"$out/latency-$run.txt" 2>/dev/null &
    lat_pid=$!
    sleep 2
    c0=$(cpu_ticks "$relay_pid") m0=$(marked)
    "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -R 2000 -T "$LAT_S" \
        -f "$out/writer.sql" bench >"$out/pgbench-latency-$run.txt" 2>&1
    sleep 2
    c1=$(cpu_ticks "$relay_pid") m1=$(marked)
    # the relay's CPU per event while it keeps up with writers (the writers' tx/s is in
    # pgbench-latency-*.txt: on a saturated machine they fall short of 2,000)
    awk -v n="$((m1 - m0))" -v c="$((c1 - c0))" -v hz="$tick_hz" 'BEGIN { printf "%.2f\n", c / hz * 1e6 / n }' >>"$out/steady-cpu.txt"
    say "relay CPU at the writers' rate ($(awk '/^tps/ { printf "%.0f", $3 }' "$out/pgbench-latency-$run.txt") events/s): $(tail -1 "$out/steady-cpu.txt") us/event"
    kill -TERM "$lat_pid"
    wait "$lat_pid" || true
    sleep 0.6
    curl -sf "http://127.0.0.1:$http_port/metrics" >"$out/metrics-after-$run.txt"
    bench/hist_quantiles.sh "$out/metrics-before-$run.txt" "$out/metrics-after-$run.txt" >"$out/ack-latency-$run.txt"
    echo "commit -> Kafka ack (relay histogram): $(cat "$out/ack-latency-$run.txt")" >&2
    echo "commit -> consumed (e2e consumer):     $(cat "$out/latency-$run.txt")" >&2

    say "run $run/$REPEATS: writer tps with and without the relay, $WRITER_S s each"
    pgb() { "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -T "$WRITER_S" \
        -f "${1:-$out/writer.sql}" bench 2>&1 | awk '/^tps/ { print $3; exit }'; }
    with=$(pgb)
    kill_relay
    psqlc "VACUUM outbox"
    without=$(pgb)
    psqlc "TRUNCATE plain_outbox"
    psqlc "VACUUM aggregate"
    plain=$(pgb "$out/writer-plain.sql")
    awk -v a="$with" -v b="$without" 'BEGIN { printf "%.3f\n", a / b }' >>"$out/writer.txt"
    awk -v a="$with" -v b="$plain" 'BEGIN { printf "%.3f\n", a / b }' >>"$out/writer-plain.txt"
    say "writer tps: $with with the relay, $without without, $plain on a Debezium-layout table alone"
    echo "$with $without $plain" >>"$out/writer-tps.txt"

    say "run $run/$REPEATS: a hand-written poller (bench/naive_relay.py) draining $N rows on its own table"
    naive_drain >>"$out/naive.txt"
    say "hand-written poller: $(tail -1 "$out/naive.txt") events/s"
done

say "growth: $GROWTH events through one table in 10 chunks"
psqlc "TRUNCATE outbox"
start_relay
chunk=$((GROWTH / 10))
: >"$out/growth.txt"
done_rows=$(marked)
for i in $(seq 1 10); do
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'bench', 'k' || (g % 10000), 'Created', jsonb_build_object('seq', g, 'pad', repeat(md5(g::text), 30))
           FROM generate_series(1, $chunk) g"
    t0=$(now)
    target=$((done_rows + chunk))
    while [ "$(marked)" -lt "$target" ]; do sleep 0.2; done
    t1=$(now)
    done_rows=$target
    eps=$(awk -v n="$chunk" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')
    echo "$i $eps $(psqlc "SELECT pg_total_relation_size('outbox')")" >>"$out/growth.txt"
    say "growth chunk $i: $eps events/s"
done
kill_relay

say "scale-out: draining $N rows with 3 relays on the same machine"
psqlc "TRUNCATE outbox"
backlog "$N"
pids=()
for i in 1 2 3; do
    start_relay $((http_port + i)) "bench-$i"
    pids+=("$relay_pid")
done
relay_pid=
sum_marked() {
    local t=0 i
    for i in 1 2 3; do
        t=$((t + $(metric_at "http://127.0.0.1:$((http_port + i))/metrics" outbox_marked_total)))
    done
    echo "$t"
}
t0=$(now)
while [ "$(sum_marked)" -lt "$N" ]; do sleep 0.25; done
t1=$(now)
for p in "${pids[@]}"; do kill -TERM "$p"; wait "$p" || true; done
three=$(awk -v n="$N" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }')

ceiling_of() { sed -n 's/.* eps=\([0-9]*\).*/\1/p' "$out/ceiling-$1.txt" | median; }
if [ "$on_sent" = delete ]; then
    ceiling=$(ceiling_of plain-delete) ceiling_relay=$(ceiling_of delete)
else
    ceiling=$(ceiling_of plain) ceiling_relay=$(ceiling_of relay)
fi
throughput=$(median <"$out/throughput.txt")
p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' "$out"/ack-latency-*.txt | median)
p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' "$out"/ack-latency-*.txt | median)
p999=$(sed -n 's/.*p999_ms=\([0-9.]*\).*/\1/p' "$out"/ack-latency-*.txt | median)
e2e_p99=$(sed -n 's/.* p99_ms=\([0-9.]*\).*/\1/p' "$out"/latency-*.txt | median)
writer=$(median <"$out/writer.txt")
writer_vs_plain=$(median <"$out/writer-plain.txt")
cpu=$(median <"$out/cpu.txt")
rss=$(median <"$out/rss.txt")
idle=$(median <"$out/idle.txt")
wal_ratio=$(cut -f3 "$out/wal.txt" | median)
pg_cpu=$(median <"$out/pg-cpu.txt")
steady_cpu=$(median <"$out/steady-cpu.txt")
first_ms=$(median <"$out/first.txt")
naive=$(median <"$out/naive.txt")
naive_ratio=$(awk -v a="$throughput" -v b="$naive" 'BEGIN { printf "%.2f", a / b }')
growth=$(awk 'NR == 1 { a = $2 } NR == 10 { b = $2 } END { printf "%.2f", b / a }' "$out/growth.txt")
# the drain against the ceiling of its own statement (mark, or delete)
say "ceilings ($on_sent): select + $on_sent by id $ceiling events/s; the relay's own claim + $on_sent statements $ceiling_relay events/s"
ratio=$(awk -v a="$throughput" -v b="$ceiling" 'BEGIN { printf "%.2f", a / b }')
say "commit -> consumed p99 (through a consumer, an upper bound): $e2e_p99 ms"
say "figures and raw data in $out"
bench/plot.sh "$out" "$out/bench.png" && say "plot: $out/bench.png"
echo "RELAYS one_eps=$throughput three_eps=$three"
echo "RESULT ceiling_eps=$ceiling ceiling_relay_eps=$ceiling_relay throughput_eps=$throughput ratio=$ratio p50_ms=$p50 p99_ms=$p99 p999_ms=$p999 writer_ratio=$writer writer_vs_plain=$writer_vs_plain cpu_us_per_event=$cpu steady_cpu_us_per_event=$steady_cpu rss_mb=$rss idle_cpu_pct=$idle growth_ratio=$growth wal_ratio=$wal_ratio pg_cpu_us_per_event=$pg_cpu naive_eps=$naive naive_ratio=$naive_ratio first_msg_ms=$first_ms on_sent=$on_sent"
