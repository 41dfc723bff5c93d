#!/usr/bin/env bash
# Keep mode writes a parked row's entry only while its session holds the row's lease
# partition, as it records marks and moves watermarks (docs/OUTBOX-TABLE.md, Keep): a relay
# cut off and back must not write an entry for a row its partition's new holder may have
# published since. A test hook cuts the worker session right before its first park: the
# park, queued under the session that held the row's partition, goes to the next session
# before any lease is taken again (the relay's order of work after a reconnect). It is
# refused - nothing written, said in the log - and once the relay holds the partition
# again the row is claimed, fails and is parked as usual, its key's later row waiting,
# the other keys flowing.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db
RELAY_ENV=(OUTBOX_DEAD_LETTER_TOPIC= OUTBOX_TESTHOOK_CUT_BEFORE_PARK=1 OUTBOX_LEASE_TIMEOUT_MS=3000)
start_relay main >/dev/null
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 10), 'E', '{}' FROM generate_series(1, 100) g"
psqlc "INSERT INTO outbox ($OUTBOX_COLS, topic) VALUES ('order', 'p-bad', 'E1', '{}', 'bad topic!')"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'p-bad', 'E2', '{}')"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 10), 'E', '{}' FROM generate_series(1, 100) g"
wait_until 20 "the hook fired" grep -q "test hook: the worker session is cut before parking row" "$WORK/relay-main.log"
bad=$(psqlc "SELECT id FROM outbox WHERE aggregate_id = 'p-bad' AND event_type = 'E1'")
wait_until 20 "the park refused" grep -q "relay: row $bad was not parked: it is no longer pending here, or this relay no longer holds its lease partition" "$WORK/relay-main.log"
parked_for_good() { [ "$(psqlc "SELECT count(*) FROM outbox_parked WHERE id = $bad AND failed")" = 1 ]; }
wait_until 30 "the row parked once the partition is held again" parked_for_good
others_sent() { [ "$(psqlc "SELECT count(*) FROM outbox_kept WHERE aggregate_id <> 'p-bad' AND status <> 'SENT'")" = 0 ]; }
wait_until 30 "the other keys published" others_sent
sleep 1
states=$(psqlc "SELECT string_agg(event_type || ':' || status, ' ' ORDER BY id) FROM outbox_kept WHERE aggregate_id = 'p-bad'")
[ "$states" = "E1:FAILED E2:PENDING" ] || fail "p-bad after the refused park: $states"
stop_relay main || fail "relay exited with $? on SIGTERM"
CHECK_WHERE="aggregate_id <> 'p-bad'" check "$TOPIC_PREFIX.order" --exact || fail "the other keys: loss, duplicates or disorder"
log "the park queued under a session cut before it: refused in the next session; parked once the partition was held again; p-bad $states"
log "ok"
