#!/usr/bin/env bash
# outbox-inbox throughput with a trivial handler (one INSERT into a business table):
# EVENTS events (default 50,000, 200-byte payloads, 1,000 keys, 6 partitions) are relayed to
# Kafka first; then one outbox-inbox applies them all (the new-event path), and a second
# one in another group reads them again under the same INBOX_NAME (every message a
# duplicate: the duplicate path). Prints events/s of each and CPU per event.
#   bench/inbox.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-50000}
. scripts/common.sh
common_setup
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; servers_stop' EXIT
servers_start
dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=outbox"
cdsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=billing"
psqlc() { "$PG_BIN/psql" -X -q -At "$1" -c "$2"; }
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
OUTBOX_PG_DSN=$dsn ./build/outbox-relay migrate >/dev/null 2>&1
psqlc "$dsn" "CREATE DATABASE billing"
INBOX_PG_DSN=$cdsn ./build/outbox-inbox migrate >/dev/null 2>&1
psqlc "$cdsn" "CREATE TABLE applied (event_id uuid PRIMARY KEY, key text NOT NULL);
    CREATE FUNCTION apply(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
    RETURNS void LANGUAGE sql AS 'INSERT INTO applied VALUES (event_id, key)'"
psqlc "$dsn" "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'bench', 'k' || (g % 1000), 'Updated', jsonb_build_object('n', g, 'pad', repeat('x', 200))
       FROM generate_series(1, $events) g"
work=$(mktemp -d)
OUTBOX_PG_DSN=$dsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap OUTBOX_HTTP_ADDR= OUTBOX_LOG_LEVEL=warn \
    ./build/outbox-relay >"$work/relay.log" 2>&1 &
relay=$!
pids+=("$relay")
until [ "$(psqlc "$dsn" "SELECT count(*) FROM outbox WHERE status = 'PENDING'")" = 0 ]; do sleep 1; done
kill -TERM "$relay"
wait "$relay" || true

# run NAME GROUP: one outbox-inbox until it has handled every event; prints its figures
run() {
    local name=$1 group=$2 port=$3 start end pid
    start=$(date +%s.%N)
    INBOX_PG_DSN=$cdsn INBOX_KAFKA_BOOTSTRAP_SERVERS=$bootstrap INBOX_TOPICS=outbox.event.bench INBOX_HANDLER=apply \
        INBOX_NAME=bench INBOX_KAFKA_GROUP_ID=$group INBOX_HTTP_ADDR=127.0.0.1:$port INBOX_LOG_LEVEL=warn \
        ./build/outbox-inbox >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    local handled=0
    until [ "$handled" -ge "$events" ]; do
        sleep 0.5
        handled=$(curl -s "http://127.0.0.1:$port/metrics" |
            awk '/^inbox_messages_total\{result="(applied|duplicate)"\}/ { n += $2 } END { print n + 0 }')
    done
    end=$(date +%s.%N)
    local ticks
    ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    kill -TERM "$pid"
    wait "$pid" || true
    awk -v n="$events" -v s="$start" -v e="$end" -v t="$ticks" -v hz="$(getconf CLK_TCK)" -v what="$name" 'BEGIN {
        printf "%s: %d events in %.1f s (from start, group join included): %.0f events/s, outbox-inbox CPU %.1f µs/event\n",
            what, n, e - s, n / (e - s), t / hz * 1e6 / n }'
}
run "new events (applied)" bench-apply 19466
[ "$(psqlc "$cdsn" "SELECT count(*) FROM applied")" = "$events" ] || { echo "applied count wrong"; exit 1; }
run "the same events again (duplicates)" bench-dup 19467
[ "$(psqlc "$cdsn" "SELECT count(*) FROM applied")" = "$events" ] || { echo "duplicates were applied"; exit 1; }
rm -rf "$work"
