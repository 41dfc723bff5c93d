#!/usr/bin/env bash
# The RabbitMQ sink against a real node (RELAYTEST_SINK=rabbitmq), under load from
# concurrent writers:
# - while a 60,000-row backlog drains, the broker cuts every connection three times
#   (rabbitmqctl close_all_connections), then the node is stopped and started again (the
#   rows go to a classic queue and a quorum queue, both checked): every row of the bound topic is in the queue
#   (lost 0), first deliveries in per-key order, duplicates within the in-flight window per
#   cut;
# - rows whose routing key no queue is bound for come back as basic.return: their topic is
#   paused (metric, log line naming it), they stay PENDING with no attempt counted, and once a
#   queue is bound for it they are published, none lost;
# - a row larger than OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES is parked before publishing with that
#   reason, and the rest of its key waits (block policy);
# - --check-config: a good URL passes; a wrong password, a missing vhost and an exchange of
#   another type each exit 1 with the broker's reason; a URL ending in '/' (the empty vhost)
#   is refused with a message that says so and shows how to write the default vhost.
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
rmq() { bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" "$@"; }
setup_db
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 50), 'Created', jsonb_build_object('n', g, 'pad', repeat('x', 200))
       FROM generate_series(1, 60000) g" # a backlog: the cuts come while it drains
quorum=$TOPIC_PREFIX.quorum
"$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$quorum" "$TOPIC_PREFIX.order" quorum || fail "cannot declare the quorum queue"
unbound="u$TOPIC_PREFIX.payment" # its first word differs: the binding $TOPIC_PREFIX.# misses it
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       SELECT 'payment', 'pay' || (g % 5), 'Paid', jsonb_build_object('n', g), '$unbound'
       FROM generate_series(1, 50) g"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       VALUES ('order', 'p-size', 'Big', jsonb_build_object('blob', repeat('z', 200000))),
              ('order', 'p-size', 'After', '{}')"
RELAY_ENV=(OUTBOX_TOPIC_PAUSE_MS=1000 OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES=100000 OUTBOX_MAX_INFLIGHT=2000
    OUTBOX_RECONNECT_MAX_MS=1000)
start_relay main >/dev/null

writers 4 2500 50 order &
writers_pid=$!
wait_until 60 "rows flowing to the bound topic" rows_at_least 500 "aggregate_type = 'order' AND status = 'SENT'"
for cut in 1 2 3; do
    rmq ctl "$RELAYTEST_RABBITMQ_DIR" close_all_connections "test cut $cut" >/dev/null || fail "close_all_connections failed"
    sleep 1
done
[ "$(count_status PENDING)" -gt 1000 ] || fail "the backlog drained before the broker's restart: nothing tested"
cut_unconfirmed=$(grep -c "CONNECTION_FORCED - test cut [0-9]; [1-9]" "$WORK/relay-main.log" || true)
[ "$cut_unconfirmed" -ge 1 ] || fail "no cut found messages unconfirmed: the cuts came while nothing was in flight"
log "three connection cuts done; $(count_status SENT) SENT; stopping the node"
rmq stop "$RELAYTEST_RABBITMQ_DIR" || fail "stopping the RabbitMQ node failed"
sleep 2
rmq restart "$RELAYTEST_RABBITMQ_DIR" || fail "starting the RabbitMQ node again failed"
log "node back; $(count_status SENT) SENT"
wait "$writers_pid" || fail "writers failed"
order_sent() { rows_are 0 "aggregate_type = 'order' AND aggregate_id <> 'p-size' AND status <> 'SENT'"; }
wait_until 120 "every order row SENT" order_sent
grep -q "rabbitmq: .*connecting anew" "$WORK/relay-main.log" || fail "no broken connection was logged"

# the unroutable topic: paused, nothing attempted, then bound and drained
grep -q "relay: topic $unbound paused for 1000 ms: unroutable" "$WORK/relay-main.log" ||
    fail "no pause of the unroutable topic logged"
wait_until 15 "outbox_topic_paused for $unbound" exported main "^outbox_topic_paused{topic=\"$unbound\"} 1"
[ "$(count_where "aggregate_type = 'payment' AND status = 'SENT'")" = 0 ] || fail "an unroutable row was marked SENT"
[ "$(count_where "aggregate_type = 'payment' AND attempts > 0")" = 0 ] || fail "unroutable rows had attempts counted"
"$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$AMQP_QUEUE.payment" "u$TOPIC_PREFIX.#" || fail "bind failed"
wait_until 60 "the payment rows SENT once bound" rows_are 0 "aggregate_type = 'payment' AND status <> 'SENT'"

# the oversized row: parked with its reason; the row after it on its key waits
wait_until 30 "the oversized row parked" rows_are 1 "aggregate_id = 'p-size' AND status = 'FAILED'"
psqlc "SELECT last_error FROM outbox_all WHERE aggregate_id = 'p-size' AND status = 'FAILED'" |
    grep -q "OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES" || fail "oversized row parked without a clear reason"
[ "$(count_where "aggregate_id = 'p-size' AND event_type = 'After' AND status = 'PENDING'")" = 1 ] ||
    fail "the row after the parked one on its key did not wait"
stop_relay main || fail "relay exited with $? on SIGTERM"

CHECK_WHERE="aggregate_type = 'order' AND aggregate_id <> 'p-size'" check "$TOPIC_PREFIX.order" ||
    fail "loss or disorder through connection cuts and a broker restart"
dups=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
cp "$WORK/expected.tsv" "$WORK/order.tsv"
"$RELAYTEST_AMQP_BIN" check "$AMQP_URL" "$quorum" "$WORK/order.tsv" >"$WORK/quorum.out" 2>&1 ||
    fail "the quorum queue lost rows or their order: $(cat "$WORK/quorum.out")"
log "quorum queue: $(grep CHECK "$WORK/quorum.out")"
# each cut (3), the stop and the restart may republish at most the in-flight window
[ "$dups" -le $((5 * 2000)) ] || fail "$dups duplicates: more than 5 breaks x OUTBOX_MAX_INFLIGHT"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox_all WHERE aggregate_type = 'payment' ORDER BY id" \
    >"$WORK/payment.tsv"
"$RELAYTEST_AMQP_BIN" check "$AMQP_URL" "$AMQP_QUEUE.payment" "$WORK/payment.tsv" --exact ||
    fail "the payment queue does not hold each payment row once"

# --check-config
relay_env
conf() { env "${RELAY_BASE_ENV[@]}" "$@" "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/conf.log" 2>&1; }
conf || fail "--check-config with a good URL exited $?: $(cat "$WORK/conf.log")"
port=$RELAYTEST_RABBITMQ_PORT
expect_refused() { # what grep-pattern env...
    local what=$1 pattern=$2 rc=0
    shift 2
    conf "$@" || rc=$?
    [ "$rc" = 1 ] && grep -q "$pattern" "$WORK/conf.log" ||
        fail "--check-config with $what exited $rc: $(cat "$WORK/conf.log")"
    log "--check-config, $what: $(grep -o 'rabbitmq: .*' "$WORK/conf.log" | head -1)"
}
expect_refused "a wrong password" "ACCESS_REFUSED" OUTBOX_RABBITMQ_URL="amqp://guest:wrong@127.0.0.1:$port"
expect_refused "a missing vhost" "vhost" OUTBOX_RABBITMQ_URL="amqp://guest:guest@127.0.0.1:$port/nosuch"
expect_refused "the empty vhost (a URL ending in /)" "the URL ends in '/', which names the empty vhost ''; for the default vhost '/' leave the path out" \
    OUTBOX_RABBITMQ_URL="amqp://guest:guest@127.0.0.1:$port/"
"$RELAYTEST_AMQP_BIN" declare "$AMQP_URL" "$TOPIC_PREFIX.direct" direct || fail "declare failed"
expect_refused "an exchange of another type" "exists with another type" OUTBOX_RABBITMQ_EXCHANGE="$TOPIC_PREFIX.direct"
log "ok: $dups duplicates"
