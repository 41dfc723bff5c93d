#!/usr/bin/env bash
# A rolling upgrade on a live table. The relay of the previous schema version (built from
# this repository's history: the commit before the newest schema/ file) relays while
# writers commit; `migrate` of this version brings the table up to date under it; a relay
# of this version takes over and the old one stops. Nothing lost, per-key order intact.
# Also: five migrates at once (serialised), a relay of this version on the previous
# schema, and what the migrations promise (002: no infinite created_at in new rows, an
# INSERT-only role can write events; 003: the mark's fillfactor; 004: outbox_enqueue, which
# no role may call unless granted).
. "$(dirname "$0")/lib.sh"

# ---- the previous version's relay, built from git
newest=$(cd "$RELAYTEST_SRC" && ls schema/[0-9]*.sql | sort | tail -1)
added=$(git -C "$RELAYTEST_SRC" log --diff-filter=A --format=%H -1 -- "$newest") || fail "no git history (a shallow clone?)"
[ -n "$added" ] || fail "cannot find the commit that added $newest"
log "previous version: $(git -C "$RELAYTEST_SRC" log -1 --format='%h %s' "$added^" | cut -c1-80)"
mkdir -p "$WORK/prev"
git -C "$RELAYTEST_SRC" archive "$added^" | tar -x -C "$WORK/prev" || fail "git archive failed"
(cd "$WORK/prev" && meson setup build --buildtype=plain >/dev/null && ninja -C build outbox-relay >/dev/null) ||
    fail "the previous version does not build"
PREV_BIN=$WORK/prev/build/outbox-relay
prev_version=$(ls "$WORK/prev/schema/"[0-9]*.sql | wc -l)
this_version=$(ls "$RELAYTEST_SRC/schema/"[0-9]*.sql | wc -l)
log "schema versions: previous $prev_version, this $this_version"

"$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
    -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
OUTBOX_PG_DSN=$DSN "$PREV_BIN" migrate >"$WORK/migrate-prev.log" 2>&1 || { cat "$WORK/migrate-prev.log"; fail "previous migrate"; }
outbox_all_view
psqlc "CREATE TABLE aggregate (id text PRIMARY KEY, version int NOT NULL DEFAULT 0)"
version() { psqlc "SELECT max(version) FROM outbox_relay_schema"; }
[ "$(version)" = "$prev_version" ] || fail "table not at the previous version"

# ---- this version's relay runs on the previous schema
start_relay new_on_old >/dev/null
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 50), 'Created', '{}' FROM generate_series(1, 500) g"
# schema 1 let a writer store an infinite created_at, which 002 repairs: when the previous
# schema is 1, such a row must survive the upgrade
if [ "$prev_version" -lt 2 ]; then
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
           VALUES ('order', 'inf', 'Created', '{}', 'infinity')"
fi
wait_until 30 "this version's relay drains on schema $prev_version" all_sent
grep -q "at version $prev_version (the previous one" "$WORK/relay-new_on_old.log" || fail "no log line about the older schema"
stop_relay new_on_old || fail "relay exited with $? on SIGTERM"
log "this version's relay ran on schema $prev_version"

# ---- the rolling upgrade
this_bin=$RELAYTEST_RELAY_BIN
RELAYTEST_RELAY_BIN=$PREV_BIN
start_relay old >/dev/null
RELAYTEST_RELAY_BIN=$this_bin
migrates=()
# writers go on until the new relay has taken over: with a fixed number of rows they
# could finish before the migrations did, and "the old relay keeps relaying after the
# migration" then had nothing left to relay (seen in CI: all 6,000 rows SENT before it)
steady_writers() {
    while [ ! -e "$WORK/stop-writers" ]; do writers 4 250 200 >/dev/null; done
}
steady_writers &
writer=$!
RELAY_PIDS+=("$writer")
wait_until 60 "the old relay relays" rows_at_least 1000 "status = 'SENT'"
for i in 1 2 3 4 5; do
    OUTBOX_PG_DSN=$DSN "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-$i.log" 2>&1 &
    migrates+=($!)
done
for p in "${migrates[@]}"; do wait "$p" || { cat "$WORK"/migrate-*.log; fail "a concurrent migrate failed"; }; done
[ "$(version)" = "$this_version" ] || fail "not migrated to $this_version"
applied=$(grep -l "migrate: applied " "$WORK"/migrate-[1-5].log | wc -l)
[ "$applied" = 1 ] || fail "$applied of the five concurrent migrates applied migrations (want exactly 1)"
log "five migrates at once: one applied, four found it done; table at version $this_version"
sent=$(count_status SENT)
wait_until 30 "the old relay keeps relaying after the migration" rows_at_least $((sent + 500)) "status = 'SENT'"
kill -0 "$(relay_pid old)" || fail "the old relay exited"
start_relay new >/dev/null
stop_relay old || fail "the old relay exited with $? on SIGTERM"
touch "$WORK/stop-writers"
wait "$writer" || fail "writers failed"
wait_until 60 "the new relay drained everything" all_sent
stop_relay new || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder across the rolling upgrade"
log "rolling upgrade: $(count_status SENT) rows, none lost"

# ---- what the migrations promise
if psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
          VALUES ('order', 'x', 'E', '{}', 'infinity')" 2>"$WORK/inf.err"; then
    fail "a new row with created_at = infinity was accepted"
fi
grep -q "created_at_finite" "$WORK/inf.err" || fail "unexpected error: $(cat "$WORK/inf.err")"
psqlc "SELECT convalidated FROM pg_constraint WHERE conname = 'outbox_created_at_finite'" | grep -q t ||
    fail "the constraint was not validated"
[ "$(count_where "NOT isfinite(created_at)")" = 0 ] || fail "an infinite created_at survived the migration"
# roles belong to the cluster: named by the test's database (its variants run side by side)
writer=${DB}_mig_writer nobody=${DB}_mig_nobody
psqlc "DROP ROLE IF EXISTS $writer; CREATE ROLE $writer LOGIN; GRANT INSERT ON outbox TO $writer"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=$writer dbname=$DB" \
    -c "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'w', 'E', '{}')" ||
    fail "an INSERT-only role cannot write an event"
psqlc "DROP OWNED BY $writer; DROP ROLE $writer"
log "new rows with an infinite created_at refused; an INSERT-only role writes events"
psqlc "SELECT reloptions FROM pg_class WHERE oid = 'outbox'::regclass" | grep -q "fillfactor=45" ||
    fail "003: the table's fillfactor is not 45: $(psqlc "SELECT reloptions FROM pg_class WHERE oid = 'outbox'::regclass")"
psqlc "DROP ROLE IF EXISTS $nobody; CREATE ROLE $nobody"
[ "$(psqlc "SELECT has_function_privilege('$nobody', 'outbox_enqueue(text, text, text, jsonb, jsonb, uuid, text, text, text)', 'EXECUTE')")" = f ] ||
    fail "004: any role may call outbox_enqueue"
psqlc "DROP ROLE $nobody"
log "ok"
