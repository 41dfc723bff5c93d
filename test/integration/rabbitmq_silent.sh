#!/usr/bin/env bash
# A RabbitMQ node that takes messages and never confirms them (the fault proxy, raw, holds
# every frame the broker sends once the relay is publishing): the relay's sends complete, no
# basic.ack comes, and OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS (2 s) ends the wait - the
# connection is made anew and the rows stay PENDING, none marked SENT while nothing was
# confirmed. (rabbitmq_blocked covers the other way a confirm never comes: a broker that stops
# reading, where the send itself is stuck and the loop's watchdog cuts it.) Once the broker
# answers again every row is published (lost 0, per-key order, duplicates at most the rows
# written while it was silent, per timed-out connection).
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
proxied_rabbitmq
setup_db
direct=$AMQP_URL
AMQP_URL=$PROXIED_AMQP_URL # the relay through the proxy; the check reads the node directly
RELAY_ENV=(OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=2000)
start_relay silent >/dev/null
AMQP_URL=$direct
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 200) g"
wait_until 30 "the first rows SENT" rows_at_least 200 "status = 'SENT'"
proxy hold on
sent=$(count_status SENT)
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g) FROM generate_series(201, 3000) g"
# while waiting, SENT must not move: nothing was confirmed
timed_out() {
    [ "$(count_status SENT)" = "$sent" ] ||
        fail "$(($(count_status SENT) - sent)) rows marked SENT while the broker confirmed nothing"
    grep -q "rabbitmq: no publisher confirm for row [0-9]* within 2000 ms" "$WORK/relay-silent.log"
}
wait_until 20 "a confirm to time out (OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS=2000, the broker silent)" timed_out
grep -m1 "rabbitmq: no publisher confirm" "$WORK/relay-silent.log" | sed 's/^/# /'
! grep -q "a send to the broker waited that long" "$WORK/relay-silent.log" ||
    fail "a send was stuck: the watchdog cut it (the test means sends that complete and are never confirmed)"
[ "$(count_status SENT)" = "$sent" ] || fail "$(($(count_status SENT) - sent)) rows marked SENT while the broker confirmed nothing"
unconfirmed=$(metric silent outbox_inflight_rows)
log "broker silent: confirms timed out after 2 s, SENT stayed at $sent, $unconfirmed rows in flight"
proxy hold off
wait_until 120 "every row SENT once the broker answers" all_sent
stop_relay silent || fail "relay exited with $? on SIGTERM"
# each timed-out connection may have delivered every row sent on it: published again
timeouts=$(grep -c "rabbitmq: no publisher confirm for row" "$WORK/relay-silent.log")
check "$TOPIC_PREFIX.order" --max-duplicates $((timeouts * 2800)) ||
    fail "rows lost, out of order, or more duplicates than $timeouts timed-out connections x 2,800 rows"
log "ok: $(check_field duplicates) duplicates after $timeouts confirm timeouts"
