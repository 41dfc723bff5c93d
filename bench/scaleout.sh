#!/usr/bin/env bash
# Scale-out check: drains an N-row backlog (default 1,000,000; 1 KB rows, 10,000 keys) with
# RELAYS relays (default 3) on one table, printing the rows SENT every 2 s.
#   N=1000000 RELAYS=3 bench/scaleout.sh
set -uo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000} RELAYS=${RELAYS:-3}
. scripts/common.sh
common_setup
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait || true; servers_stop' EXIT
servers_start 2>/dev/null
dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=outbox"
./build/outbox-relay migrate --pg-dsn "$dsn" >/dev/null 2>&1
psql -X -q "$dsn" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'b', 'k' || (g % 10000), 'C', jsonb_build_object('pad', repeat(md5(g::text), 30))
    FROM generate_series(1, $N) g" -c "VACUUM ANALYZE outbox"
for i in $(seq 1 "$RELAYS"); do
    OUTBOX_PG_DSN="$dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT OUTBOX_HTTP_ADDR= \
        OUTBOX_RELAY_NAME="r$i" OUTBOX_LOG_LEVEL=warn ./build/outbox-relay >"/tmp/outbox-scaleout-$i.log" 2>&1 &
    pids+=($!)
done
start=$(date +%s)
while :; do
    sleep 2
    n=$(psql -X -At "$dsn" -c "SELECT count(*) FROM outbox WHERE status = 'SENT'")
    echo "$(($(date +%s) - start))s sent=$n"
    [ "$n" = "$N" ] && break
done
echo "SCALEOUT relays=$RELAYS events=$N seconds=$(($(date +%s) - start))"
