#!/usr/bin/env bash
# Stall diagnosis names what holds the xmin horizon back besides a long transaction of the
# own database: a standby whose hot_standby_feedback carries a long query's snapshot, and a
# physical replication slot that keeps that xmin, also after its standby went away. The
# relay names each in its log, in outbox_xmin_horizon_held_seconds{kind,name} and in
# /status, and says when the horizon is free again.
. "$(dirname "$0")/lib.sh"

own_servers
PORT_A=$(free_port)
PORT_B=$(free_port)
on() { "$PG_BIN/psql" -X -q -At -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3"; }

log "primary on $PORT_A, standby on $PORT_B with hot_standby_feedback"
pg_env start "$HA/a" "$PORT_A"
on "$PORT_A" postgres "CREATE DATABASE $DB" >/dev/null
pg_env standby "$HA/b" "$PORT_B" "$PORT_A"
on "$PORT_B" postgres "ALTER SYSTEM SET hot_standby_feedback = on" >/dev/null
on "$PORT_B" postgres "ALTER SYSTEM SET cluster_name = 'it_standby_b'" >/dev/null
pg_env stop "$HA/b"
pg_env start "$HA/b" "$PORT_B"

DSN="host=127.0.0.1 port=$PORT_A user=postgres dbname=$DB"
OUTBOX_PG_DSN=$DSN "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate.log" 2>&1 || { cat "$WORK/migrate.log"; fail "migrate failed"; }
outbox_all_view
RELAY_ENV=(OUTBOX_PG_DSN="$DSN" OUTBOX_LONG_TRANSACTION_SECONDS=3)
start_relay main >/dev/null
events() {
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'order', 'k' || (g % 10), 'Created', '{}' FROM generate_series(1, $1) g"
}
# busy: commits on the primary so that the horizon would move if nothing held it
busy() { local i; for i in $(seq 1 "$1"); do events 10; sleep 0.5; done; }
held() { exported main "outbox_xmin_horizon_held_seconds{kind=\"$1\",name=\"$2\"}"; }
free() { not_exported main 'outbox_xmin_horizon_held_seconds{'; }

events 100
wait_until 30 "rows SENT" all_sent
free || fail "an xmin holder reported with nothing holding the horizon"

# 1. A long query on the standby: its snapshot reaches the primary as feedback.
query_on_standby() {
    "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PORT_B" -U postgres -d "$DB" \
        -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox; SELECT pg_sleep(120); COMMIT;" >/dev/null 2>&1 &
    STANDBY_QUERY=$!
}
query_on_standby
busy 4
wait_until 30 "the standby named as the holder" held standby it_standby_b
grep -q "the xmin horizon is held back by standby 'it_standby_b'" "$WORK/relay-main.log" || fail "no log line names the standby"
curl -sf "http://127.0.0.1:$(http_port main)/status" >"$WORK/status.json"
jq -e '.xmin_horizon_held.kind == "standby" and .xmin_horizon_held.name == "it_standby_b"
       and (.xmin_horizon_held.seconds >= 3)' "$WORK/status.json" >/dev/null || { cat "$WORK/status.json"; fail "/status does not name the standby"; }
log "$(grep -o "the xmin horizon is held back by standby[^:]*" "$WORK/relay-main.log" | head -1)"
kill "$STANDBY_QUERY" 2>/dev/null || true
wait "$STANDBY_QUERY" 2>/dev/null || true
on "$PORT_B" postgres "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()" >/dev/null
busy 2
wait_until 30 "the standby no longer reported" free
grep -q "no longer held back by standby 'it_standby_b'" "$WORK/relay-main.log" || fail "no log line says the horizon is free"

# 2. The standby streams through a physical slot: the slot keeps the xmin, also after the
#    standby stopped.
on "$PORT_A" postgres "SELECT pg_create_physical_replication_slot('it_slot_b')" >/dev/null
on "$PORT_B" postgres "ALTER SYSTEM SET primary_slot_name = 'it_slot_b'" >/dev/null
pg_env stop "$HA/b" # a restart, not a reload: the walreceiver then starts on the slot at once
pg_env start "$HA/b" "$PORT_B"
wait_until 30 "the standby streams through its slot" \
    test "$(on "$PORT_A" postgres "SELECT active FROM pg_replication_slots WHERE slot_name = 'it_slot_b'")" = t
query_on_standby
busy 2
wait_until 30 "the slot's xmin follows the standby's snapshot" \
    test -n "$(on "$PORT_A" postgres "SELECT xmin FROM pg_replication_slots WHERE slot_name = 'it_slot_b'")"
pg_env kill "$HA/b"
wait "$STANDBY_QUERY" 2>/dev/null || true
busy 4
wait_until 30 "the abandoned slot named as the holder" held "replication slot" it_slot_b
log "$(grep -o "the xmin horizon is held back by replication slot[^:]*" "$WORK/relay-main.log" | head -1)"
on "$PORT_A" postgres "SELECT pg_drop_replication_slot('it_slot_b')" >/dev/null
busy 2
wait_until 30 "the dropped slot no longer reported" free
stop_relay main || fail "relay exited with $? on SIGTERM"
log "ok"
