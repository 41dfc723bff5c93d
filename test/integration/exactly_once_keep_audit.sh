#!/usr/bin/env bash
# Exactly-once in keep mode, a row claimed at or below its partition's watermark W: a row
# planted below W (an id a rolled-back writer drew, inserted later with OVERRIDING SYSTEM
# VALUE, while no relay runs) is found by the audit and published in a transaction, and the
# relay is SIGKILLed after the commit, before its mark. The next relay finds the row in the
# progress record and records it there, below W, without publishing it again: a
# read_committed consumer sees it once.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db
EOS=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX" OUTBOX_LEASE_TIMEOUT_MS=3000
     OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress" OUTBOX_WATERMARK_AUDIT_MS=640)
dead() { ! kill -0 "$(relay_pid "$1")" 2>/dev/null; }
RELAY_ENV=("${EOS[@]}")
start_relay r1 >/dev/null
for k in $(keys_in 0 20); do ins_key "$k" >/dev/null; done
wait_until 30 "the first rows SENT" all_sent
# a hole below W: an id a writer drew and rolled back, passed by W
KEEP_GAPS_PLANTED=1
r=$(part_of planted)
hole=$("$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'planted', 'E', '{}') RETURNING id" -c "ROLLBACK" | head -1)
for k in $(keys_in "$r" 3); do ins_key "$k" >/dev/null; done
wait_until 10 "W past the rolled-back id" eval '[ "$(w_of "$r")" -ge "$hole" ]'
wait_until 30 "the rows after it SENT" all_sent
stop_relay r1 || fail "relay r1 exited $? on SIGTERM"
psqlc "INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE VALUES ($hole, 'order', 'planted', 'E', '{}')"
log "row $hole planted below W $(w_of "$r") of partition $r"
# r2's audit finds it and publishes it; r2 dies after the commit, before the mark
RELAY_ENV=("${EOS[@]}" OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER=1)
start_relay r2 >/dev/null
wait_until 60 "relay r2 to be SIGKILLed by its hook" dead r2
grep -q "test hook: SIGKILL before marking" "$WORK/relay-r2.log" || fail "relay r2 did not die by its hook"
grep -q "(ids $hole)" "$WORK/relay-r2.log" || fail "relay r2's audit did not name row $hole"
RELAY_ENV=("${EOS[@]}")
start_relay r3 >/dev/null
wait_until 30 "relay r3 to take the table and record the progress record's rows" \
    grep -q "1 of them recorded now" "$WORK/relay-r3.log"
wait_until 10 "the planted row recorded as published" eval '[ "$(psqlc "SELECT count(*) FROM outbox_published
    WHERE lease_partition = $r AND $hole = ANY(ids)")" = 1 ]'
sleep 3 # (r3's audit and claims go on: a second publish of the row would show below)
stop_relay r3 || fail "relay r3 exited $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact --transactional ||
    fail "read_committed: the planted row (or another) delivered twice or lost"
log "ok: the row below W committed before the kill was recorded from the progress record, published once"
