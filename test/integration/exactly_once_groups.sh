#!/usr/bin/env bash
# Exactly-once with OUTBOX_TRANSACTION_GROUPS=4: the table's lease partitions form four
# transaction groups of 16, each with a producer, a transactional.id (.g0 .. .g3) and a
# progress record of its own, so that several relays publish the table at once.
# - Relay b runs throughout. Relays h1 .. h4 start one after another: b hands groups back to
#   each (closing their producers), the newcomer fences them and reads their records, and
#   publishes them beside b until its hook SIGKILLs it (h1, h3: after a commit, before the
#   rows were recorded; h2, h4: before a commit). b takes the dead relay's groups over,
#   recording what their records list.
# - A relay with another OUTBOX_TRANSACTION_GROUPS beside them exits, naming the setting.
# A read_committed consumer sees each row exactly once (duplicates 0) in per-key order; a
# read_uncommitted one sees the aborted transactions; rows were recorded from the records.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 40) g"
cat >"$WORK/writer.sql" <<SQL
\set k random(1, 40)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k;
INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k' || :k, 'Updated', jsonb_build_object('key', 'k' || :k));
COMMIT;
SQL
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 4 -j 2 -R 250 -T 300 \
    -f "$WORK/writer.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
writer=$!
RELAY_PIDS+=("$writer")

EOS=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTION_GROUPS=4 OUTBOX_LEASE_TIMEOUT_MS=3000 OUTBOX_BATCH_SIZE=200
     OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX" OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")
RELAY_ENV=("${EOS[@]}")
start_relay b >/dev/null
wait_until 60 "relay b to hold all four groups and commit" metric_at_least b outbox_transactions_committed_total 3
dead() { ! kill -0 "$(relay_pid "$1")" 2>/dev/null; }
# groups held whole: a relay's partitions are whole groups of 16 (from its lease log lines)
held() { metric "$1" outbox_lease_partitions_held; }
points=(KILL_BEFORE_MARK_AFTER KILL_BEFORE_COMMIT_AFTER KILL_BEFORE_MARK_AFTER KILL_BEFORE_COMMIT_AFTER)
for i in 1 2 3 4; do
    point=${points[$((i - 1))]}
    RELAY_ENV=("${EOS[@]}" "OUTBOX_TESTHOOK_$point=$((300 + RANDOM % 300))")
    start_relay "h$i" >/dev/null
    wait_until 60 "relay h$i to be handed groups and commit" metric_at_least "h$i" outbox_transactions_committed_total 1
    both=$(metric b outbox_transactions_committed_total)
    hb=$(held b) hh=$(held "h$i")
    log "h$i publishes beside b: b holds $hb partitions, h$i $hh"
    [ $((hb % 16)) = 0 ] && [ $((hh % 16)) = 0 ] || fail "partitions held in parts of groups: b $hb, h$i $hh"
    wait_until 30 "relay b to commit beside h$i" metric_at_least b outbox_transactions_committed_total $((both + 1))
    reads=$(grep -c "progress record read in" "$WORK/relay-b.log")
    wait_until 90 "relay h$i to be SIGKILLed by its $point hook" dead "h$i"
    rc=0
    wait "$(relay_pid "h$i")" || rc=$?
    [ "$rc" = 137 ] || fail "relay h$i ($point) exited $rc, not by its hook: $(tail -5 "$WORK/relay-h$i.log")"
    # (past the grace: fenced and read, so that the next newcomer is handed open groups)
    wait_until 60 "relay b to take h$i's two groups over and read their records" \
        eval '[ "$(grep -c "progress record read in" "$WORK/relay-b.log")" -ge $((reads + 2)) ]'
done
# A group handed back closes its producer: the newcomer's fence would make it fail at its
# next use (when the group comes back), and such a fatal error makes every producer of the
# relay anew, stalling the groups that never moved.
closed=$(grep -c "handed back; its producer was closed" "$WORK/relay-b.log" || true)
fenced=$(metric b outbox_producers_fenced_total)
log "b closed the producers of $closed groups it handed back; b's producers fenced: $fenced"
[ "$fenced" = 0 ] || fail "b's producers were fenced $fenced times: a group handed back kept its producer"
[ "$closed" -ge 8 ] || fail "b closed $closed group producers on handing two groups back to each of 4 newcomers"

# another layout beside them: refused by name
RELAY_ENV=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTION_GROUPS=2 OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX"
           OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")
start_relay mixed >/dev/null
wait_until 30 "the relay with 2 groups to exit" dead mixed
rc=0
wait "$(relay_pid mixed)" || rc=$?
[ "$rc" = 2 ] || fail "the relay with another OUTBOX_TRANSACTION_GROUPS exited $rc, not 2"
grep -q "another OUTBOX_TRANSACTION_GROUPS than this one (2)" "$WORK/relay-mixed.log" ||
    fail "the refusal does not name the setting: $(tail -3 "$WORK/relay-mixed.log")"

kill -TERM "$writer" 2>/dev/null || true # (a background job ignores SIGINT)
wait "$writer" 2>/dev/null || true
total=$(count_where true)
wait_until 120 "all $total rows SENT" all_sent
stop_relay b || fail "relay b exited $? on SIGTERM"

check "$TOPIC_PREFIX.order" --exact --transactional ||
    fail "read_committed: a row lost, delivered twice or out of order with four transaction groups"
recovered=0
for f in "$WORK"/relay-*.log; do
    n=$(sed -n 's/.*, \([0-9]*\) of them recorded now.*/\1/p' "$f" | awk '{s += $1} END {print s + 0}')
    recovered=$((recovered + n))
done
log "$total rows; rows recorded from progress records on taking groups over: $recovered"
[ "$recovered" -gt 0 ] || fail "no relay recorded a row from a group's progress record: the after-commit kills tested nothing"
check "$TOPIC_PREFIX.order" --transactional --read-uncommitted || true
aborted=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
log "read_uncommitted: $aborted messages of aborted transactions"
[ "${aborted:-0}" -gt 0 ] || fail "read_uncommitted shows no aborted message: the before-commit kills tested nothing"
log "ok: four transaction groups shared by two relays at a time; exactly once across 4 kills"
