#!/usr/bin/env bash
# A slow worker statement is not a lost session. The relay stops publishing when its worker
# session has not answered for 30% of OUTBOX_LEASE_TIMEOUT_MS (the server may have ended
# it and freed its lease locks), but a statement that merely runs long (behind a lock, a
# long reader's dead tuples) leaves the session alive and its locks held: the relay asks on
# its other session whether the worker's backend is still there, and counts that as
# contact. Here a lock holds every statement on the outbox table for 4 s, more than four
# times the 900 ms deadline of a 3 s lease timeout, while writers wait behind it: no lease
# partition is lost, and everything is published once, in key order, afterwards. (Before,
# every partition was lost and claimed again from the bottom: docs/RELIABILITY.md.)
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_LEASE_TIMEOUT_MS=3000)
start_relay main >/dev/null
writers 2 200 100
wait_until 30 "the first rows published" all_sent
lost0=$(metric main outbox_lease_lost_total) || fail "cannot read outbox_lease_lost_total"
"$PG_BIN/psql" -X -q "$DSN" -c "BEGIN" -c "LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE" \
    -c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null &
locker=$!
locked() { [ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND mode = 'AccessExclusiveLock' AND granted")" = 1 ]; }
wait_until 5 "the lock taken" locked
writers 2 200 100 &
wp=$!
waiting() { [ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'outbox-relay %' AND wait_event_type = 'Lock'")" -ge 1 ]; }
wait_until 5 "a relay statement waiting behind the lock" waiting
wait "$locker" || fail "the lock's session failed"
wait "$wp" || fail "writers failed"
wait_until 60 "every row published after the lock" all_sent
lost=$(metric main outbox_lease_lost_total) || fail "cannot read outbox_lease_lost_total"
stop_relay main || fail "relay exited with $? on SIGTERM"
! grep -q "lease: lost" "$WORK/relay-main.log" ||
    fail "a statement waiting 4 s lost the leases: $(grep -m1 "lease: lost" "$WORK/relay-main.log")"
[ "$lost" = "$lost0" ] || fail "outbox_lease_lost_total went from $lost0 to $lost"
grep -q "pg worker: statement running for [0-9]* ms; its session is alive" "$WORK/relay-main.log" ||
    fail "the relay never said it found its busy worker session alive"
check "$TOPIC_PREFIX.order" --exact || fail "loss, duplicates or disorder after the slow statement"
log "a statement held 4 s behind a lock (deadline 900 ms): no lease lost; $(grep -m1 -o "statement running for [0-9]* ms; its session is alive" "$WORK/relay-main.log")"
log "ok"
