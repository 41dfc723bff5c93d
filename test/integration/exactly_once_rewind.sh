#!/usr/bin/env bash
# Exactly-once: the progress record names rows by id AND event id. A relay is SIGKILLed
# after a commit and before recording it, so the record lists rows still PENDING; then
# those rows are replaced by new rows with the same ids and new event ids (as a restore, or
# a sequence set back, would give the ids to new events). The next relay must not take the
# new rows for the listed ones: it publishes every one of them (to a topic of their own
# here), none is recorded unpublished. Before that: a progress topic that deletes records
# is refused with a clear message; after it, a relay in the other mode is refused. The
# progress topic here is made by the test with cleanup.policy=compact,delete, and its first
# record is deleted (as retention deletes old segments) before the next relay reads it: the
# read starts at offset 0 and must find the partition's new start, not skip to its end (the
# record would then be missed, "nothing committed left to record").
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 3000) g"
EOS=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_BATCH_SIZE=200 OUTBOX_MARK_DELAY_MS=1000
     OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX" OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")

# First, a progress topic whose cleanup.policy is delete (retention could remove a table's
# last record): --check-config and the relay say so, naming the setting, and nothing is
# published.
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$TOPIC_PREFIX.deleted" 1 >/dev/null ||
    fail "could not create the topic $TOPIC_PREFIX.deleted"
RELAY_ENV=("${EOS[@]}" OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.deleted")
# --check-config says so first (exit 1), without taking the table
relay_env
rc=0
env "${RELAY_BASE_ENV[@]}" "${RELAY_ENV[@]}" "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/check-config.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "check-config: exactly-once: the progress topic .* has cleanup.policy=delete" "$WORK/check-config.log" ||
    fail "--check-config with a progress topic that deletes: exit $rc, want 1 naming cleanup.policy: $(tail -3 "$WORK/check-config.log")"
start_relay refused >/dev/null
wait_until 30 "the relay to refuse the progress topic" grep -q "has cleanup.policy=delete" "$WORK/relay-refused.log"
sleep 1
[ "$(count_status SENT)" = 0 ] || fail "rows were published with a progress topic that deletes records"
kill_relay refused
log "a progress topic with cleanup.policy=delete: refused, nothing published"

"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$TOPIC_PREFIX.progress" 1 \
    cleanup.policy=compact,delete >/dev/null || fail "could not create the topic $TOPIC_PREFIX.progress"
RELAY_ENV=("${EOS[@]}" OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER=600)
start_relay first >/dev/null
dead() { ! kill -0 "$(relay_pid first)" 2>/dev/null; }
dead_relay() { ! kill -0 "$(relay_pid "$1")" 2>/dev/null; }
wait_until 60 "the hook to SIGKILL the relay after a commit, before its record" dead
rc=0
wait "$(relay_pid first)" || rc=$?
[ "$rc" = 137 ] || fail "relay exited $rc, not by its hook: $(tail -5 "$WORK/relay-first.log")"
published=$(sed -n 's/.*test hook: SIGKILL before marking \([0-9]*\) acknowledged rows.*/\1/p' "$WORK/relay-first.log")
log "killed with $published rows committed to Kafka and not recorded; $(count_status PENDING) PENDING"
[ "${published:-0}" -gt 0 ] || fail "the hook left no committed row unrecorded: nothing to test"
# the first transaction's records go: the partition starts at 1 (its last record, several
# transactions later, stays)
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" delete-records "$TOPIC_PREFIX.progress" 0 1 >/dev/null ||
    fail "could not delete the progress topic's first record"

# Every PENDING row (the committed and unrecorded ones among them) is replaced: same id,
# a new event id, another aggregate type (so another topic).
psqlc "CREATE TEMP TABLE r AS SELECT id, aggregate_id, payload FROM outbox WHERE status = 'PENDING';
       DELETE FROM outbox WHERE id IN (SELECT id FROM r);
       INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE
         SELECT id, 'rewound', aggregate_id, 'Created', payload FROM r"
rewound=$(count_where "aggregate_type = 'rewound'")
log "$rewound rows replaced by new events with the same ids"
[ "$rewound" -gt 0 ] || fail "no row replaced"

RELAY_ENV=("${EOS[@]}")
start_relay second >/dev/null
wait_until 60 "every row SENT" all_sent
stop_relay second || fail "relay exited $? on SIGTERM"
grep -q "rows committed to Kafka and not seen recorded, 0 of them recorded now" "$WORK/relay-second.log" ||
    fail "the second relay recorded rows from the progress record although no listed row is there any more: $(grep 'exactly-once' "$WORK/relay-second.log" | tail -3)"
CHECK_WHERE="aggregate_type = 'rewound'" check "$TOPIC_PREFIX.rewound" --exact --transactional ||
    fail "a new row with a listed id was recorded without being published (or went twice)"
log "the $rewound new rows were all published once; none taken for a listed row"

# Relays of one table in both modes are refused: one without OUTBOX_EXACTLY_ONCE started
# beside one with it exits at its first lease scan, naming the setting, holding nothing.
RELAY_ENV=("${EOS[@]}")
start_relay eo >/dev/null
wait_until 30 "the exactly-once relay to hold the table" metric_is eo outbox_lease_partitions_held 64
RELAY_ENV=(OUTBOX_EXACTLY_ONCE=0)
start_relay plain >/dev/null
rc=0
wait_until 30 "the relay in the other mode to exit" dead_relay plain
wait "$(relay_pid plain)" || rc=$?
[ "$rc" = 2 ] && grep -q "OUTBOX_EXACTLY_ONCE=1 and this one with 0" "$WORK/relay-plain.log" ||
    fail "a relay without exactly-once beside one with it exited $rc: $(grep -i 'lease' "$WORK/relay-plain.log" | tail -2)"
grep -q "acquired" "$WORK/relay-plain.log" && fail "the relay in the other mode took lease partitions"
metric_is eo outbox_lease_partitions_held 64 || fail "the exactly-once relay lost the table to the other mode's relay"
stop_relay eo || fail "relay eo exited $? on SIGTERM"
log "ok: mixed modes refused; the $rewound new rows published once"
