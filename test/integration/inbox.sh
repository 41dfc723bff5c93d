#!/usr/bin/env bash
# outbox-inbox, the consumer half: writers -> outbox -> relay -> Kafka -> outbox-inbox ->
# a business table that counts applications per event (setup_inbox_db in lib.sh).
#  1. start-up (and --check-config) refuses a missing table and a handler without the
#     inbox signature;
#  2. 2,000 events of 40 keys plus 3 of key 'poison' (its handler always fails); the inbox
#     is SIGKILLed by a test-only fault point between a commit and the offset store (its
#     batches: several messages per transaction), then
#     restarted: every event applied exactly once, per-key order intact, the redelivered
#     ones counted as duplicates; the poison events dead-lettered after
#     INBOX_MAX_ATTEMPTS with the error in a header, recorded FAILED, the other keys flowed;
#  3. the replay drill through the inbox: a key's replay raises the duplicate count by
#     exactly its rows and applies nothing;
#  4. a business key (INBOX_DEDUPE_KEY): one document sent under two event ids is applied
#     once (this inbox subscribes by ^regex);
#  5. SIGTERM: exit 0, offsets committed (a restart applies and skips nothing more);
#  6. retention deletes old inbox rows.
. "$(dirname "$0")/lib.sh"
setup_db
setup_inbox_db
topic="$TOPIC_PREFIX.order"
dlq="$TOPIC_PREFIX.dlq"

# 1. Start-up errors, exit 1 with what to do.
refused() { # WANT ENV...: outbox-inbox with ENV exits 1 saying WANT
    local want=$1 rc=0 msg
    shift
    msg=$(env INBOX_PG_DSN="$CDSN" INBOX_TOPICS="$topic" INBOX_HANDLER=apply_event INBOX_HTTP_ADDR= \
        INBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" "$@" timeout 30 "$RELAYTEST_INBOX_BIN" 2>&1) || rc=$?
    [ "$rc" = 1 ] && grep -qF -- "$want" <<<"$msg" || fail "outbox-inbox with $*: exit $rc: $msg"
}
refused "no function nope(event_id uuid, event_type text, key text, payload jsonb, headers jsonb) is visible" \
    INBOX_HANDLER=nope
cpsql "CREATE FUNCTION wrong_sig(event_id text) RETURNS void LANGUAGE sql AS 'SELECT'"
refused "found only: wrong_sig(text)" INBOX_HANDLER=wrong_sig
refused "the inbox table public.missing does not exist: run \`outbox-inbox migrate\`" INBOX_TABLE=missing
msg=$(env INBOX_PG_DSN="$CDSN" INBOX_TOPICS="$topic" INBOX_HANDLER=apply_event INBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" \
    "$RELAYTEST_INBOX_BIN" --check-config 2>&1) && grep -q "check-config: kafka reachable" <<<"$msg" ||
    fail "--check-config with everything in place: $msg"
rc=0
msg=$(env INBOX_PG_DSN="$CDSN" INBOX_TOPICS="$topic" INBOX_HANDLER=nope INBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" \
    "$RELAYTEST_INBOX_BIN" --check-config 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "check-config: INBOX_HANDLER: no function nope" <<<"$msg" || fail "--check-config, no handler: exit $rc: $msg"
log "start-up refuses a missing handler, a wrong signature and a missing table; --check-config says so too"

# 2. Flow with a crash between commit and offset store, and a poison key.
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
log "outbox-inbox SIGKILLed after the commit that reached 700 messages, before storing the offsets: $applied0 applied"
start_inbox main INBOX_DEAD_LETTER_TOPIC="$dlq" INBOX_MAX_ATTEMPTS=3
wait_until 120 "2,000 events applied and 3 dead-lettered" \
    eval '[ "$(cpsql "SELECT count(*) FROM applied")" = 2000 ] && [ "$(cpsql "SELECT count(*) FROM inbox WHERE status = '"'FAILED'"'")" = 3 ]'
[ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] || fail "an event was applied twice: $(cpsql "SELECT * FROM applied WHERE times > 1 LIMIT 5")"
[ "$(cpsql "SELECT sum(violations) FROM key_order")" = 0 ] || fail "a key was applied out of order"
[ "$(cpsql "SELECT count(*) FROM applied a WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.event_id = a.event_id::text AND i.status = 'APPLIED')")" = 0 ] ||
    fail "an applied event has no inbox row"
missing=$("$PG_BIN/psql" -X -At "$DSN" -c "SELECT event_id FROM outbox WHERE aggregate_id <> 'poison'" | sort >"$WORK/want"
          cpsql "SELECT event_id FROM applied" | sort | comm -23 "$WORK/want" - | wc -l)
[ "$missing" = 0 ] || fail "$missing committed events were never applied"
wait_until 20 "the restarted inbox to count the other $((2000 - applied0)) applied" \
    metric_is main 'inbox_messages_total{result="applied"}' $((2000 - applied0))
dups=$(metric main 'inbox_messages_total{result="duplicate"}')
[ "$dups" -gt 0 ] || fail "no duplicates counted after the crash (redelivered messages must be idempotency hits)"
[ "$(metric main 'inbox_messages_total{result="dead_lettered"}')" = 3 ] || fail "dead-lettered count: $(metric main 'inbox_messages_total{result="dead_lettered"}')"
[ "$(metric main inbox_handler_failures_total)" = 9 ] || fail "handler failures: $(metric main inbox_handler_failures_total), want 3 × 3"
exported main 'inbox_completion_seconds_count [1-9]' || fail "no completion times"
INBOX_HTTP_ADDR=127.0.0.1:$(http_port main) "$RELAYTEST_INBOX_BIN" healthcheck >"$WORK/hc.log" 2>&1 ||
    fail "outbox-inbox healthcheck failed against a running consumer: $(cat "$WORK/hc.log")"
log "2,000 events applied once each, in key order; $dups redelivered messages counted as duplicates"
# the dead letters: the poison events, with the error
# (at least once: a poison message dead-lettered by the crashed inbox before its offset was
# committed is delivered again, fails again and is dead-lettered again)
CHECK_WHERE="aggregate_id = 'poison'" check "$dlq" --no-partition-check >/dev/null ||
    fail "the dead-letter topic does not hold the 3 poison events: $(cat "$WORK/check.out")"
timeout 10 "$(dirname "$RELAYTEST_RELAY_BIN")/outbox-tail" --bootstrap "$BOOTSTRAP" --topic "$dlq" --from-beginning >"$WORK/dlq.txt" 2>/dev/null || true
[ "$(grep -c "inbox_error=cannot apply Placed of poison (SQLSTATE P0001) inbox_source=$topic inbox_source_offset=[0-9]*/[0-9]* inbox_attempts=3" "$WORK/dlq.txt")" = "$(wc -l <"$WORK/dlq.txt")" ] &&
    [ "$(wc -l <"$WORK/dlq.txt")" -ge 3 ] ||
    fail "the dead letters do not carry the handler's error: $(head -3 "$WORK/dlq.txt")"
[ "$(cpsql "SELECT count(*) FROM inbox WHERE status = 'FAILED' AND attempts = 3 AND last_error LIKE '%cannot apply Placed of poison%'")" = 3 ] ||
    fail "the FAILED inbox rows do not record the attempts and the error"
log "3 poison events dead-lettered after 3 attempts each, with their error; the other keys flowed"

# 3. Replay drill through the inbox.
if ! delete_mode_refuses "replay" env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key k7; then
    n7=$(count_where "aggregate_id = 'k7'")
    before=$(metric main 'inbox_messages_total{result="duplicate"}')
    env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key k7 >/dev/null 2>>"$WORK/replay.log" || fail "replay --key k7"
    wait_until 30 "$n7 more duplicates" metric_is main 'inbox_messages_total{result="duplicate"}' $((before + n7))
    sleep 1
    [ "$(metric main 'inbox_messages_total{result="duplicate"}')" = $((before + n7)) ] &&
        [ "$(cpsql "SELECT count(*) FROM applied")" = 2000 ] && [ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] ||
        fail "the replay of k7 ($n7 rows) changed effects or counted $(( $(metric main 'inbox_messages_total{result="duplicate"}') - before )) duplicates"
    log "replay --key k7: exactly $n7 more duplicates, no effect"
fi

# 5. SIGTERM: exit 0; the offsets are committed, so a new inbox in the group has nothing to do.
stop_relay main || fail "outbox-inbox exited $? on SIGTERM"
grep -q "inbox stopped: " "$WORK/inbox-main.log" || fail "no stop line"
# (the relay still runs: a new event after the restart shows the new inbox really consumes -
# it applies that one event and re-reads nothing before it)
start_inbox again
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'k1', 'Placed', '{\"n\": 9001}')"
wait_until 60 "the restarted inbox to apply the one new event" \
    metric_is again 'inbox_messages_total{result="applied"}' 1
sleep 1
[ "$(metric again 'inbox_messages_total{result="duplicate"}')" = 0 ] && [ "$(metric again 'inbox_messages_total{result="applied"}')" = 1 ] &&
    [ "$(cpsql "SELECT count(*) FROM applied")" = 2001 ] && [ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] ||
    fail "after a clean stop the group re-read messages: $(curl -s "http://127.0.0.1:$(http_port again)/status")"
stop_relay again || fail "outbox-inbox exited $? on SIGTERM"
log "SIGTERM: exit 0, offsets committed (a restart applies the one new event and re-reads nothing)"

# 4. Business key: the same document under two event ids.
cpsql "CREATE TABLE docs (source text, number int, times int NOT NULL DEFAULT 1, PRIMARY KEY (source, number));
       CREATE FUNCTION apply_doc(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
       RETURNS void LANGUAGE sql AS \$\$
           INSERT INTO docs VALUES (headers->>'source', (payload#>>'{doc,number}')::int)
           ON CONFLICT (source, number) DO UPDATE SET times = docs.times + 1 \$\$"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
       ('doc', 'inv-42', 'InvoiceIssued', '{\"doc\": {\"number\": 42}}', '{\"source\": \"ERP\"}'),
       ('doc', 'inv-42', 'InvoiceIssued', '{\"doc\": {\"number\": 42}}', '{\"source\": \"ERP\"}'),
       ('doc', 'inv-43', 'InvoiceIssued', '{\"doc\": {\"number\": 43}}', '{\"source\": \"ERP\"}')"
INBOX_TOPICS_TEST="^${TOPIC_PREFIX//./\\.}\\.do[c]$" start_inbox docs INBOX_HANDLER=apply_doc INBOX_NAME=docs \
    INBOX_DEDUPE_KEY=header:source,payload:/doc/number INBOX_KAFKA_GROUP_ID="$TOPIC_PREFIX.docs"
docs_handled() {
    local n
    n=$(metric_sum docs 'inbox_messages_total{result="applied"}' 'inbox_messages_total{result="duplicate"}') && [ "$n" = 3 ]
}
wait_until 60 "3 document messages handled" docs_handled
[ "$(cpsql "SELECT string_agg(number || ':' || times, ',' ORDER BY number) FROM docs")" = "42:1,43:1" ] ||
    fail "business-key dedupe: $(cpsql "SELECT * FROM docs")"
[ "$(cpsql "SELECT dedupe_key FROM inbox WHERE handler = 'docs' ORDER BY 1 LIMIT 1")" = '["ERP",42]' ] ||
    fail "the business key is not the inbox row's key: $(cpsql "SELECT dedupe_key FROM inbox WHERE handler = 'docs'")"
log "one document under two event ids applied once (key [\"ERP\",42]), the next one applied"
stop_relay docs || fail "outbox-inbox exited $? on SIGTERM"

# 6. Retention: rows applied more than INBOX_RETENTION ago are deleted (the first pass runs
# 5 s after start).
rows=$(cpsql "SELECT count(*) FROM inbox")
sleep 1
start_inbox ret INBOX_RETENTION=1s
wait_until 30 "the inbox rows deleted by retention" eval '[ "$(cpsql "SELECT count(*) FROM inbox")" = 0 ]'
wait_until 10 "the deletions counted" metric_is ret inbox_retention_deleted_total "$rows"
stop_relay ret || fail "outbox-inbox exited $? on SIGTERM"
log "INBOX_RETENTION=1s: all $rows inbox rows deleted and counted"
log "ok"
