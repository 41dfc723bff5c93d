#!/usr/bin/env bash
# Poison policy block holds a key's rows *after* its parked row, never one before it. Row E1
# of a key is written by a transaction that stays open; E2 of the same key (a later id, an
# invalid topic name) commits first and is parked at once. When E1 commits it is published
# (it comes first in the key's order); E3, written after E2, waits for the requeue. Before,
# the claim skipped every row of a key with a parked row, E1 included: it stayed PENDING
# until E2 was requeued (poison_bottom_k met it when a failed batch put E1 back while E2
# was parked).
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_DEAD_LETTER_TOPIC=)
start_relay main >/dev/null
ins() { # n [topic-sql]
    psqlc "INSERT INTO outbox ($OUTBOX_COLS, topic) VALUES ('order', 'p-early', 'E$1', '{}', ${2:-NULL})"
}
"$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'p-early', 'E1', '{}')" \
    -c "SELECT pg_sleep(4)" -c "COMMIT" >/dev/null &
writer=$!
RELAY_PIDS+=("$writer")
wait_until 5 "E1's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = '\''outbox'\''::regclass AND mode = '\''RowExclusiveLock'\'' AND pid <> pg_backend_pid()")" -ge 1 ]'
ins 2 "'bad topic!'"
wait_until 20 "E2 parked" rows_are 1 "aggregate_id = 'p-early' AND status = 'FAILED'"
ins 3
wait "$writer" || fail "E1's writer failed"
states() { psqlc "SELECT string_agg(event_type || ':' || status, ' ' ORDER BY id) FROM outbox_all WHERE aggregate_id = 'p-early'"; }
wait_until 20 "E1 published" eval '[ "$(states)" = "E1:SENT E2:FAILED E3:PENDING" ]'
sleep 2
[ "$(states)" = "E1:SENT E2:FAILED E3:PENDING" ] || fail "after 2 s more: $(states)"
psqlc "UPDATE outbox SET topic = NULL WHERE aggregate_id = 'p-early' AND event_type = 'E2'"
"$RELAYTEST_RELAY_BIN" requeue --key p-early --pg-dsn "$DSN" --on-sent "$ON_SENT" >/dev/null || fail "requeue failed"
wait_until 20 "E2 and E3 published after the requeue" eval '[ "$(states)" = "E1:SENT E2:SENT E3:SENT" ]'
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "Kafka does not hold each row once in key order"
log "ok: $(states)"
