#!/usr/bin/env bash
# The proof under ordinary load: application transactions that insert an outbox row and
# then do other work before committing, many at once and staggered (at every moment some are
# open), beside fast writers, optionally with a REPEATABLE READ reader open throughout.
#   bench/overlap.sh [--seconds S] [--rate EPS] [--writers N] [--tx-ms MIN-MAX]
#                    [--on-sent mark|delete|keep] [--reader 0|1] [--out DIR]
# (defaults: 600 s, fast writers at 1,500 events/s, 16 slow writers of 300-1000 ms, mark, no
# reader). Starts its own throwaway PostgreSQL (durable) and Kafka like bench/longtx.sh.
# Every 5 s it prints the pending rows (rows written minus rows published, read just after a
# fresh metrics snapshot), the claims from the bottom since the last sample, and in keep mode
# outbox_watermark_lag_seconds; outbox_proof_held_seconds in every mode. The last line is:
#   RESULT overlap_max_pending=.. overlap_final_pending=.. two_seconds=.. (two seconds of
#          writes at the rate reached) max_bottom_per_s=.. max_wlag_s=.. max_held_s=.. slow_tps=..
#          published=.. events_per_s=.. seconds=.. rate=.. writers=.. tx_ms=.. on_sent=.. reader=..
# bench/overlap_matrix.sh runs it over writer counts, transaction lengths, modes and readers.
# Targets (issue "The proof under the relay"): pending under two seconds of writes, claims
# from the bottom at most 1 per second, watermark lag at most 2 s.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
seconds=600 rate=1500 writers=16 tx_ms=300-1000 on_sent=mark reader=0 out=""
. scripts/common.sh
common_flags "[--seconds S] [--rate EPS] [--writers N] [--tx-ms MIN-MAX] [--on-sent mark|delete|keep] [--reader 0|1] [--out DIR]" \
    "--seconds=seconds --rate=rate --writers=writers --tx-ms=tx_ms --on-sent=on_sent --reader=reader --out=out" "$@"
common_bench_out overlap
tx_min=${tx_ms%-*} tx_max=${tx_ms#*-}

common_setup
relay_bin=$src/build/outbox-relay
export PG_DURABLE=1
relay_pid="" tx_pid="" fast_pid="" slow_pid=""
cleanup() {
    for p in $fast_pid $slow_pid $tx_pid; do kill "$p" 2>/dev/null || true; done
    common_stop_relay
    servers_stop
}
trap cleanup EXIT
servers_start
dsn=$(common_db overlap)
psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }
OUTBOX_PG_DSN=$dsn "$relay_bin" migrate >"$out/migrate.log" 2>&1
common_writer_sql "$dsn" "$out/fast.sql" 10000 1000
# the slow writers' keys are their own (10001-20000): each locks its aggregate, inserts, then
# works for tx_min..tx_max ms before committing
psqlc "INSERT INTO aggregate SELECT g FROM generate_series(10001, 20000) g ON CONFLICT DO NOTHING"
cat >"$out/slow.sql" <<SQL
\set k random(10001, 20000)
\set work random($tx_min, $tx_max)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('order', 'k' || :k, 'Slow', jsonb_build_object('k', :k, 'pad', repeat('x', 970)));
SELECT pg_sleep(:work / 1000.0);
COMMIT;
SQL
http_port=$((RELAYTEST_KAFKA_PORT + 9))
env OUTBOX_PG_DSN="$dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$RELAYTEST_KAFKA_PORT" \
    OUTBOX_HTTP_ADDR="127.0.0.1:$http_port" OUTBOX_TOPIC_TEMPLATE="overlap.{aggregate_type}" \
    OUTBOX_LOG_LEVEL=info OUTBOX_ON_SENT="$on_sent" OUTBOX_LONG_TRANSACTION_SECONDS=30 \
    "$relay_bin" >"$out/relay.log" 2>&1 &
relay_pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
m_at() { metric_at "http://127.0.0.1:$http_port/metrics" "$1"; }
# a sample waits for a fresh metrics snapshot (rendered every 0.5 s) and reads the sequence
# right after it (bench/longtx.sh says why)
fresh_marked() { common_fresh_metric "http://127.0.0.1:$http_port/metrics" outbox_marked_total; }

say "fast writers at $rate events/s and $writers slow writers of $tx_ms ms for $seconds s, $on_sent mode, reader $reader"
PGOPTIONS="-c synchronous_commit=off" "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 4 -j 1 -R "$rate" \
    -T "$seconds" -f "$out/fast.sql" overlap >"$out/pgbench-fast.txt" 2>&1 &
fast_pid=$!
PGOPTIONS="-c synchronous_commit=off" "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c "$writers" -j 1 \
    -T "$seconds" -f "$out/slow.sql" overlap >"$out/pgbench-slow.txt" 2>&1 &
slow_pid=$!
if [ "$reader" = 1 ]; then # a snapshot taken, then idle, as pg_dump would
    { echo "BEGIN ISOLATION LEVEL REPEATABLE READ;"; echo "SELECT count(*) FROM outbox;"; sleep "$seconds"; echo "COMMIT;"; } |
        "$PG_BIN/psql" -X -q "$dsn" >/dev/null 2>&1 &
    tx_pid=$!
fi
max=0 t=0 max_bottom=0 max_wlag=0 max_held=0
b_prev=$(m_at outbox_claims_from_bottom_total)
printf 't\twritten\tpublished\tpending\tbottom_per_s\twlag_s\theld_s\n' >"$out/samples.tsv"
while kill -0 "$fast_pid" 2>/dev/null; do
    sleep 5
    t=$((t + 5))
    m=$(fresh_marked)
    written=$(psqlc "SELECT last_value FROM outbox_id_seq")
    pending=$((written - m))
    b=$(m_at outbox_claims_from_bottom_total)
    bottom=$(awk -v a="$b" -v p="$b_prev" 'BEGIN { printf "%.1f", (a - p) / 5 }')
    b_prev=$b
    wlag=0
    [ "$on_sent" != keep ] || wlag=$(m_at outbox_watermark_lag_seconds)
    held=$(m_at outbox_proof_held_seconds)
    # the first 10 s are the start: the backlog before the first proof
    if [ "$t" -gt 10 ]; then
        [ "$pending" -gt "$max" ] && max=$pending
        max_bottom=$(awk -v a="$bottom" -v m="$max_bottom" 'BEGIN { print (a > m) ? a : m }')
        max_wlag=$(awk -v a="$wlag" -v m="$max_wlag" 'BEGIN { print (a > m) ? a : m }')
        max_held=$(awk -v a="$held" -v m="$max_held" 'BEGIN { print (a > m) ? a : m }')
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$written" "$m" "$pending" "$bottom" "$wlag" "$held" >>"$out/samples.tsv"
    say "t=${t}s written=$written published=$m pending=$pending bottom/s=$bottom wlag=${wlag}s held=${held}s"
done
wait "$fast_pid" || true
fast_pid=""
wait "$slow_pid" || true
slow_pid=""
sleep 2
m=$(fresh_marked)
final=$(($(psqlc "SELECT last_value FROM outbox_id_seq") - m))
[ -z "$tx_pid" ] || kill "$tx_pid" 2>/dev/null || true
tx_pid=""
slow_tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$out/pgbench-slow.txt" | head -1)
say "figures and raw data in $out"
published=$(m_at outbox_marked_total)
eps=$((published / seconds))
echo "RESULT overlap_max_pending=$max overlap_final_pending=$final two_seconds=$((2 * eps)) max_bottom_per_s=$max_bottom max_wlag_s=$max_wlag max_held_s=$max_held slow_tps=${slow_tps:-?} published=$published events_per_s=$eps seconds=$seconds rate=$rate writers=$writers tx_ms=$tx_ms on_sent=$on_sent reader=$reader"
