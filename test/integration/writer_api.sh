#!/usr/bin/env bash
# The writers' function outbox_enqueue, called by the least-privilege writer role (INSERT on
# the table, EXECUTE on the function, nothing else): an event per call, in the caller's
# transaction; event_id as the idempotency key (a retried business transaction gets the
# same row back, a rolled-back one leaves nothing, a concurrent duplicate waits and gets the
# winner's row, a REPEATABLE READ one that cannot see the winner fails with 40001, to be
# retried like any serialization failure); and W3C
# trace context carried end to end: writer -> the Kafka message's headers -> the handler
# outbox-inbox calls.
. "$(dirname "$0")/lib.sh"
setup_db
W="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=it_writer dbname=$DB"
wpsql() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$W" "$@"; }
psqlc "CREATE TABLE orders (id text PRIMARY KEY, total int); GRANT INSERT ON orders TO it_writer"
[ "$(psqlc "SELECT has_table_privilege('it_writer', 'outbox', 'SELECT')")" = f ] || fail "the writer role can read the outbox"

# one business transaction: the order and its event, enqueued by the function
id1=$(wpsql -c "BEGIN" -c "INSERT INTO orders VALUES ('o-1', 10)" \
    -c "SELECT outbox_enqueue('order', 'o-1', 'OrderPlaced', '{\"total\": 10}', event_id => 'a0000000-0000-4000-8000-000000000001')" \
    -c "COMMIT") || fail "the writer role cannot call outbox_enqueue"
# the same business transaction retried (say its commit's answer was lost): same row
id1b=$(wpsql -c "SELECT outbox_enqueue('order', 'o-1', 'OrderPlaced', '{\"total\": 10}', event_id => 'a0000000-0000-4000-8000-000000000001')")
[ -n "$id1" ] && [ "$id1" = "$id1b" ] || fail "a retried enqueue returned $id1b, the first $id1"
[ "$(count_where "event_id = 'a0000000-0000-4000-8000-000000000001'")" = 1 ] || fail "the retried event was enqueued twice"
# a rolled-back attempt leaves nothing; its retry enqueues
wpsql -c "BEGIN" -c "SELECT outbox_enqueue('order', 'o-2', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000002')" \
    -c "ROLLBACK" >/dev/null
[ "$(count_where "event_id = 'a0000000-0000-4000-8000-000000000002'")" = 0 ] || fail "a rolled-back enqueue left a row"
id2=$(wpsql -c "SELECT outbox_enqueue('order', 'o-2', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000002')")
[ "$(count_where "event_id = 'a0000000-0000-4000-8000-000000000002'")" = 1 ] || fail "the retry after a rollback did not enqueue"
log "enqueue by the writer role: ids $id1 (retried: $id1b), $id2 after a rollback"

# a concurrent duplicate waits for the first transaction and gets its row
(wpsql -c "BEGIN" -c "SELECT outbox_enqueue('order', 'o-3', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000003')" \
    -c "SELECT pg_sleep(1.5)" -c "COMMIT" >"$WORK/first.out") &
first=$!
sleep 0.5
second=$(wpsql -c "SELECT outbox_enqueue('order', 'o-3', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000003')")
wait "$first" || fail "the first of two concurrent enqueues failed"
[ "$second" = "$(head -1 "$WORK/first.out")" ] || fail "concurrent duplicate got id $second, the first $(cat "$WORK/first.out")"
[ "$(count_where "event_id = 'a0000000-0000-4000-8000-000000000003'")" = 1 ] || fail "a concurrent duplicate was enqueued twice"
# under REPEATABLE READ a snapshot that cannot see the winner gets a serialization failure
(wpsql -c "BEGIN" -c "SELECT outbox_enqueue('order', 'o-4', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000004')" \
    -c "SELECT pg_sleep(1.5)" -c "COMMIT" >/dev/null) &
first=$!
rc=0
"$PG_BIN/psql" -X -q -At "$W" -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" \
    -c "SELECT pg_sleep(0.5)" \
    -c "SELECT outbox_enqueue('order', 'o-4', 'OrderPlaced', '{}', event_id => 'a0000000-0000-4000-8000-000000000004')" \
    -c "COMMIT" >/dev/null 2>"$WORK/rr.err" || rc=$?
wait "$first"
[ "$rc" != 0 ] && grep -q "ERROR:  40001" "$WORK/rr.err" ||
    fail "REPEATABLE READ duplicate: exit $rc, $(cat "$WORK/rr.err")"
log "concurrent duplicate: waited and got id $second; under REPEATABLE READ: $(head -1 "$WORK/rr.err" | cut -c1-90)"

# trace context, end to end
tp=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
ts=vendor=opaque-value
wpsql -c "SELECT outbox_enqueue('order', 'o-5', 'OrderPlaced', '{\"total\": 50}', traceparent => '$tp', tracestate => '$ts')" >/dev/null
# (and a writer that inserts the headers itself)
wpsql -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
          VALUES ('order', 'o-6', 'OrderPlaced', '{\"total\": 60}', '{\"traceparent\": \"$tp\"}')"
start_relay main >/dev/null
wait_until 60 "all rows SENT" all_sent
check "$TOPIC_PREFIX.order" --exact || fail "Kafka content does not match the table"
setup_inbox_db
cpsql "CREATE TABLE traced (key text PRIMARY KEY, traceparent text, tracestate text);
       CREATE FUNCTION keep_trace(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
       RETURNS void LANGUAGE sql AS 'INSERT INTO traced VALUES (key, headers->>''traceparent'', headers->>''tracestate'')'"
start_inbox consumer INBOX_HANDLER=keep_trace
traced() { [ "$(cpsql "SELECT count(*) FROM traced")" = 6 ]; }
wait_until 60 "outbox-inbox to apply the 6 events" traced
[ "$(cpsql "SELECT traceparent || ' ' || tracestate FROM traced WHERE key = 'o-5'")" = "$tp $ts" ] ||
    fail "trace context at the handler: $(cpsql "SELECT * FROM traced WHERE key = 'o-5'")"
[ "$(cpsql "SELECT traceparent FROM traced WHERE key = 'o-6'")" = "$tp" ] || fail "a writer's own traceparent header was lost"
[ "$(cpsql "SELECT count(*) FROM traced WHERE traceparent IS NULL")" = 4 ] || fail "events without trace context got one"
stop_relay main || fail "relay exited with $? on SIGTERM"
log "ok: trace context from the writer reached the handler unchanged ($tp, $ts)"
