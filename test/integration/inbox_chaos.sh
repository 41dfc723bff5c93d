#!/usr/bin/env bash
# Effectively-once end to end under failures: writers -> outbox -> relay -> Kafka -> two
# outbox-inbox processes in one group -> a table counting applications per event.
# During the writers: a second inbox joins (rebalance); the first is SIGKILLed by the
# fault point between a commit and its offset store, and restarted; the relay is
# SIGKILLed and restarted (it republishes what it had not marked); the second inbox is
# stopped with SIGTERM (a graceful rebalance) and started again. Then: every committed
# event applied exactly once, none missing, each key applied in its writers' order, and
# duplicates really delivered and counted as idempotency hits, and no more of them than the
# relay's own duplicates (counted in Kafka, or in a second queue bound to the exchange) plus
# the messages inbox a committed before its SIGKILL (600 or a batch more): re-reading a partition from an old
# offset (no offset committed at a rebalance or a stop) would be hidden by the dedupe.
. "$(dirname "$0")/lib.sh"
setup_db
setup_inbox_db
if [ "$SINK" = rabbitmq ]; then # the inboxes consume AMQP_QUEUE: the relay's duplicates are counted in a copy
    copy_queue=$TOPIC_PREFIX.copy
    "$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$copy_queue" "$TOPIC_PREFIX.#" ||
        fail "cannot bind the copy queue"
fi
psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 50) g"
cat >"$WORK/writer.sql" <<'SQL'
\set k random(1, 50)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k RETURNING version AS v \gset
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('order', 'k' || :k, 'Updated', jsonb_build_object('n', :v, 'pad', repeat('x', 200)));
COMMIT;
SQL
start_relay r1 >/dev/null
start_inbox a INBOX_TESTHOOK_KILL_AFTER_COMMIT=600
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "$WRITER_USER" -c 6 -j 2 -t 600 -R 400 \
    -f "$WORK/writer.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
writers=$!
sleep 1.5
start_inbox b
log "inbox b joined the group"
wait_until 60 "the fault point to stop inbox a" eval '! kill -0 "$(relay_pid a)" 2>/dev/null'
rc=0
wait "$(relay_pid a)" || rc=$?
[ "$rc" = 137 ] && grep -q "test hook: SIGKILL after a commit ([0-9]* messages committed)" "$WORK/inbox-a.log" ||
    fail "inbox a: exit $rc, the fault point did not fire"
log "inbox a SIGKILLed between a commit (600 messages reached) and the offset store; restarted"
start_inbox a2
kill_relay r1
log "relay SIGKILLed; restarted"
start_relay r2 >/dev/null
sleep 2
dups_b1=0
wait_until 20 "inbox b to export its counters" exported b 'inbox_messages_total{result="duplicate"}'
dups_b1=$(metric b 'inbox_messages_total{result="duplicate"}') || fail "cannot read inbox b's duplicates"
stop_relay b || fail "inbox b exited $? on SIGTERM"
log "inbox b stopped with SIGTERM ($dups_b1 duplicates counted); started again"
start_inbox b2
wait "$writers" || { cat "$WORK/pgbench.log"; fail "writers failed"; }
committed=$(psqlc "SELECT count(*) FROM outbox_all")
[ "$committed" = 3600 ] || fail "writers committed $committed of 3,600 rows"
wait_until 180 "all $committed events applied" eval '[ "$(cpsql "SELECT count(*) FROM applied")" = "$committed" ]'
sleep 3 # anything still in flight would show as a second application
[ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] ||
    fail "events applied more than once: $(cpsql "SELECT event_id, times FROM applied WHERE times > 1 LIMIT 5")"
"$PG_BIN/psql" -X -At "$DSN" -c "SELECT event_id FROM outbox" | sort >"$WORK/want"
missing=$(cpsql "SELECT event_id FROM applied" | sort | comm -23 "$WORK/want" - | wc -l)
[ "$missing" = 0 ] || fail "$missing committed events never applied"
[ "$(cpsql "SELECT sum(violations) FROM key_order")" = 0 ] || fail "a key was applied out of its writers' order"
[ "$(cpsql "SELECT count(*) FROM key_order k WHERE last_n <> (SELECT count(*) FROM applied a WHERE a.key = k.key)")" = 0 ] ||
    fail "a key's last applied event is not its last written one"
# each figure read on its own: inside $(( )) a failed scrape's empty output reads as a unary +
dups_a2=$(metric a2 'inbox_messages_total{result="duplicate"}') || fail "cannot read inbox a2's duplicates"
dups_b2=$(metric b2 'inbox_messages_total{result="duplicate"}') || fail "cannot read inbox b2's duplicates"
dups=$((dups_b1 + dups_a2 + dups_b2))
[ "$dups" -gt 0 ] || fail "no duplicate was delivered and counted (the crashes must cause redeliveries)"
if [ "$SINK" = rabbitmq ]; then
    AMQP_QUEUE=$copy_queue check "$TOPIC_PREFIX.order" --max-duplicates 1000000 >/dev/null ||
        fail "the copy queue lacks events or holds them out of order: $(cat "$WORK/check.out")"
else
    check "$TOPIC_PREFIX.order" --max-duplicates 1000000 >/dev/null ||
        fail "Kafka lacks events or holds them out of order: $(cat "$WORK/check.out")"
fi
relay_dups=$(check_field duplicates)
[ -n "$relay_dups" ] || fail "no duplicates figure in the check: $(cat "$WORK/check.out")"
a_committed=$(sed -n 's/.*SIGKILL after a commit (\([0-9]*\) messages committed).*/\1/p' "$WORK/inbox-a.log" | head -1)
[ -n "$a_committed" ] || fail "inbox a's fault point does not say how many messages it committed"
[ "$dups" -le $((relay_dups + a_committed)) ] ||
    fail "$dups redeliveries counted: more than the relay's $relay_dups duplicates plus the $a_committed messages inbox a committed before its SIGKILL (partitions read again from old offsets)"
log "redeliveries: $dups counted, the relay published $relay_dups twice, inbox a committed $a_committed (bound $((relay_dups + a_committed)))"
log "$committed events applied exactly once, in key order; $dups redelivered messages counted as idempotency hits"
stop_relay a2 || fail "inbox a2 exited $? on SIGTERM"
stop_relay b2 || fail "inbox b2 exited $? on SIGTERM"
stop_relay r2 || fail "relay exited $? on SIGTERM"
log "ok"
