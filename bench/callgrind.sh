#!/usr/bin/env bash
# Instructions per event of the relay's loop thread, counted by callgrind: repeatable on a
# shared, noisy machine where seconds are not. Drains a backlog of N rows (1 KB JSON
# payloads, 1,000 keys) into Kafka with the relay under valgrind --tool=callgrind
# --separate-threads=yes, and divides the loop thread's instruction count by N
# (librdkafka's own threads vary with timing and are reported apart).
#   bench/callgrind.sh [N]       default N = 20000
# Last line: CALLGRIND events=.. loop_instructions_per_event=.. all_threads_per_event=..
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
n=${1:-20000}
common_setup build-callgrind release
common_servers_start
trap common_servers_stop EXIT
dsn=$(common_db callgrind)
out=$(mktemp -d /tmp/outbox-callgrind.XXXXXX)
OUTBOX_PG_DSN=$dsn build-callgrind/outbox-relay migrate >/dev/null 2>&1
common_backlog "$dsn" "$n" 1000
OUTBOX_PG_DSN=$dsn OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT OUTBOX_HTTP_ADDR= \
    OUTBOX_TOPIC_TEMPLATE="callgrind.$(date +%s).{aggregate_type}" \
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out/cg.out" \
    build-callgrind/outbox-relay >"$out/relay.log" 2>&1 &
relay=$!
deadline=$((SECONDS + 600))
until [ "$("$COMMON_PG_BIN/psql" -X -At "$dsn" -c "SELECT count(*) FROM outbox WHERE status <> 'SENT'")" = 0 ]; do
    [ $SECONDS -lt $deadline ] || { tail "$out/relay.log"; echo "callgrind: backlog not drained" >&2; exit 1; }
    sleep 1
done
kill -TERM "$relay"
wait "$relay" || true
loop=$(sed -n 's/^summary: //p' "$out/cg.out-01")
all=0
for f in "$out"/cg.out-*; do all=$((all + $(sed -n 's/^summary: //p' "$f"))); done
rm -rf "$out"
echo "CALLGRIND events=$n loop_instructions_per_event=$((loop / n)) all_threads_per_event=$((all / n))"
