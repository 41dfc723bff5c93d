#!/usr/bin/env bash
# Operating the Debezium layout. Wrong settings stop the relay naming what to set: the
# native layout on a Debezium table (relay and migrate), the Debezium layout on a native
# table, an OUTBOX_ADDITIONAL_PLACEMENT column the table lacks, a table without Debezium's
# columns. migrate is safe to run again, also over an index whose build failed half-way, and
# five at once over a step that builds an index CONCURRENTLY. Poison: a row whose aggregatetype makes an invalid
# topic is parked with its reason while other keys flow, the later rows of its key wait,
# `status` lists it, and after the operator fixes the row `requeue --key` lets both flow in
# order (by delete-on-send, the table ends empty).
RELAYTEST_LAYOUT=debezium
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "ALTER TABLE outbox ADD COLUMN tenant text" # a column of the user's own, after migrate

# The same migrate again: nothing to do.
OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=debezium "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate2.log" 2>&1 ||
    fail "a second migrate failed: $(cat "$WORK/migrate2.log")"
grep -q "0 migrations applied" "$WORK/migrate2.log" || fail "a second migrate applied something: $(cat "$WORK/migrate2.log")"

# An index build that failed half-way (here: an expression that divides by zero, in the
# place of the pending index) leaves an INVALID index of that name; a migrate run again
# must build it again rather than skip it (IF NOT EXISTS).
psqlc "INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'idx', 'E', '{}')"
psqlc "DROP INDEX outbox_pending_idx"
psqlc "CREATE INDEX CONCURRENTLY outbox_pending_idx ON outbox ((1 / (relay_seq - relay_seq)))" 2>/dev/null &&
    fail "the failing index build did not fail"
[ "$(psqlc "SELECT indisvalid FROM pg_index WHERE indexrelid = 'outbox_pending_idx'::regclass")" = f ] ||
    fail "no invalid index left to test with"
psqlc "DELETE FROM outbox_relay_schema WHERE version = 6" # as if migrate had stopped there
OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=debezium "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate3.log" 2>&1 ||
    fail "migrate over an invalid index failed: $(cat "$WORK/migrate3.log")"
grep -q "dropping the invalid index" "$WORK/migrate3.log" || fail "migrate did not say it rebuilt the index"
valid=$(psqlc "SELECT string_agg(c.relname || ':' || i.indisvalid || ':' || (pg_get_indexdef(i.indexrelid) LIKE '%(relay_partition, relay_seq)%'), ' ' ORDER BY c.relname)
               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'outbox_pending_idx'")
[ "$valid" = "outbox_pending_idx:true:true" ] || fail "the pending index after migrate: $valid"
log "an invalid index left by a failed build: dropped and built again by migrate"

# Five migrates at once (five sidecars starting) over a step that builds an index
# CONCURRENTLY: one applies, the others wait for migrate's lock and find it done. (A build
# CONCURRENTLY waits for every older snapshot, and a migrate that waited for the lock inside
# a statement held one: the waiters and the build deadlocked.) A writer's transaction, open
# for 3 s as the five start, holds the build at its first wait (for the table's writers) so
# that the other four are waiting for the lock before the build waits for older snapshots:
# on an empty table the build is otherwise over before they ask, and the deadlock was seen
# in some runs only.
psqlc "DROP INDEX outbox_pending_idx"
psqlc "DELETE FROM outbox_relay_schema WHERE version = 6"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox (aggregatetype, aggregateid, type, payload) VALUES ('order', 'cic', 'E', '{}')" \
    -c "SELECT pg_sleep(3)" -c "COMMIT" >"$WORK/cic-writer.log" 2>&1 &
writer=$!
writer_open() { [ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(3)' AND state = 'active'")" = 1 ]; }
wait_until 10 "the writer's transaction open" writer_open
migrates=()
for i in 1 2 3 4 5; do
    OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=debezium "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-c$i.log" 2>&1 &
    migrates+=($!)
done
for p in "${migrates[@]}"; do wait "$p" || { cat "$WORK"/migrate-c*.log; fail "one of five concurrent migrates failed"; }; done
wait "$writer" || fail "the writer beside the five migrates failed: $(cat "$WORK/cic-writer.log")"
waited=$(grep -l "another migrate is running on this database; waiting for it" "$WORK"/migrate-c[1-5].log | wc -l)
[ "$waited" -ge 1 ] || fail "no migrate waited for migrate's lock: the five did not meet (the premise)"
applied=$(grep -l "migrate: applied " "$WORK"/migrate-c[1-5].log | wc -l)
[ "$applied" = 1 ] || fail "$applied of the five concurrent migrates applied the step (want exactly 1)"
[ "$(psqlc "SELECT indisvalid FROM pg_index WHERE indexrelid = 'outbox_pending_idx'::regclass")" = t ] ||
    fail "the pending index was not built by the concurrent migrates"
log "five migrates at once over a build CONCURRENTLY: one applied, four found it done"

refused() { # WHAT WANT-PATTERN COMMAND...: COMMAND exits non-zero with a message matching WANT
    local what=$1 want=$2 rc=0
    shift 2
    timeout 30 "$@" >"$WORK/refused.out" 2>&1 || rc=$?
    [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "$want" "$WORK/refused.out" ||
        fail "$what: exit $rc, want a refusal matching '$want': $(tail -3 "$WORK/refused.out")"
    log "$what: refused: $(grep -m1 -o "$want.*" "$WORK/refused.out" | cut -c1-110)"
}
relay_env
native_env=("${RELAY_BASE_ENV[@]}" OUTBOX_LAYOUT=native)
refused "native migrate on a Debezium table" "set OUTBOX_LAYOUT=debezium" \
    env OUTBOX_PG_DSN="$DSN" OUTBOX_LAYOUT=native "$RELAYTEST_RELAY_BIN" migrate
refused "native relay on a Debezium table" "set OUTBOX_LAYOUT=debezium" \
    env "${native_env[@]}" "$RELAYTEST_RELAY_BIN"
refused "placement of a missing column" "OUTBOX_ADDITIONAL_PLACEMENT names columns.*: nope" \
    env "${RELAY_BASE_ENV[@]}" OUTBOX_ADDITIONAL_PLACEMENT=tenant:header,nope:header "$RELAYTEST_RELAY_BIN"
psqlc "CREATE TABLE native_one (x int)"
psqlc "CREATE TABLE not_debezium (id uuid PRIMARY KEY, aggregate_type text, payload jsonb)"
refused "Debezium migrate on a table without Debezium's columns" "is not a Debezium outbox table: it has no column aggregatetype, aggregateid, type" \
    env OUTBOX_PG_DSN="$DSN" OUTBOX_LAYOUT=debezium OUTBOX_TABLE=not_debezium "$RELAYTEST_RELAY_BIN" migrate
OUTBOX_PG_DSN=$DSN OUTBOX_TABLE=native_tab "$RELAYTEST_RELAY_BIN" migrate >/dev/null 2>&1 || fail "native migrate of native_tab failed"
refused "Debezium migrate on a native table" "is in the native layout" \
    env OUTBOX_PG_DSN="$DSN" OUTBOX_LAYOUT=debezium OUTBOX_TABLE=native_tab "$RELAYTEST_RELAY_BIN" migrate
refused "Debezium relay on a native table" "table public.native_tab is in the native layout" \
    env "${RELAY_BASE_ENV[@]}" OUTBOX_TABLE=native_tab "$RELAYTEST_RELAY_BIN"

# Poison: key kp's second row names an invalid topic ("bad type" has a space).
ins() { # aggregatetype key n
    psqlc "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant)
           VALUES (gen_random_uuid(), '$1', '$2', 'E', '{\"n\": $3}', 't1')"
}
for n in 1 2 3; do
    for k in 1 2 3 4 5; do ins order "ok-$k" "$n"; done
    if [ "$n" = 2 ]; then ins "bad type" kp "$n"; else ins order kp "$n"; fi
done
RELAY_ENV=(OUTBOX_ADDITIONAL_PLACEMENT=tenant:header)
start_relay main >/dev/null
parked() { [ "$(count_status FAILED)" = 1 ] && [ "$(count_where "aggregate_id LIKE 'ok-%' AND status <> 'SENT'")" = 0 ]; }
wait_until 60 "the poison row parked and the other keys published" parked
reason=$(psqlc "SELECT last_error FROM outbox_relay_rows WHERE status = 'FAILED'")
log "parked: $reason"
grep -q "not a valid Kafka topic name" <<<"$reason" || fail "unclear reason: $reason"
sleep 1
got=$(psqlc "SELECT string_agg(payload->>'n' || ':' || status, ' ' ORDER BY id) FROM outbox_all WHERE aggregate_id = 'kp'")
[ "$got" = "1:SENT 2:FAILED 3:PENDING" ] || fail "kp's later row did not wait: $got"
"$RELAYTEST_RELAY_BIN" status --pg-dsn "$DSN" --layout debezium >"$WORK/status.txt" ||
    fail "status failed: $(cat "$WORK/status.txt")"
grep -q "bad type" "$WORK/status.txt" && grep -q "debezium layout" "$WORK/status.txt" ||
    fail "status does not name the layout or list the parked row: $(cat "$WORK/status.txt")"

# The operator fixes the row in the table writers use, then requeues the key.
psqlc "UPDATE outbox SET aggregatetype = 'order' WHERE aggregatetype = 'bad type'"
out=$("$RELAYTEST_RELAY_BIN" requeue --key kp --pg-dsn "$DSN" --layout debezium)
[ "$out" = "requeued 1 parked row to PENDING" ] || fail "requeue --key: $out"
wait_until 30 "kp's rows published after requeue" all_sent
[ "$(psqlc "SELECT count(*) FROM outbox")" = 0 ] || fail "delete-on-send left rows in the table"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "loss, duplicates or disorder after the requeue"
log "ok"
