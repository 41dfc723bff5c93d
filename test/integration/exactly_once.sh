#!/usr/bin/env bash
# Exactly-once into Kafka (OUTBOX_EXACTLY_ONCE=1) under writers, in mark mode (as
# exactly_once_keep in keep mode, as exactly_once_debezium on Debezium's outbox table): the
# relay is SIGKILLed five times at each of three points, and started again each time:
# - after a transaction's messages were produced and acknowledged, before its commit
#   (OUTBOX_TESTHOOK_KILL_BEFORE_COMMIT_AFTER): the next relay's fence aborts it and the
#   rows go again;
# - after the commit, before its rows were recorded (OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER):
#   the next relay finds them in the progress record and records them without publishing;
# - while recording them (OUTBOX_TESTHOOK_KILL_AFTER_MARK_SENT_AFTER): the record may or
#   may not have committed.
# Then a relay is frozen (SIGSTOP) in the middle of its work, another takes the table over,
# and the frozen one is resumed: Kafka fences it.
# A read_committed consumer sees each row exactly once (duplicates 0), in per-key order; a
# read_uncommitted one sees the aborted transactions' messages too (the faults landed); the
# relays that took over after the after-commit kills recorded rows from the progress record.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 40) g"
cols=$OUTBOX_COLS id=
[ "$LAYOUT" = debezium ] && cols="id, $OUTBOX_COLS" id="gen_random_uuid(), " # (Debezium's table: no default)
cat >"$WORK/writer.sql" <<SQL
\set k random(1, 40)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k;
INSERT INTO outbox ($cols) VALUES (${id}'order', 'k' || :k, 'Updated', jsonb_build_object('key', 'k' || :k));
COMMIT;
SQL
# writers at about 250 rows/s for as long as the kills take (stopped below)
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 4 -j 2 -R 250 -T 300 \
    -f "$WORK/writer.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
writer=$!
RELAY_PIDS+=("$writer")

EOS=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_LEASE_TIMEOUT_MS=3000 OUTBOX_BATCH_SIZE=200
     OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX" OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")
dead() { ! kill -0 "$(relay_pid "$1")" 2>/dev/null; }
run=0
for point in KILL_BEFORE_COMMIT_AFTER KILL_BEFORE_MARK_AFTER KILL_AFTER_MARK_SENT_AFTER; do
    for i in 1 2 3 4 5; do
        run=$((run + 1))
        RELAY_ENV=("${EOS[@]}" "OUTBOX_TESTHOOK_$point=$((100 + RANDOM % 300))")
        start_relay "r$run" >/dev/null
        wait_until 90 "relay r$run to be SIGKILLed by its $point hook" dead "r$run"
        rc=0
        wait "$(relay_pid "r$run")" || rc=$?
        [ "$rc" = 137 ] || fail "relay r$run ($point) exited $rc, not by its hook: $(tail -5 "$WORK/relay-r$run.log")"
        grep -q "test hook: SIGKILL" "$WORK/relay-r$run.log" || fail "relay r$run: its $point hook did not fire"
    done
    log "$point: fired 5 times; $(count_status SENT) SENT, $(count_status PENDING) PENDING so far"
done

# A frozen relay: stopped with transactions open, the table taken over by another relay
# (after the lease timeout), then resumed. Kafka fences the frozen one's producer: nothing
# it had open commits, and it records nothing more.
RELAY_ENV=("${EOS[@]}")
start_relay frozen >/dev/null
wait_until 60 "relay frozen to commit transactions" metric_at_least frozen outbox_transactions_committed_total 3
kill -STOP "$(relay_pid frozen)"
start_relay taker >/dev/null
wait_until 60 "relay taker to take the table over and commit" metric_at_least taker outbox_transactions_committed_total 3
kill -CONT "$(relay_pid frozen)"
wait_until 60 "the resumed relay to stop publishing (lease lost or producer fenced)" \
    grep -qE "lease: lost|fenced|exactly-once: .*(fenc|epoch)" "$WORK/relay-frozen.log"
stop_relay frozen || fail "the resumed relay exited $? on SIGTERM"

kill -TERM "$writer" 2>/dev/null || true # (a background job ignores SIGINT)
wait "$writer" 2>/dev/null || true
total=$(count_where true)
wait_until 120 "all $total rows SENT" all_sent
committed=$(metric taker outbox_transactions_committed_total)
stop_relay taker || fail "relay taker exited $? on SIGTERM"

check "$TOPIC_PREFIX.order" --exact --transactional ||
    fail "read_committed: a row lost, delivered twice or out of order under exactly-once"
cp "$WORK/check.out" "$WORK/check-committed.out"
recovered=0
for f in "$WORK"/relay-*.log; do
    n=$(sed -n 's/.*, \([0-9]*\) of them recorded now.*/\1/p' "$f" | awk '{s += $1} END {print s + 0}')
    recovered=$((recovered + n))
done
log "$total rows; rows recorded from progress records on taking over: $recovered; taker committed $committed transactions"
[ "$recovered" -gt 0 ] || fail "no relay recorded a row from the progress record: the after-commit kills tested nothing"

check "$TOPIC_PREFIX.order" --transactional --read-uncommitted || true
aborted=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
log "read_uncommitted: $aborted messages of aborted transactions"
[ "${aborted:-0}" -gt 0 ] || fail "read_uncommitted shows no aborted message: the before-commit kills tested nothing"
log "ok: exactly once for read_committed across 15 kills and a frozen relay"
