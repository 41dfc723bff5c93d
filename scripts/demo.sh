#!/usr/bin/env bash
# End-to-end demo on a fresh machine: installs what it needs, starts a throwaway PostgreSQL
# and Kafka, migrates the outbox table, runs the relay and a demo writer, shows the events
# arriving in Kafka, and applies them once each to a billing database with outbox-inbox.
# Ctrl-C stops everything cleanly and removes the servers.
#   DEMO_SECONDS=N scripts/demo.sh   stops by itself after N seconds
# If the relay, outbox-inbox or outbox-tail exits while the demo runs, the demo shows its last
# lines and exits 1.
#   scripts/demo.sh --broker rabbitmq
#                                    the same with a throwaway RabbitMQ node instead of Kafka:
#                                    the relay publishes to the exchange outbox, outbox-inbox
#                                    consumes the queue billing bound to it
set -euo pipefail
cd "$(dirname "$0")/.."
broker=kafka
while [ $# -gt 0 ]; do
    case $1 in
    --broker) broker=${2:-}; shift 2 || { echo "usage: $0 [--broker kafka|rabbitmq]" >&2; exit 2; } ;;
    *) echo "usage: $0 [--broker kafka|rabbitmq]" >&2; exit 2 ;;
    esac
done
case $broker in
kafka) export RELAYTEST_NO_RABBITMQ=1 ;;
rabbitmq) ;;
*) echo "demo: --broker kafka or rabbitmq, not '$broker'" >&2; exit 2 ;;
esac

echo "== installing packages, fetching the Kafka broker (first run only), building"
. scripts/common.sh
common_setup

# stop PID: SIGTERM once, then wait for it (a second signal would make the relay exit at once).
stop() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# The relay's own shutdown has begun when its log says so (Ctrl-C reaches the whole process
# group, the relay included, so signalling it again would be a second signal).
relay_stopping() { grep -q 'shutdown: stop claiming' "$workdir/relay.log" 2>/dev/null; }

# finish HOW [STATUS]: stops everything this script started and removes its folders. Never exits early:
# every step runs whatever the previous one returned.
finish() {
    local how=$1 status=${2:-0} i
    trap - INT TERM EXIT
    set +e
    echo
    echo "== stopping ($how)"
    [ -n "${writer:-}" ] && stop "$writer"
    [ -n "${tail_pid:-}" ] && stop "$tail_pid"
    if [ -n "${inbox:-}" ]; then
        stop "$inbox"
        echo "outbox-inbox exited with status $?; its last line:"
        tail -n 1 "$workdir/inbox.log"
        echo "billing database: $(psql -X -At "$billing_dsn" -c "SELECT count(*) || ' orders applied once each, revenue ' || coalesce(sum(total), 0) FROM revenue" 2>/dev/null)"
    fi
    if [ -n "${relay:-}" ]; then
        # After Ctrl-C the relay has the same SIGINT: give it a moment to start its shutdown.
        if [ "$how" = interrupted ]; then
            for i in 1 2 3 4 5 6 7 8 9 10; do relay_stopping || ! kill -0 "$relay" 2>/dev/null && break; sleep 0.1; done
        fi
        relay_stopping || kill -TERM "$relay" 2>/dev/null
        wait "$relay" 2>/dev/null
        echo "relay exited with status $?; its last lines:"
        tail -n 3 "$workdir/relay.log"
    fi
    servers_stop
    rm -rf "$workdir"
    echo "== stopped; nothing left behind"
    exit "$status" # 0 after Ctrl-C, SIGTERM or DEMO_SECONDS; a failed step's status otherwise
}
trap "finish interrupted" INT
trap "finish terminated" TERM
trap 'finish failed $?' EXIT
workdir=$(mktemp -d /tmp/outbox-demo.XXXXXX)

echo "== starting PostgreSQL 15 and Kafka$([ "$broker" = rabbitmq ] && echo " (unused by this demo) and RabbitMQ")"
servers_start
export OUTBOX_PG_DSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=outbox"
export OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$RELAYTEST_KAFKA_PORT"
inbox_source=()
if [ "$broker" = rabbitmq ]; then
    amqp_url=amqp://guest:guest@127.0.0.1:$RELAYTEST_RABBITMQ_PORT
    export OUTBOX_SINK=rabbitmq OUTBOX_RABBITMQ_URL=$amqp_url
    echo "== declaring the queue billing, bound to the exchange outbox for outbox.event.order"
    ./build/test/amqp-check bind "$amqp_url" outbox billing outbox.event.order
    inbox_source=(INBOX_SOURCE=rabbitmq INBOX_RABBITMQ_URL="$amqp_url" INBOX_RABBITMQ_QUEUES=billing)
fi

echo "== outbox-relay migrate"
./build/outbox-relay migrate
psql -X -q "$OUTBOX_PG_DSN" -c "CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total numeric NOT NULL)"

echo "== outbox-inbox migrate, in a billing database with a handler that books each order"
billing_dsn="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=billing"
psql -X -q "${OUTBOX_PG_DSN/dbname=outbox/dbname=postgres}" -c "CREATE DATABASE billing"
INBOX_PG_DSN=$billing_dsn ./build/outbox-inbox migrate
psql -X -q "$billing_dsn" -c "CREATE TABLE revenue (order_id text PRIMARY KEY, total numeric NOT NULL);
    CREATE FUNCTION book_order(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
    RETURNS void LANGUAGE sql AS 'INSERT INTO revenue VALUES (key, (payload->>''total'')::numeric)'"

# The HTTP endpoints on free ports (scripts/servers.sh), so that another program on the
# defaults (9481, 9466) cannot make them fail at start; or where OUTBOX_HTTP_ADDR and
# INBOX_HTTP_ADDR say.
export OUTBOX_HTTP_ADDR=${OUTBOX_HTTP_ADDR:-127.0.0.1:$(free_ports 1)}
export INBOX_HTTP_ADDR=${INBOX_HTTP_ADDR:-127.0.0.1:$(free_ports 1)}
echo "== starting the relay (log: $workdir/relay.log; /metrics and /status on $OUTBOX_HTTP_ADDR)"
./build/outbox-relay >"$workdir/relay.log" 2>&1 &
relay=$!

echo "== starting the demo writer: one order and its outbox row per transaction"
(
    n=0
    while true; do
        n=$((n + 1)) total=$((RANDOM % 500)).99
        psql -X -q "$OUTBOX_PG_DSN" -c "BEGIN;
            INSERT INTO orders VALUES ('order-$n', $total);
            INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
              VALUES ('order', 'order-$n', 'OrderPlaced',
                      jsonb_build_object('order_id', 'order-$n', 'n', $n, 'total', $total));
            COMMIT;" >/dev/null 2>&1 || true
        sleep 0.5
    done
) &
writer=$!

echo "== starting outbox-inbox: each event applied once to billing (log: $workdir/inbox.log; /status on $INBOX_HTTP_ADDR)"
env INBOX_PG_DSN="$billing_dsn" INBOX_KAFKA_BOOTSTRAP_SERVERS="$OUTBOX_KAFKA_BOOTSTRAP_SERVERS" INBOX_TOPICS=outbox.event.order \
    INBOX_HANDLER=book_order "${inbox_source[@]}" ./build/outbox-inbox >"$workdir/inbox.log" 2>&1 &
inbox=$!

if [ "$broker" = rabbitmq ]; then
    echo "== events arriving at the RabbitMQ exchange outbox, routing key outbox.event.order (Ctrl-C to stop):"
    ./build/outbox-tail --rabbitmq "$amqp_url" --exchange outbox --topic outbox.event.order &
else
    echo "== events consumed from Kafka topic outbox.event.order (Ctrl-C to stop):"
    ./build/outbox-tail --bootstrap "$OUTBOX_KAFKA_BOOTSTRAP_SERVERS" --topic outbox.event.order --from-beginning &
fi
tail_pid=$!

# Until Ctrl-C or DEMO_SECONDS: if the relay, outbox-inbox or outbox-tail exits meanwhile, the
# demo says which, with its last lines, and stops with status 1 (within half a second).
deadline=$(( $(date +%s) + ${DEMO_SECONDS:-0} ))
while [ -z "${DEMO_SECONDS:-}" ] || [ "$(date +%s)" -lt "$deadline" ]; do
    for p in relay inbox tail_pid; do
        kill -0 "${!p}" 2>/dev/null && continue
        wait "${!p}" 2>/dev/null && status=0 || status=$?
        case $p in
        relay) what=outbox-relay log=$workdir/relay.log relay= ;;
        inbox) what=outbox-inbox log=$workdir/inbox.log inbox= ;;
        *) what=outbox-tail log= tail_pid= ;;
        esac
        echo
        echo "== demo: $what exited (status $status) while the demo ran${log:+; its last lines ($log):}"
        [ -z "$log" ] || tail -n 5 "$log"
        finish failed 1
    done
    sleep 0.5
done
echo "== rows by status: $(psql -X -At "$OUTBOX_PG_DSN" -c "SELECT string_agg(status || '=' || n, ' ') FROM (SELECT status, count(*) n FROM outbox GROUP BY 1) s")"
finish finished
