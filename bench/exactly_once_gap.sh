#!/usr/bin/env bash
# What OUTBOX_TRANSACTION_GAP_MS changes, one run, the same servers (PostgreSQL 15 from
# scripts/servers.sh; Kafka: one broker from there, or with --cluster 1 a 3-broker cluster of
# test/env/kafka.sh, replication 3, min.insync.replicas 2), mark mode, release build. Per gap
# value, in a fresh database and topic, the relay in exactly-once mode with librdkafka's
# eos,protocol debug log, writers at E events/s for S s (pgbench --rate, 8 clients, one 1 KB
# row per transaction over 1,000 keys), then:
#   txns        transactions committed;
#               (one run spans no midnight UTC: the open times are read from the log's clock)
#   concurrent  AddPartitionsToTxn answers CONCURRENT_TRANSACTIONS (librdkafka tries again
#               after 20 ms: the coordinator had not finished the previous commit);
#   open_p50/p90_ms  how long a transaction stayed open (begin to the commit call);
#   p50_ms, p99_ms   commit -> consumed with read_committed (bench/e2e_latency.c).
# Prints one line per gap value:
#   RESULT gap_ms=.. txns=.. concurrent=.. open_p50_ms=.. open_p90_ms=.. p50_ms=.. p99_ms=..
#   bench/exactly_once_gap.sh [--gaps "0 5 10"] [--rate E] [--seconds S] [--cluster 0|1] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
gaps="0 5 10" rate=1000 seconds=15 cluster=0 out=""
common_flags "[--gaps \"0 5 10\"] [--rate E] [--seconds S] [--cluster 0|1] [--out DIR]" \
    "--gaps=gaps --rate=rate --seconds=seconds --cluster=cluster --out=out" "$@"
common_bench_out exactly-once-gap
common_setup
ninja -C build bench/e2e-latency >/dev/null
export PG_DURABLE=1 RELAYTEST_NO_RABBITMQ=1
kc=""
cleanup() {
    common_stop_relay
    [ -z "$lat_pid" ] || kill "$lat_pid" 2>/dev/null || true
    if [ -n "$kc" ]; then
        for n in n1 n2 n3; do bash test/env/kafka.sh kill "$kc/$n" 2>/dev/null || true; done
    fi
    servers_stop
}
trap cleanup EXIT
servers_start
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
if [ "$cluster" = 1 ]; then
    kc=$out/kafka-cluster
    kport=$(free_ports 6)
    bash test/env/kafka.sh cluster "$kc" "$kport" >&2
    bootstrap=127.0.0.1:$kport,127.0.0.1:$((kport + 2)),127.0.0.1:$((kport + 4))
fi

quantiles() { # FILE KIND: p50 and p90 of the lines "KIND ms"
    awk -v k="$2" '$1 == k { print $2 }' "$1" | sort -n |
        awk '{ a[NR] = $1 } END { if (NR) printf "%s %s\n", a[int((NR + 1) * 0.5)], a[int((NR - 1) * 0.9) + 1]; else print "- -" }'
}

for gap in $gaps; do
    db="eogap_$gap"
    dsn=$(common_db "$db")
    OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
    common_writer_sql "$dsn" "$out/writer-$db.sql" 1000 1000
    prefix="gap$gap$$"
    relay_port=$(free_ports 1)
    OUTBOX_PG_DSN=$dsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap OUTBOX_TOPIC_TEMPLATE="$prefix.{aggregate_type}" \
        OUTBOX_HTTP_ADDR=127.0.0.1:$relay_port OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$prefix" \
        OUTBOX_PROGRESS_TOPIC="$prefix.progress" OUTBOX_TRANSACTION_GAP_MS="$gap" OUTBOX_LOG_LEVEL=debug \
        OUTBOX_KAFKA_DEBUG=eos,protocol ./build/outbox-relay >"$out/relay-$db.log" 2>&1 &
    relay_pid=$!
    for _ in $(seq 300); do grep -q "claiming" "$out/relay-$db.log" && break; sleep 0.2; done
    grep -q "claiming" "$out/relay-$db.log" || { echo "the relay did not start claiming: $out/relay-$db.log" >&2; exit 1; }
    # one row first, so that the topic exists before the latency consumer looks for it
    "$COMMON_PG_BIN/psql" -X -q "$dsn" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
        VALUES ('order', 'k0', 'Created', '{}')"
    sent=0
    for _ in $(seq 300); do
        sent=$("$COMMON_PG_BIN/psql" -X -qAt "$dsn" -c "SELECT count(*) FROM outbox WHERE status = 'SENT'")
        [ "$sent" = 1 ] && break
        sleep 0.1
    done
    [ "$sent" = 1 ] || { echo "the first row was not published in 30 s: $out/relay-$db.log" >&2; exit 1; }
    common_steady "$db" "$bootstrap" "$prefix.order" "$rate" "$seconds" "$out"
    common_stop_relay
    kill -TERM "$lat_pid" 2>/dev/null || true
    wait "$lat_pid" || true
    lat_pid=""
    log=$out/relay-$db.log
    # begin -> first commit call: how long each transaction stayed open (a commit called
    # again after its 1 s timeout is the same transaction)
    awk '{ split($1, a, "T"); split(a[2], t, ":"); s = t[1] * 3600 + t[2] * 60 + substr(t[3], 1, 6) }
         /Transactional API called: begin_transaction/ { b = s }
         /Transactional API called: commit_transaction/ && b { printf "open %.0f\n", (s - b) * 1000; b = 0 }' "$log" >"$out/open-$db.txt"
    read -r op50 op90 < <(quantiles "$out/open-$db.txt" open)
    p50=$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    p99=$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' "$out/latency-$db.txt")
    echo "RESULT gap_ms=$gap txns=$(grep -c 'Transaction successfully committed' "$log") concurrent=$(grep -c 'AddPartitionsToTxn response: .*concurrent operation' "$log") open_p50_ms=$op50 open_p90_ms=$op90 p50_ms=$p50 p99_ms=$p99"
done
