#!/usr/bin/env bash
# A parked row's dead-letter copy that the producer loses is sent again. A fatal producer
# error right after the copy was queued (the test hook OUTBOX_TESTHOOK_FATAL_AFTER_DEAD_LETTER)
# purges the producer's queue when it is made anew; the copy's failure is logged, it is sent
# again a second later, and the dead-letter topic holds it. (Found by `poison_delete` with
# the suite running four tests at a time: another row's rejection raised the fatal error
# while two copies waited for their new topic, and both were lost for good.)
. "$(dirname "$0")/lib.sh"
setup_db
dlq="$TOPIC_PREFIX.dead-letters"
RELAY_ENV=(OUTBOX_DEAD_LETTER_TOPIC="$dlq" OUTBOX_TESTHOOK_FATAL_AFTER_DEAD_LETTER=1)
ins() { psqlc "INSERT INTO outbox ($OUTBOX_COLS, topic) VALUES ('order', '$1', 'E', '{}', ${2:-NULL})"; }
for k in $(seq 1 20); do ins "ok-$k"; done
ins p-topic "'bad topic!'"
for k in $(seq 21 40); do ins "ok-$k"; done
start_relay main >/dev/null
parked() { [ "$(count_status FAILED)" = 1 ] && [ "$(count_status PENDING)" = 0 ]; }
wait_until 60 "the poison row parked and the other rows SENT" parked
log_of() { cat "$WORK/relay-main.log"; }
wait_until 10 "the fatal error injected after the dead-letter copy" eval 'log_of | grep -q "test hook: injecting a fatal producer error after a dead-letter copy"'
wait_until 30 "the lost copy's failure logged with its retry" eval 'log_of | grep -q "dead-letter copy of row [0-9]* failed: .* (trying again in 1 s)"'
log "$(log_of | grep -m1 -o "dead-letter copy of row [0-9]* failed: .*")"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox_all WHERE status = 'FAILED'" >"$WORK/dlq.tsv"
in_dlq() {
    "$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$dlq" --expected "$WORK/dlq.tsv" --no-partition-check \
        >"$WORK/dlq.out" 2>&1
}
wait_until 30 "the parked row's copy in the dead-letter topic" in_dlq
log "dead letters: $(grep CHECK "$WORK/dlq.out")"
stop_relay main || fail "relay exited with $? on SIGTERM"
CHECK_WHERE="status = 'SENT'" check "$TOPIC_PREFIX.order" || fail "loss or disorder around the fatal error"
log "ok"
