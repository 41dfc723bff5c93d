#!/usr/bin/env bash
# Keep mode's id-range partitions (stage 2), measured on a durable PostgreSQL 15 and Kafka:
#   bench/partitions.sh [--rows N] [--width IDS] [--out DIR]   (default 1,000,000 rows, 100,000 ids)
# 1. The step on a live table: N rows of 1 KB in a plain keep-mode table, writers at 500 tx/s
#    (pgbench, latency logged per transaction), then `migrate --partition IDS`: how long the
#    step took, and the writers' slowest transaction before and during it (the switch holds
#    the table in ACCESS EXCLUSIVE mode).
# 2. A drain: N rows into a partitioned table (partitions made ahead by the owner's function
#    first), drained by the release relay; the WAL of the drain against the insert's, and what
#    the drain left in the partitions (n_tup_upd, n_tup_del, n_dead_tup summed over them).
#    Then VACUUM (FREEZE) of one full partition after a CHECKPOINT: what an anti-wraparound
#    vacuum costs a partition (its WAL and time).
# 3. Retention: <table>_partitions(1), as the relay calls it, with writers at 500 tx/s: a first
#    call while a writer transaction is held open (its lock waits 100 ms, then it gives up:
#    busy), then calls until nothing is left to drop (at most 4 partitions each); the
#    partitions before and after, and the writers' slowest transaction before, during the
#    busy call and while the drops ran.
# RESULT lines: step_seconds, writer_max_ms_before/during; wal_ratio, n_tup_*; partitions_before/after.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
rows=1000000 width=100000 out=""
. scripts/common.sh
common_flags "[--rows N] [--width IDS] [--out DIR]" "--rows=rows --width=width --out=out" "$@"
common_bench_out partitions
common_setup
relay_bin=$src/build/outbox-relay
writers_pid=""
trap 'common_stop_relay; [ -z "$writers_pid" ] || kill "$writers_pid" 2>/dev/null || true; servers_stop' EXIT
export PG_DURABLE=1
servers_start

fill() { # the table's rows: $1 of them, 1 KB each over 1,000 keys
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'p', 'k' || (g % 1000), 'Created', jsonb_build_object('n', g, 'pad', repeat('x', 970))
           FROM generate_series(1, $1) g"
}
writers_start() { # pgbench at 500 tx/s for $1 s, one row per transaction, latencies in $out/$2
    cat >"$out/writer.sql" <<'SQL'
\set k random(1, 1000)
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('p', 'k' || :k, 'Written', jsonb_build_object('pad', repeat('x', 970)));
SQL
    (cd "$out" && "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 4 -j 2 -R 500 -T "$1" \
        -l --log-prefix="$2" -f writer.sql "$db" >"$2.pgbench.log" 2>&1) &
    writers_pid=$!
}
# max_ms PREFIX FROM TO: the slowest transaction (ms) that started between FROM and TO (epoch s)
max_ms() {
    cat "$out/$1".* | awk -v a="$2" -v b="$3" '{ t = $5 + $6 / 1e6 - $3 / 1e6; if (t >= a && t <= b && $3 > m) m = $3 }
        END { printf "%.1f", m / 1000 }'
}

# ---- 1. the step on a live table
db=p_step
dsn=$(common_db "$db")
psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep "$relay_bin" migrate >"$out/migrate-$db.log" 2>&1
fill "$rows"
psqlc "VACUUM ANALYZE outbox"
writers_start 40 step
sleep 10
t0=$(date +%s.%N)
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep "$relay_bin" migrate --partition "$width" >>"$out/migrate-$db.log" 2>&1
t1=$(date +%s.%N)
wait "$writers_pid"
writers_pid=""
echo "RESULT phase=step rows=$rows $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "step_seconds=%.2f", b - a }')" \
    "writer_max_ms_before=$(max_ms step "$(awk -v a="$t0" 'BEGIN { printf "%.3f", a - 9 }')" "$t0")" \
    "writer_max_ms_during=$(max_ms step "$t0" "$t1")" "busy_attempts=$(grep -c "was busy" "$out/migrate-$db.log" || true)" |
    tee -a "$out/results.txt"

# ---- 2. a drain of a partitioned table
db=p_drain
dsn=$(common_db "$db")
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep "$relay_bin" migrate >"$out/migrate-$db.log" 2>&1
OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep "$relay_bin" migrate --partition "$width" >>"$out/migrate-$db.log" 2>&1
psqlc "SELECT created FROM outbox_partitions(NULL, $((rows / width + 2)))" >/dev/null
w0=$(psqlc "SELECT pg_current_wal_insert_lsn()")
fill "$rows"
wi=$(psqlc "SELECT pg_current_wal_insert_lsn()")
psqlc "VACUUM ANALYZE outbox"
w1=$(psqlc "SELECT pg_current_wal_insert_lsn()")
t0=$(date +%s.%N)
common_relay_drain "$dsn" keep "part.{aggregate_type}" "$out/relay-drain.log" "$rows"
t1=$(date +%s.%N)
sleep 2
common_stop_relay
sleep 1
w2=$(psqlc "SELECT pg_current_wal_insert_lsn()")
ins=$(psqlc "SELECT '$wi'::pg_lsn - '$w0'::pg_lsn") drain=$(psqlc "SELECT '$w2'::pg_lsn - '$w1'::pg_lsn")
tup=$(psqlc "SELECT 'partitions=' || count(*) || ' n_tup_upd=' || sum(n_tup_upd) || ' n_tup_del=' || sum(n_tup_del)
             || ' n_dead_tup=' || sum(n_dead_tup) FROM pg_stat_user_tables
             WHERE relid IN (SELECT rel FROM outbox_id_partitions())")
echo "RESULT phase=drain rows=$rows $(awk -v i="$ins" -v d="$drain" -v n="$rows" -v a="$t0" -v b="$t1" \
    'BEGIN { printf "insert_bytes_per_event=%.0f relay_bytes_per_event=%.1f wal_ratio=%.4f drain_eps=%.0f", i / n, d / n, d / i, n / (b - a) }') $tup" |
    tee -a "$out/results.txt"

# what an anti-wraparound vacuum does to a partition (it freezes every tuple not yet frozen):
# VACUUM (FREEZE) of one full partition, after a CHECKPOINT (so that its pages' first change
# logs them whole, as it would days after their insert)
part=$(psqlc "SELECT rel FROM outbox_id_partitions() WHERE low IS NOT NULL ORDER BY low LIMIT 1")
prow=$(psqlc "SELECT count(*) FROM $part")
ppages=$(psqlc "SELECT pg_relation_size('$part') / 8192")
psqlc "CHECKPOINT"
f0=$(psqlc "SELECT pg_current_wal_insert_lsn()")
t0=$(date +%s.%N)
psqlc "VACUUM (FREEZE) $part"
t1=$(date +%s.%N)
f1=$(psqlc "SELECT pg_current_wal_insert_lsn()")
echo "RESULT phase=freeze partition=$part rows=$prow pages=$ppages" \
    "wal_bytes=$(psqlc "SELECT '$f1'::pg_lsn - '$f0'::pg_lsn")" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "seconds=%.2f", b - a }')" | tee -a "$out/results.txt"

# ---- 3. retention: the owner's function, as the relay calls it, beside writers at 500 tx/s
# and a writer transaction held open 8 s (a relay in keep mode runs throughout, without
# retention, so that the watermarks pass the writers' rows)
before=$(psqlc "SELECT count(*) FROM outbox_id_partitions()")
rows_before=$(psqlc "SELECT count(*) FROM outbox")
OUTBOX_RETENTION=0 common_relay_drain "$dsn" keep "part.{aggregate_type}" "$out/relay-retain.log" 0
writers_start 45 retain
sleep 10
"$PG_BIN/psql" -X -q -At "$dsn" -c "BEGIN" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    VALUES ('p', 'held', 'Held', '{}')" -c "SELECT pg_sleep(8)" -c "COMMIT" >/dev/null &
held=$!
sleep 0.5
t0=$(date +%s.%N)
busy=$(psqlc "SELECT coalesce(busy, '-') || ' ' || dropped FROM outbox_partitions(1)")
t1=$(date +%s.%N)
wait "$held"
td=$(date +%s.%N)
calls=0 dropped=0
while :; do # every 1 s, as the relay every 10 s, until nothing is left to drop
    n=$(psqlc "SELECT dropped FROM outbox_partitions(1)")
    calls=$((calls + 1)) dropped=$((dropped + n))
    [ "$n" -gt 0 ] || break
    sleep 1
done
t2=$(date +%s.%N)
wait "$writers_pid"
writers_pid=""
common_stop_relay
after=$(psqlc "SELECT count(*) FROM outbox_id_partitions()")
rows_after=$(psqlc "SELECT count(*) FROM outbox")
echo "RESULT phase=retention partitions_before=$before partitions_after=$after rows_before=$rows_before" \
    "rows_after=$rows_after first_call_behind_open_writer=\"$busy\" then_dropped=$dropped calls=$calls" \
    "writer_max_ms_before=$(max_ms retain "$(awk -v a="$t0" 'BEGIN { printf "%.3f", a - 9 }')" "$t0")" \
    "writer_max_ms_busy_call=$(max_ms retain "$t0" "$t1")" \
    "writer_max_ms_dropping=$(max_ms retain "$td" "$t2")" |
    tee -a "$out/results.txt"
