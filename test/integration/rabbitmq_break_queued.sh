#!/usr/bin/env bash
# A connection to RabbitMQ that breaks while the sink has messages written but unconfirmed
# *and* messages queued behind them, not yet written: the network stops moving (the fault
# proxy stops reading what the relay sends, so its socket fills and the sink's sends wait
# while the relay queues more), then every connection is reset. What the kernels held on
# the way is lost: those messages never reach the broker. The queued ones must fail with
# them and be published again after them: sent on the new connection, a key's later rows
# would reach the queue before its earlier ones, lost with the old connection
# (docs/RABBITMQ.md, per-key order). Asserted from the queue: every row, first deliveries
# in key order; and the premise, from the relay's line at the break: messages were both
# unconfirmed and queued.
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
proxied_rabbitmq
setup_db
AMQP_URL_DIRECT=$AMQP_URL
AMQP_URL=$PROXIED_AMQP_URL
RELAY_ENV=(OUTBOX_MAX_INFLIGHT=20000 OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=60000)
start_relay main >/dev/null
AMQP_URL=$AMQP_URL_DIRECT
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 40), 'Created', '{}' FROM generate_series(1, 200) g"
wait_until 30 "the first rows published" all_sent
proxy pause on
# 2 KB rows, 40 keys: a few thousand fill the sockets' buffers, the rest queue in the sink
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (g % 40), 'Created', jsonb_build_object('n', g, 'pad', repeat('q', 2000))
       FROM generate_series(1, 20000) g"
inflight_at_least() { local n; n=$(metric main outbox_inflight_rows) && [ "$n" -ge "$1" ]; }
wait_until 30 "10,000 rows in flight behind the stopped network" inflight_at_least 10000
sleep 2
sent_before=$(count_status SENT)
proxy cut
proxy pause off
wait_until 30 "the break seen by the relay" grep -q "unconfirmed messages\? and every one not yet sent ([0-9]* queued)" "$WORK/relay-main.log"
line=$(grep -m1 "unconfirmed messages\? and every one not yet sent ([0-9]* queued)" "$WORK/relay-main.log")
unconfirmed=$(sed -n 's/.*; \([0-9]*\) unconfirmed message.*/\1/p' <<<"$line")
queued=$(sed -n 's/.*not yet sent (\([0-9]*\) queued).*/\1/p' <<<"$line")
log "at the break: $unconfirmed unconfirmed, $queued queued (not yet sent); $sent_before rows SENT before it"
[ "${unconfirmed:-0}" -gt 0 ] && [ "${queued:-0}" -gt 0 ] ||
    fail "the premise did not hold: the break must find messages both unconfirmed and queued ($line)"
[ "$sent_before" = 200 ] || fail "$sent_before rows SENT while the network stood still (want the first 200)"
wait_until 120 "every row SENT after the break" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --max-duplicates 20000 ||
    fail "loss, or a key's rows reaching the queue out of order after the break"
log "after the break: $(check_field unique) rows, $(check_field duplicates) duplicates, $(check_field order_violations) order violations"
log "ok"
