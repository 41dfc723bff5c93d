#!/usr/bin/env bash
# The long-transaction cliff: writers at a steady rate while a REPEATABLE READ transaction
# stays open elsewhere in the database (what pg_dump, a long report or an idle-in-
# transaction session does). Every row the relay marks (or deletes) meanwhile leaves a dead
# entry in the pending index that vacuum may not remove while that snapshot is open.
#   bench/longtx.sh [--seconds S] [--rate EPS] [--on-sent mark|delete|keep] [--partition IDS] [--out DIR]
# (defaults: 600 s, 3,000 events/s, mark; --partition: keep mode's table partitioned by id,
# IDS ids per partition, by `migrate --partition IDS` before the writers start). Starts its own throwaway PostgreSQL (durable)
# and Kafka like bench/bench.sh. The transaction opens 10 s after the writers start and
# stays open until they stop. Every 5 s it prints the pending rows (rows written minus rows
# the relay marked: the id sequence against the relay's metric, read just after a fresh
# metrics snapshot, so the sampling itself never walks the pending index). The last line is:
#   RESULT longtx_max_pending=.. longtx_final_pending=.. published=.. seconds=.. rate=.. on_sent=..
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
seconds=600 rate=3000 on_sent=mark partition="" out=""
. scripts/common.sh
common_flags "[--seconds S] [--rate EPS] [--on-sent mark|delete|keep] [--partition IDS] [--out DIR]" "--seconds=seconds --rate=rate --on-sent=on_sent --partition=partition --out=out" "$@"
common_bench_out longtx

common_setup
relay_bin=$src/build/outbox-relay
export PG_DURABLE=1
relay_pid="" tx_pid="" pgb_pid=""
cleanup() {
    for p in $pgb_pid $tx_pid; do kill "$p" 2>/dev/null || true; done
    [ -n "$relay_pid" ] && { kill -TERM "$relay_pid" 2>/dev/null; wait "$relay_pid" 2>/dev/null || true; }
    servers_stop
}
trap cleanup EXIT
servers_start
dsn=$(common_db longtx)
psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }
OUTBOX_PG_DSN=$dsn "$relay_bin" migrate >"$out/migrate.log" 2>&1
[ -z "$partition" ] || OUTBOX_PG_DSN=$dsn OUTBOX_ON_SENT=keep "$relay_bin" migrate --partition "$partition" >>"$out/migrate.log" 2>&1
common_writer_sql "$dsn" "$out/writer.sql" 10000 1000
http_port=$((RELAYTEST_KAFKA_PORT + 9))
env OUTBOX_PG_DSN="$dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$RELAYTEST_KAFKA_PORT" \
    OUTBOX_HTTP_ADDR="127.0.0.1:$http_port" OUTBOX_TOPIC_TEMPLATE="longtx.{aggregate_type}" \
    OUTBOX_LOG_LEVEL=info OUTBOX_ON_SENT="$on_sent" OUTBOX_LONG_TRANSACTION_SECONDS=30 \
    "$relay_bin" >"$out/relay.log" 2>&1 &
relay_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
marked() { metric_at "http://127.0.0.1:$http_port/metrics" outbox_marked_total; }
# The relay's /metrics is a snapshot it renders every 0.5 s (lib/relay/status.c): read at a
# random moment, its count lags the sequence by up to half a second of writes (1,500 rows at
# 3,000 events/s, counted as pending though already published). So a sample waits for a new
# snapshot (polled every 20 ms, for at most 0.8 s) and reads the sequence right after it:
# pending is then overstated by the poll and the read (tens of ms of writes), never
# understated.
fresh_marked() { common_fresh_metric "http://127.0.0.1:$http_port/metrics" outbox_marked_total; }

say "writers at $rate events/s for $seconds s; a REPEATABLE READ transaction opens at 10 s"
# writers commit with synchronous_commit=off (as bench/bench.sh's): the rate is then the
# relay's test, not the disk's fsync queue
PGOPTIONS="-c synchronous_commit=off" "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -R "$rate" -T "$seconds" \
    -f "$out/writer.sql" longtx >"$out/pgbench.txt" 2>&1 &
pgb_pid=$!
sleep 10
# the open transaction: a snapshot taken, then idle (it reads the outbox table once, as pg_dump would)
{ echo "BEGIN ISOLATION LEVEL REPEATABLE READ;"; echo "SELECT count(*) FROM outbox;"; sleep "$seconds"; echo "COMMIT;"; } |
    "$PG_BIN/psql" -X -q "$dsn" >/dev/null 2>&1 &
tx_pid=$!
max=0 t=10
: >"$out/pending.tsv"
while kill -0 "$pgb_pid" 2>/dev/null; do
    sleep 5
    t=$((t + 5))
    m=$(fresh_marked)
    written=$(psqlc "SELECT last_value FROM outbox_id_seq")
    pending=$((written - m))
    [ "$pending" -gt "$max" ] && max=$pending
    printf '%s\t%s\t%s\t%s\n' "$t" "$written" "$m" "$pending" >>"$out/pending.tsv"
    say "t=${t}s written=$written published=$m pending=$pending"
done
wait "$pgb_pid" || true
pgb_pid=""
m=$(fresh_marked)
final=$(( $(psqlc "SELECT last_value FROM outbox_id_seq") - m ))
kill "$tx_pid" 2>/dev/null || true
tx_pid=""
say "figures and raw data in $out"
echo "RESULT longtx_max_pending=$max longtx_final_pending=$final published=$(marked) seconds=$seconds rate=$rate on_sent=$on_sent partition=${partition:-none}"
