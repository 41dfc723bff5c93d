#!/bin/bash
# Scale-out check: drains an N-row backlog (default 1,000,000; 1 KB rows, 10,000 keys) with
# RELAYS relays (default 3) on one table and prints the rows SENT every 2 s.
#   N=1000000 RELAYS=3 bench/scaleout.sh
cd "$(dirname "$0")/.."
. scripts/servers.sh
trap 'pkill -f "build/outbox-relay"; servers_stop' EXIT
servers_start 2>/dev/null
dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=outbox"
./build/outbox-relay migrate --pg-dsn "$dsn" >/dev/null 2>&1
psql -X -q "$dsn" -c "insert into outbox(aggregate_type, aggregate_id, event_type, payload) select 'b', 'k'||(g%10000), 'C', jsonb_build_object('pad', repeat(md5(g::text), 30)) from generate_series(1,${N:-300000}) g" -c "vacuum analyze outbox"
for i in $(seq 1 ${RELAYS:-3}); do
  OUTBOX_PG_DSN="$dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$RELAYTEST_KAFKA_PORT OUTBOX_HTTP_ADDR=127.0.0.1:$((23000+i)) OUTBOX_RELAY_NAME=r$i OUTBOX_LOG_LEVEL=${LL:-info} ./build/outbox-relay > /tmp/three-$i.log 2>&1 &
done
start=$(date +%s)
for s in $(seq 1 120); do
  sleep 2
  n=$(psql -X -At "$dsn" -c "select count(*) from outbox where status='SENT'")
  echo "$(( $(date +%s) - start ))s sent=$n"
  [ "$n" = ${N:-300000} ] && break
done
