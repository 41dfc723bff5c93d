#!/usr/bin/env bash
# The WAL the relay makes PostgreSQL write per event, against the WAL of the writer's insert,
# in each OUTBOX_ON_SENT mode: with and without a checkpoint between the insert and the drain
# (after a checkpoint the first change to each page logs the whole page), at wal_level
# replica and logical (logical logs an updated row whole).
#   bench/wal.sh [--rows N] [--modes "keep mark delete"] [--levels "replica logical"] [--out DIR]
#   (default 100,000 rows, every mode and level)
# For each wal_level it starts its own PostgreSQL 15 (durable) and Kafka like bench/bench.sh;
# for each mode and checkpoint variant: a database with the table, N rows of 1 KB over 1,000
# keys inserted (the insert's WAL), VACUUM ANALYZE, a CHECKPOINT in the variant that has one,
# then the relay (release build) started and run until it recorded all N and 2 s more (its
# watermark advances and other bookkeeping included; retention is not: rows are young).
# pg_waldump --stats over the drain's WAL is kept in the output folder (what the bytes are).
# One RESULT line per run, with what the drain left in the outbox table (pg_stat_user_tables
# once the relay has stopped: rows updated, deleted, dead; keep mode's are 0):
#   RESULT wal_level=.. on_sent=.. checkpoint=0|1 insert_bytes_per_event=.. relay_bytes_per_event=.. wal_ratio=..
#          n_tup_upd=.. n_tup_del=.. n_dead_tup=.. drain_eps=..
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
rows=100000 modes="keep mark delete" levels="replica logical" out=""
. scripts/common.sh
common_flags "[--rows N] [--modes LIST] [--levels LIST] [--out DIR]" "--rows=rows --modes=modes --levels=levels --out=out" "$@"
common_bench_out wal
common_setup
relay_bin=$src/build/outbox-relay
trap 'common_stop_relay; servers_stop' EXIT
export PG_DURABLE=1
for level in $levels; do
    export PG_EXTRA_CONF="wal_level = $level"
    servers_start
    for mode in $modes; do
        for ckpt in 0 1; do
            db=w_${level}_${mode}_$ckpt
            dsn=$(common_db "$db")
            psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
            OUTBOX_PG_DSN=$dsn "$relay_bin" migrate >"$out/migrate-$db.log" 2>&1
            w0=$(psqlc "SELECT pg_current_wal_insert_lsn()")
            psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
                   SELECT 'w', 'k' || (g % 1000), 'Created', jsonb_build_object('n', g, 'pad', repeat('x', 970))
                   FROM generate_series(1, $rows) g"
            wi=$(psqlc "SELECT pg_current_wal_insert_lsn()")
            psqlc "VACUUM ANALYZE outbox"
            [ "$ckpt" = 0 ] || psqlc "CHECKPOINT"
            w1=$(psqlc "SELECT pg_current_wal_insert_lsn()")
            t0=$(date +%s.%N)
            common_relay_drain "$dsn" "$mode" "wal.$db.{aggregate_type}" "$out/relay-$db.log" "$rows"
            t1=$(date +%s.%N)
            sleep 2
            common_stop_relay
            sleep 1 # the relay's sessions have ended and reported their counts
            tup=$(psqlc "SELECT 'n_tup_upd=' || n_tup_upd || ' n_tup_del=' || n_tup_del || ' n_dead_tup=' || n_dead_tup
                         FROM pg_stat_user_tables WHERE relname = 'outbox'")
            w2=$(psqlc "SELECT pg_current_wal_insert_lsn()")
            "$PG_BIN/pg_waldump" --stats=record -p "$RELAYTEST_PG_DIR/data/pg_wal" -s "$w1" -e "$w2" \
                >"$out/waldump-$db.txt" 2>&1 || true
            ins=$(psqlc "SELECT '$wi'::pg_lsn - '$w0'::pg_lsn") drain=$(psqlc "SELECT '$w2'::pg_lsn - '$w1'::pg_lsn")
            line="RESULT wal_level=$level on_sent=$mode checkpoint=$ckpt"
            line+=" $(awk -v i="$ins" -v d="$drain" -v n="$rows" 'BEGIN { printf "insert_bytes_per_event=%.0f relay_bytes_per_event=%.1f wal_ratio=%.4f", i / n, d / n, d / i }')"
            line+=" $tup $(awk -v n="$rows" -v a="$t0" -v b="$t1" 'BEGIN { printf "drain_eps=%.0f", n / (b - a) }')"
            echo "$line" | tee -a "$out/results.txt"
        done
    done
    servers_stop
done
