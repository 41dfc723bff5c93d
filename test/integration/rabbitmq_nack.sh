#!/usr/bin/env bash
# A nack storm from a real RabbitMQ node: the only queue bound for the rows' routing key holds
# at most 200 messages and refuses more (x-overflow reject-publish: the broker answers
# basic.nack). With nothing consuming, the relay's deliveries are nacked over and over: the
# rows stay PENDING (none marked SENT while refused), counted as transient failures, never
# parked. Once a consumer drains the queue, every row arrives (lost 0). Per-key order is not
# asserted here: a nack of one message while a later one of its key was accepted is the
# documented exception (docs/RABBITMQ.md, Guarantees); the violations are counted and logged.
# RELAYTEST_RABBITMQ_STRICT=1 (rabbitmq_nack_strict) runs it with
# OUTBOX_RABBITMQ_STRICT_KEY_ORDER=1, where per-key order is asserted too.
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
setup_db
limited="n$TOPIC_PREFIX.limited" # its first word differs: only the limited queue is bound for it
"$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$limited" "$limited" 200 || fail "cannot declare the limited queue"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g), '$limited'
       FROM generate_series(1, 3000) g"
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1)
order=--any-order
if [ "${RELAYTEST_RABBITMQ_STRICT:-}" = 1 ]; then
    RELAY_ENV+=(OUTBOX_RABBITMQ_STRICT_KEY_ORDER=1)
    order=
fi
start_relay main >/dev/null
nacked() { grep -q "negatively confirmed by the broker (basic.nack)" "$WORK/relay-main.log"; }
wait_until 60 "the broker to nack deliveries to the full queue" nacked
sleep 3
sent=$(count_status SENT)
[ "$sent" -le 200 ] || fail "$sent rows marked SENT while the queue holds at most 200"
[ "$(count_status FAILED)" = 0 ] || fail "nacked rows were parked (OUTBOX_MAX_ATTEMPTS=1): a nack is not the row's fault"
transient=$(metric main 'outbox_publish_failures_total{reason="transient"}')
[ "$transient" -gt 0 ] || fail "no transient failure counted for the nacks"
log "queue full: $sent SENT, $(count_status PENDING) PENDING, $transient deliveries nacked so far"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox ORDER BY id" >"$WORK/all.tsv"
"$RELAYTEST_AMQP_BIN" check "$AMQP_URL" "$limited" "$WORK/all.tsv" $order --idle-ms 8000 \
    >"$WORK/limited.out" 2>"$WORK/limited.err" &
consumer=$!
wait_until 180 "every row SENT once a consumer drains the queue" all_sent
wait "$consumer" || fail "the limited queue lost rows: $(cat "$WORK/limited.out") $(head -5 "$WORK/limited.err")"
stop_relay main || fail "relay exited with $? on SIGTERM"
log "ok: $(cat "$WORK/limited.out")"
