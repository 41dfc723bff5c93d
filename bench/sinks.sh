#!/usr/bin/env bash
# The relay's two sinks side by side, one run, the same servers (throwaway PostgreSQL 15 with
# fsync on, single-node Kafka 4.1.1 and RabbitMQ 3.10 from scripts/servers.sh): each round
# drains the same backlog (1 KB JSON payloads over 10,000 keys, mark mode) once into Kafka
# and once into RabbitMQ (persistent messages, publisher confirms, a durable queue bound to
# every topic) and once more into RabbitMQ with OUTBOX_RABBITMQ_STRICT_KEY_ORDER=1
# (rabbitmq-strict: at most one unconfirmed message per key), and measures the drain's
# events/s, the relay's CPU per event, PostgreSQL's CPU per event (all server processes) and
# the relay's peak RSS; then, with the backlog drained, the latency of 40 single events
# committed one at a time, commit -> confirmed and marked (p50 and the highest: for RabbitMQ
# this includes the hop to the sink's thread and back, and the broker's disk write before its
# confirm). Medians of the rounds.
#   bench/sinks.sh [--rows N] [--rounds R] [--out DIR]       (defaults 100000 rows, 3 rounds)
# The last lines are
#   RESULT sink=kafka drain_eps=.. cpu_us_per_event=.. pg_cpu_us_per_event=.. rss_mb=.. p50_ms=.. max_ms=..
#   RESULT sink=rabbitmq drain_eps=.. cpu_us_per_event=.. pg_cpu_us_per_event=.. rss_mb=..
#   RESULT sink=rabbitmq-strict drain_eps=.. cpu_us_per_event=.. pg_cpu_us_per_event=.. rss_mb=..
set -euo pipefail
cd "$(dirname "$0")/.."
N=100000 ROUNDS=3 out=""
while [ $# -gt 0 ]; do
    case $1 in
    --rows) N=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--rows N] [--rounds R] [--out DIR]" >&2; exit 2 ;;
    esac
done
. scripts/common.sh
common_bench_out sinks
common_setup
relay_bin=$PWD/build/outbox-relay
export PG_DURABLE=1
relay_pid=
trap 'common_stop_relay; servers_stop' EXIT
servers_start
dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=bench"
amqp_url=amqp://guest:guest@127.0.0.1:$RELAYTEST_RABBITMQ_PORT
http_port=$(free_ports 1)
psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }
"$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" -c "CREATE DATABASE bench"
OUTBOX_PG_DSN=$dsn "$relay_bin" migrate >/dev/null 2>&1
psqlc "CREATE FUNCTION bench_wait_sent(row_id bigint) RETURNS void LANGUAGE plpgsql AS \$\$
       BEGIN
         WHILE EXISTS (SELECT 1 FROM outbox WHERE id = row_id AND status = 'PENDING') LOOP
           PERFORM pg_sleep(0.001);
         END LOOP;
       END \$\$"
ninja -C build test/amqp-check >/dev/null
./build/test/amqp-check bind "$amqp_url" outbox bench.queue 'bench.#'
rmq() { bash test/env/rabbitmq.sh ctl "$RELAYTEST_RABBITMQ_DIR" "$@"; }
tick_hz=$(getconf CLK_TCK)
now() { date +%s.%N; }
metric() { metric_at "http://127.0.0.1:$http_port/metrics" "$1"; }

drain() { # sink: prints eps, relay us/event, PostgreSQL us/event, peak RSS MB
    local sink=$1 t0 t1 c0 c1 p0 p1
    psqlc "TRUNCATE outbox"
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'bench', 'k' || (g % 10000), 'Created', jsonb_build_object('seq', g, 'pad', repeat(md5(g::text), 30))
           FROM generate_series(1, $N) g"
    psqlc "VACUUM ANALYZE outbox"
    rmq purge_queue bench.queue >/dev/null
    local broker=(OUTBOX_SINK=kafka OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$RELAYTEST_KAFKA_PORT")
    [ "$sink" = kafka ] || broker=(OUTBOX_SINK=rabbitmq OUTBOX_RABBITMQ_URL="$amqp_url")
    [ "$sink" != rabbitmq-strict ] || broker+=(OUTBOX_RABBITMQ_STRICT_KEY_ORDER=1)
    env OUTBOX_PG_DSN="$dsn" OUTBOX_HTTP_ADDR="127.0.0.1:$http_port" OUTBOX_TOPIC_TEMPLATE="bench.{aggregate_type}" \
        OUTBOX_LOG_LEVEL=warn "${broker[@]}" "$relay_bin" >>"$out/relay-$sink.log" 2>&1 &
    relay_pid=$!
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$http_port/healthz" >/dev/null && break; sleep 0.1; done
    c0=$(awk '{ print $14 + $15 }' "/proc/$relay_pid/stat")
    p0=$(pg_ticks)
    t0=$(now)
    while [ "$(metric outbox_claims_total)" = 0 ]; do t0=$(now); sleep 0.02; done
    while [ "$(metric outbox_marked_total)" != "$N" ]; do sleep 0.2; done
    t1=$(now)
    c1=$(awk '{ print $14 + $15 }' "/proc/$relay_pid/stat")
    p1=$(pg_ticks)
    local rss_kb lat
    rss_kb=$(awk '/VmHWM/ { print $2 }' "/proc/$relay_pid/status")
    : >"$out/latency-$sink.txt"
    for _ in $(seq 1 40); do # commit -> marked, one event at a time
        "$PG_BIN/psql" -X -q -At "$dsn" >>"$out/latency-$sink.txt" <<'SQL'
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('bench', 'lat', 'Created', '{"lat": true}') RETURNING id AS lat_id, clock_timestamp() AS lat_t0 \gset
\o /dev/null
SELECT bench_wait_sent(:lat_id);
\o
SELECT round(extract(epoch FROM clock_timestamp() - :'lat_t0') * 1000, 1);
SQL
        sleep 0.05
    done
    lat=$(sort -g "$out/latency-$sink.txt" | awk '{ a[NR] = $1 } END { printf "%s\t%s", a[int((NR + 1) / 2)], a[NR] }')
    common_stop_relay
    awk -v n="$N" -v a="$t0" -v b="$t1" -v c="$((c1 - c0))" -v p="$((p1 - p0))" -v hz="$tick_hz" -v r="$rss_kb" -v l="$lat" \
        'BEGIN { printf "%.0f\t%.2f\t%.2f\t%.1f\t%s\n", n / (b - a), c / hz * 1e6 / n, p / hz * 1e6 / n, r / 1024, l }'
}

for round in $(seq 1 "$ROUNDS"); do
    for sink in kafka rabbitmq rabbitmq-strict; do
        line=$(drain "$sink")
        echo "$line" >>"$out/$sink.tsv"
        say "round $round/$ROUNDS, $sink: $(awk -F'\t' '{ printf "%s events/s, relay %s us/event, PostgreSQL %s us/event, RSS %s MB, latency p50 %s ms max %s ms", $1, $2, $3, $4, $5, $6 }' <<<"$line")"
    done
done
if [ "$(./build/test/amqp-check depth "$amqp_url" bench.queue)" != "$((N + 40))" ]; then
    say "the queue does not hold the last round's $N messages and 40 single events"
    exit 1
fi
for sink in kafka rabbitmq rabbitmq-strict; do
    col() { cut -f"$1" "$out/$sink.tsv" | median; }
    echo "RESULT sink=$sink drain_eps=$(col 1) cpu_us_per_event=$(col 2) pg_cpu_us_per_event=$(col 3) rss_mb=$(col 4) p50_ms=$(col 5) max_ms=$(col 6) rows=$N rounds=$ROUNDS"
done
