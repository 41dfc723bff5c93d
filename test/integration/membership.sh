#!/usr/bin/env bash
# Relays count as peers only among relays of the same table, by the table's membership lock
# (not by application_name, which any session can set):
#   A. two outbox tables in one database, one relay each, with 20 other sessions named
#      'outbox-relay spoof' open: each relay holds all 64 partitions and drains its table;
#   B. two relays on each table: each sees 2 relays, the partitions of each table are
#      covered, both tables drain; `status --json` names each relay of its table;
#   C. a partition locked by a session that is not a relay: logged with its pid and name,
#      counted in outbox_lease_partitions_unowned, named as the stall reason; the other 63
#      partitions flow, and the partition is taken as soon as the foreign lock goes.
. "$(dirname "$0")/lib.sh"
setup_db
OUTBOX_PG_DSN=$DSN OUTBOX_TABLE=public.outbox2 "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate2.log" 2>&1 ||
    { cat "$WORK/migrate2.log"; fail "migrate of the second table failed"; }
grant_roles outbox2
outbox_all_view outbox2
ins() { # table n aggregate_type
    psqlc "INSERT INTO $1 (aggregate_type, aggregate_id, event_type, payload)
           SELECT '$3', 'k' || (g % 100), 'Created', jsonb_build_object('n', g) FROM generate_series(1, $2) g"
}
drained() { [ "$(psqlc "SELECT count(*) FROM $1 WHERE status <> 'SENT'")" = 0 ]; }
# relay NAME TABLE: a relay of TABLE named NAME
relay() {
    RELAY_ENV=(OUTBOX_RELAY_NAME="$1" OUTBOX_TABLE="$2" OUTBOX_LEASE_TIMEOUT_MS=5000)
    start_relay "$1" >/dev/null
}
SPOOF_PIDS=()
# the backends sleep on after their psql is gone: end them
end_sessions() { psqlc "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE '$1'" >/dev/null; }
spoof_cleanup() {
    TEST_RC=${TEST_RC:-$?}
    local p
    for p in "${SPOOF_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    end_sessions 'outbox-relay spoof%' || true
    end_sessions squatter || true
    cleanup
}
trap spoof_cleanup EXIT

# ---- A
for i in $(seq 20); do
    PGAPPNAME="outbox-relay spoof$i" "$PG_BIN/psql" -X -q "$DSN" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
    SPOOF_PIDS+=($!)
done
spoofed() { [ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'outbox-relay spoof%'")" = 20 ]; }
wait_until 20 "20 sessions named outbox-relay spoof*" spoofed
ins outbox 2000 order
ins outbox2 2000 pay
relay a1 public.outbox
relay b1 outbox2
wait_until 60 "table 1 drained by its one relay" drained outbox
wait_until 60 "table 2 drained by its one relay" drained outbox2
wait_until 15 "a1 holds all 64 partitions" metric_is a1 outbox_lease_partitions_held 64
wait_until 15 "b1 holds all 64 partitions" metric_is b1 outbox_lease_partitions_held 64
[ "$(metric a1 outbox_lease_relays)" = 1 ] || fail "a1 counts $(metric a1 outbox_lease_relays) relays on its table"
log "A. two tables, one relay each, 20 spoofed sessions: both drained, each relay holds 64 partitions"

# ---- B
relay a2 public.outbox
relay b2 outbox2
ins outbox 2000 order
ins outbox2 2000 pay
covered() { # the partitions of each table are held by its two relays, and shared
    local a1 a2 b1 b2
    a1=$(metric a1 outbox_lease_partitions_held) a2=$(metric a2 outbox_lease_partitions_held)
    b1=$(metric b1 outbox_lease_partitions_held) b2=$(metric b2 outbox_lease_partitions_held)
    [ $((a1 + a2)) = 64 ] && [ $((b1 + b2)) = 64 ] && [ "$a2" -gt 0 ] && [ "$b2" -gt 0 ]
}
wait_until 60 "each table's 64 partitions shared by its two relays" covered
wait_until 60 "table 1 drained" drained outbox
wait_until 60 "table 2 drained" drained outbox2
for r in a1 a2 b1 b2; do
    [ "$(metric $r outbox_lease_relays)" = 2 ] || fail "$r counts $(metric $r outbox_lease_relays) relays, want 2"
done
OUTBOX_PG_DSN=$DSN "$RELAYTEST_RELAY_BIN" status --json >"$WORK/status1.json" || fail "status --json failed"
names=$(jq -r '[.relays[].relay] | sort | join(",")' "$WORK/status1.json")
[ "$names" = "a1,a2" ] || fail "status --json of table 1 lists relays '$names', want a1,a2"
OUTBOX_PG_DSN=$DSN OUTBOX_TABLE=outbox2 "$RELAYTEST_RELAY_BIN" status --json >"$WORK/status2.json" || fail "status --json failed"
names=$(jq -r '[.relays[].relay] | sort | join(",")' "$WORK/status2.json")
[ "$names" = "b1,b2" ] || fail "status --json of table 2 lists relays '$names', want b1,b2"
log "B. two relays per table: each counts 2, partitions covered, both drained; status names a1,a2 and b1,b2"
for r in a1 a2 b1 b2; do stop_relay $r || fail "relay $r exited with $? on SIGTERM"; done

# ---- C
relay a1 public.outbox
wait_until 15 "a1 holds all 64 partitions" metric_is a1 outbox_lease_partitions_held 64
key=$(psqlc "SELECT l.classid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
             WHERE l.locktype = 'advisory' AND l.objid = 1000 AND a.application_name = 'outbox-relay a1'")
[ -n "$key" ] || fail "no membership lock held by relay a1"
stop_relay a1 || fail "relay a1 exited with $? on SIGTERM"
part=$(psqlc "SELECT lease_partition FROM outbox_all LIMIT 1")
PGAPPNAME=squatter "$PG_BIN/psql" -X -q "$DSN" -c "SELECT pg_advisory_lock($key, $part)" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
squatter=$!
SPOOF_PIDS+=($squatter)
squatting() { [ "$(psqlc "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'squatter' AND l.locktype = 'advisory' AND l.granted")" = 1 ]; }
wait_until 10 "a foreign session locks partition $part" squatting
ins outbox 3000 order
relay a1 public.outbox
others_sent() { rows_are 0 "lease_partition <> $part AND status <> 'SENT'"; }
wait_until 60 "the other 63 partitions flow" others_sent
stuck=$(count_where "lease_partition = $part AND status = 'PENDING'")
[ "$stuck" -gt 0 ] || fail "no row in partition $part to hold back: nothing tested"
wait_until 20 "outbox_lease_partitions_unowned counts it" metric_is a1 'outbox_lease_partitions_unowned{table="public.outbox"}' 1
grep -q "locked by sessions that are not its relays (pid [0-9]* (squatter))" "$WORK/relay-a1.log" ||
    fail "no log line names the foreign lock holder"
wait_until 60 "stall reason names the unowned partition" metric_is a1 'outbox_stalled{reason="lease_partitions_unowned"}' 1
log "C. foreign lock on partition $part: $stuck rows held back, reported (metric, log, stall reason)"
end_sessions squatter
wait_until 30 "partition $part taken once the foreign lock went" drained outbox
stop_relay a1 || fail "relay a1 exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder on table 1"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox2_all ORDER BY id" >"$WORK/expected2.tsv"
"$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$TOPIC_PREFIX.pay" --expected "$WORK/expected2.tsv" ||
    fail "loss or disorder on table 2"
log "ok"
