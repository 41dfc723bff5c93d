#!/usr/bin/env bash
# outbox-inbox from RabbitMQ (INBOX_SOURCE=rabbitmq): writers -> outbox -> relay (RabbitMQ
# sink) -> a durable queue -> outbox-inbox -> the business table of setup_inbox_db.
# 2,000 events of 40 keys plus 3 of key 'poison' (its handler always fails); the inbox is
# SIGKILLed by the test-only fault point between a commit and the acknowledgements, then
# restarted: RabbitMQ delivers the unacknowledged messages again, every event is applied
# exactly once and in key order, the redelivered ones are counted as duplicates; the poison
# events go to the dead-letter queue after INBOX_MAX_ATTEMPTS, with the error in a header
# (published with a confirm), and are recorded FAILED; `outbox-relay replay --key` through
# RabbitMQ raises the duplicate count by exactly the key's rows; SIGTERM exits 0; --check-config
# reaches the queue and names a missing one.
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
setup_db
setup_inbox_db
dlq="$TOPIC_PREFIX.dlq"
"$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$dlq" "none.$TOPIC_PREFIX" || fail "cannot declare the dead-letter queue"

psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', CASE WHEN g IN (500, 1000, 1500) THEN 'poison' ELSE 'k' || (g % 40) END, 'Placed',
              jsonb_build_object('n', g) FROM generate_series(1, 2003) g"
start_relay main >/dev/null
start_inbox crash INBOX_TESTHOOK_KILL_AFTER_COMMIT=700 INBOX_DEAD_LETTER_TOPIC="$dlq" INBOX_MAX_ATTEMPTS=3
wait_until 120 "the fault point to stop outbox-inbox" eval '! kill -0 "$(relay_pid crash)" 2>/dev/null'
rc=0
wait "$(relay_pid crash)" || rc=$?
[ "$rc" = 137 ] || fail "the fault point should SIGKILL outbox-inbox (137), got $rc"
grep -q "test hook: SIGKILL after a commit ([0-9]* messages committed), before storing the offsets" "$WORK/inbox-crash.log" ||
    fail "the fault point did not fire"
applied0=$(cpsql "SELECT count(*) FROM applied")
log "outbox-inbox SIGKILLed after the commit that reached 700 messages, before acknowledging them: $applied0 applied"
start_inbox main INBOX_DEAD_LETTER_TOPIC="$dlq" INBOX_MAX_ATTEMPTS=3
wait_until 120 "2,000 events applied and 3 dead-lettered" \
    eval '[ "$(cpsql "SELECT count(*) FROM applied")" = 2000 ] && [ "$(cpsql "SELECT count(*) FROM inbox WHERE status = '"'FAILED'"'")" = 3 ]'
[ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] || fail "an event was applied twice: $(cpsql "SELECT * FROM applied WHERE times > 1 LIMIT 5")"
[ "$(cpsql "SELECT sum(violations) FROM key_order")" = 0 ] || fail "a key was applied out of order"
missing=$("$PG_BIN/psql" -X -At "$DSN" -c "SELECT event_id FROM outbox WHERE aggregate_id <> 'poison'" | sort >"$WORK/want"
          cpsql "SELECT event_id FROM applied" | sort | comm -23 "$WORK/want" - | wc -l)
[ "$missing" = 0 ] || fail "$missing committed events were never applied"
wait_until 20 "the restarted inbox to count the other $((2000 - applied0)) applied" \
    metric_is main 'inbox_messages_total{result="applied"}' $((2000 - applied0))
dups=$(metric main 'inbox_messages_total{result="duplicate"}')
[ "$dups" -gt 0 ] || fail "no duplicates counted after the crash (redelivered messages must be idempotency hits)"
# (each batch is acknowledged right after its commit, so a poison event the crashed inbox
# dead-lettered in an earlier batch is not delivered again: the two inboxes' counts add up to
# 3 — Kafka's inbox test sees 3 in the restarted one, whose offsets were committed only every
# 5 s)
before_crash=$(grep -c "dead-lettered after 3 attempts" "$WORK/inbox-crash.log" || true)
after_crash=$(metric main 'inbox_messages_total{result="dead_lettered"}')
[ $((before_crash + after_crash)) -ge 3 ] ||
    fail "dead-lettered: $before_crash before the crash, $after_crash after it; want 3 or more in all"
exported main "inbox_consumer_lag{topic=\"$AMQP_QUEUE\"" || fail "no lag (queue depth) exported for the queue"
log "2,000 events applied once each, in key order; $dups redelivered messages counted as duplicates"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox WHERE aggregate_id = 'poison' ORDER BY id" \
    >"$WORK/poison.tsv"
"$RELAYTEST_AMQP_BIN" check "$AMQP_URL" "$dlq" "$WORK/poison.tsv" >"$WORK/dlq.out" 2>&1 ||
    fail "the dead-letter queue does not hold the 3 poison events: $(cat "$WORK/dlq.out")"
[ "$(cpsql "SELECT count(*) FROM inbox WHERE status = 'FAILED' AND attempts = 3 AND last_error LIKE '%cannot apply Placed of poison%'")" = 3 ] ||
    fail "the FAILED inbox rows do not record the attempts and the error"
log "3 poison events dead-lettered to queue $dlq after 3 attempts each: $(cat "$WORK/dlq.out")"

# the replay drill through RabbitMQ: a key's replay raises the duplicate count by exactly its rows
n7=$(count_where "aggregate_id = 'k7'")
before=$(metric main 'inbox_messages_total{result="duplicate"}')
relay_env
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key k7 >/dev/null 2>>"$WORK/replay.log" || fail "replay --key k7: $(cat "$WORK/replay.log")"
wait_until 30 "$n7 more duplicates after replay --key k7" metric_is main 'inbox_messages_total{result="duplicate"}' $((before + n7))
[ "$(cpsql "SELECT count(*) FROM applied")" = 2000 ] && [ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] ||
    fail "the replay of k7 changed effects"
log "replay --key k7 through RabbitMQ: exactly $n7 more duplicates, no effect"
stop_relay main || fail "outbox-inbox exited $? on SIGTERM"
grep -q "inbox stopped: " "$WORK/inbox-main.log" || fail "no stop line"
conf() { env INBOX_PG_DSN="$CDSN" INBOX_HANDLER=apply_event INBOX_SOURCE=rabbitmq INBOX_RABBITMQ_URL="$AMQP_URL" \
    INBOX_RABBITMQ_QUEUES="$1" "$RELAYTEST_INBOX_BIN" --check-config 2>&1; }
msg=$(conf "$AMQP_QUEUE") && grep -q "check-config: rabbitmq reachable" <<<"$msg" || fail "--check-config with the queue in place: $msg"
rc=0
msg=$(conf "$TOPIC_PREFIX.nosuch") || rc=$?
[ "$rc" = 1 ] && grep -q "queue '$TOPIC_PREFIX.nosuch'.*NOT_FOUND" <<<"$msg" || fail "--check-config, missing queue: exit $rc: $msg"
log "ok"
