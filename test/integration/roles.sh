#!/usr/bin/env bash
# Least privilege, as deploy/roles.sql grants it, in a database whose search_path is hostile:
#   - the writer role has INSERT on the outbox table and nothing else, and writes events;
#   - the relay role relays them, and names a long transaction of another role (it needs
#     pg_read_all_stats to see other roles' transactions);
#   - every relay session pins its search_path: functions planted in a schema that the
#     database puts first (clock_timestamp, pg_try_advisory_lock) are never called;
#   - row-level security on the outbox table that the relay's role does not bypass stops
#     start-up with a clear message; with BYPASSRLS the relay runs;
#   - without the grant the doorbell needs, the relay says so once and relays by its poll.
. "$(dirname "$0")/lib.sh"
setup_db
for r in rl_relay rl_writer; do
    psqlc "DROP OWNED BY $r" 2>/dev/null || true
    psqlc "DROP ROLE IF EXISTS $r; CREATE ROLE $r LOGIN"
done
"$PG_BIN/psql" -X -q "$DSN" -v schema=public -v table=outbox -v relay=rl_relay -v writer=rl_writer \
    -f "$RELAYTEST_SRC/deploy/roles.sql" || fail "deploy/roles.sql failed"
dsn_as() { echo "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=$1 dbname=$DB"; }

# a hostile search_path for every session of the database
psqlc "CREATE SCHEMA evil; GRANT USAGE ON SCHEMA evil TO PUBLIC;
       CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''2000-01-01''::timestamptz';
       CREATE FUNCTION evil.pg_try_advisory_lock(integer, integer) RETURNS boolean LANGUAGE plpgsql
         AS 'BEGIN RAISE EXCEPTION ''planted function called''; END';
       ALTER DATABASE $DB SET search_path = evil, pg_catalog, public"

# the writer: INSERT only
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$(dsn_as rl_writer)" -c "SELECT 1 FROM public.outbox LIMIT 1" 2>/dev/null &&
    fail "the writer role can read the outbox table"
for i in $(seq 10); do
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$(dsn_as rl_writer)" -c "INSERT INTO public.outbox
        (aggregate_type, aggregate_id, event_type, payload)
        SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 100) g" ||
        fail "the INSERT-only writer cannot write events"
done

# the relay role relays them; a long transaction of another role is named
RELAY_ENV=(OUTBOX_PG_DSN="$(dsn_as rl_relay)" OUTBOX_LONG_TRANSACTION_SECONDS=2)
start_relay main >/dev/null
wait_until 60 "1,000 events relayed by the relay role" all_sent
[ "$(count_where "sent_at < now() - interval '1 hour'")" = 0 ] || fail "a planted clock_timestamp() was called"
PGAPPNAME=other-role-job "$PG_BIN/psql" -X -q "$DSN" -c "BEGIN" -c "SELECT txid_current()" -c "SELECT pg_sleep(20)" >/dev/null 2>&1 &
longtx=$!
wait_until 20 "the relay names another role's long transaction" exported main 'outbox_long_transaction_age_seconds{.*application_name="other-role-job"'
psqlc "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'other-role-job'" >/dev/null
wait "$longtx" || true
stop_relay main || fail "relay exited with $? on SIGTERM"
grep -q "planted function called" "$WORK/relay-main.log" && fail "a planted function was called"
check "$TOPIC_PREFIX.order" || fail "loss or disorder with least-privilege roles"
log "writer INSERT-only, relay with its grants, hostile search_path: 1,000 events relayed"

# row-level security that hides rows from the relay
psqlc "ALTER TABLE outbox ENABLE ROW LEVEL SECURITY;
       CREATE POLICY visible ON outbox USING (aggregate_id <> 'hidden')"
out=$(env OUTBOX_PG_DSN="$(dsn_as rl_relay)" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" OUTBOX_HTTP_ADDR= \
    timeout 30 "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "row-level security: expected exit 1, got $rc"
grep -q "row-level security is enabled on public.outbox" <<<"$out" || fail "no clear message: $out"
psqlc "ALTER ROLE rl_relay BYPASSRLS"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'hidden', 'E', '{}')"
start_relay bypass >/dev/null
wait_until 30 "a relay role with BYPASSRLS relays every row" all_sent
stop_relay bypass || fail "relay exited with $? on SIGTERM"
log "row-level security: refused without BYPASSRLS (exit 1, clear message), relays with it"

# A missing grant that only the doorbell needs (UPDATE on the bell sequence): the relay says
# so once - not on every idle poll, which retries it every half second - and rows still flow
# by its poll.
psqlc "ALTER TABLE outbox DISABLE ROW LEVEL SECURITY; REVOKE UPDATE ON SEQUENCE outbox_bell FROM rl_relay"
# (the repeat interval, a minute, is 3 s in this test build: OUTBOX_TESTHOOK_REPEAT_LOG_MS)
RELAY_ENV=(OUTBOX_PG_DSN="$(dsn_as rl_relay)" OUTBOX_LONG_TRANSACTION_SECONDS=2 OUTBOX_TESTHOOK_REPEAT_LOG_MS=3000)
start_relay noarm >/dev/null
wait_until 30 "the relay without the bell grant says so" grep -q "arming the doorbell failed" "$WORK/relay-noarm.log"
for i in 1 2 3 4 5 6 7 8 9 10; do
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'nb$i', 'E', '{}')"
    sleep 0.7
done
wait_until 30 "rows flow by the poll without the doorbell" all_sent
stop_relay noarm || fail "relay exited with $? on SIGTERM"
RELAY_ENV=()
said=$(grep -c "arming the doorbell failed" "$WORK/relay-noarm.log")
again=$(grep -c "arming the doorbell failed.*(again, [1-9][0-9]* more times since it was last logged)" "$WORK/relay-noarm.log" || true) # (grep -c exits 1 on 0: a count, not a failure)
# over about 8 s with a 3 s interval: the first line, then one or two repeats with their count
[ "$again" -ge 1 ] && [ "$said" -le 4 ] ||
    fail "the same failure was logged $said times ($again repeats with a count) in 8 s (want once per 3 s interval)"
log "missing bell grant: logged $said times in about 8 s with a 3 s repeat interval ($again with a count), rows flowed by the poll"
psqlc "ALTER DATABASE $DB RESET search_path"
for r in rl_relay rl_writer; do psqlc "DROP OWNED BY $r; DROP ROLE $r"; done
log "ok"
