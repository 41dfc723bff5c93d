#!/usr/bin/env bash
# Crash after Kafka acknowledged rows and before they were marked (a fault point compiled
# into test builds SIGKILLs the relay right before a mark): after a restart the rows are
# published again and marked; nothing is lost. The duplicates stay within the documented
# bounds: at most OUTBOX_MAX_INFLIGHT, and at most outbox_possible_duplicates_total (the
# restarted relay's estimate) plus one claim.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (g % 50), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 3000) g"
RELAY_ENV=(OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER=1000 OUTBOX_BATCH_SIZE=200 OUTBOX_MAX_INFLIGHT=600)
start_relay crash >/dev/null
rc=0
# bounded: a relay whose fault point never fires would otherwise hold the test until meson's
# timeout (seen with mutant 15, where rows count as acknowledged once produced)
crashed() { ! kill -0 "$(relay_pid crash)" 2>/dev/null; }
wait_until 90 "the fault point to SIGKILL the relay" crashed
wait "$(relay_pid crash)" || rc=$?
[ "$rc" = 137 ] || fail "expected the fault point to SIGKILL the relay (137), got $rc"
grep -q "test hook: SIGKILL before marking" "$WORK/relay-crash.log" || fail "fault point did not fire"
pending=$(count_status PENDING)
log "after the crash: $(count_status SENT) SENT, $pending PENDING"
[ "$pending" -gt 0 ] || fail "nothing left PENDING: the crash happened too late to test anything"

RELAY_ENV=()
start_relay after >/dev/null
wait_until 60 "all rows SENT after restart" all_sent
possible=$(metric after outbox_possible_duplicates_total)
stop_relay after || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --max-duplicates 600 || fail "loss, disorder or more duplicates than OUTBOX_MAX_INFLIGHT after crash-before-mark"
dups=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
[ "$dups" -gt 0 ] || fail "expected republished rows (duplicates > 0) after crash-before-mark"
log "$dups rows published twice; the restarted relay estimated $possible (outbox_possible_duplicates_total)"
[ "$dups" -le 600 ] || fail "$dups duplicates: more than OUTBOX_MAX_INFLIGHT (600)"
# The estimate counts PENDING rows up to the highest id a mark recorded as claimed; rows
# claimed after the last mark are beyond it. Those are the acknowledged rows the crash
# relay was about to mark (its hook names them) and at most one claim still in flight. (The
# bound was "the estimate plus one claim" until CI failed it: "SIGKILL before marking 400
# acknowledged rows" - two claims' acknowledgements arrived before a mark recorded either
# claim - 400 duplicates, estimate 0, at af6773c. Reproduced with two busy loops on the
# machine's two cores: 3 of 6 runs of crash_before_mark_debezium gave 400 duplicates against
# an estimate of 0; 1 of 6 with OUTBOX_MARK_DELAY_MS=0, so not the mark delay's doing.)
unmarked=$(sed -n 's/.*test hook: SIGKILL before marking \([0-9]*\) acknowledged rows.*/\1/p' "$WORK/relay-crash.log" | head -1)
[ -n "$unmarked" ] || fail "the fault point's line does not say how many acknowledged rows it left unmarked"
[ "$dups" -le $((possible + unmarked + 200)) ] ||
    fail "$dups duplicates: more than the estimate $possible plus the $unmarked rows acknowledged and not marked plus one claim (200)"
[ "$possible" -le 600 ] || fail "estimate $possible is above OUTBOX_MAX_INFLIGHT (600)"
# outbox-relay audit counts the same duplicates and loses nothing (delete mode keeps no SENT
# rows to compare: there the audit refuses, naming the setting)
relay_env
if [ "$SINK" = rabbitmq ]; then # a queue cannot be read back: the audit refuses, naming the sink
    rc=0
    env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit --json >/dev/null 2>"$WORK/audit.log" || rc=$?
    [ "$rc" = 2 ] && grep -q "OUTBOX_SINK=rabbitmq" "$WORK/audit.log" ||
        fail "audit with the RabbitMQ sink exited $rc: $(cat "$WORK/audit.log")"
elif [ "$ON_SENT" = delete ]; then
    rc=0
    env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit --json >/dev/null 2>"$WORK/audit.log" || rc=$?
    [ "$rc" = 2 ] && grep -q "OUTBOX_ON_SENT=delete keeps no SENT rows" "$WORK/audit.log" ||
        fail "audit in delete mode exited $rc: $(cat "$WORK/audit.log")"
else
    audit=$(env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit --json 2>"$WORK/audit.log") ||
        fail "audit exited $? after crash-before-mark: $(tail -3 "$WORK/audit.log")"
    jq -e --argjson d "$dups" '.committed == 3000 and .delivered == 3000 and .lost == 0 and .duplicates == $d
           and .order_violations == 0' <<<"$audit" >/dev/null || fail "audit after crash-before-mark ($dups duplicates): $audit"
    log "audit: $(jq -c '{committed, delivered, lost, duplicates, order_violations}' <<<"$audit")"
fi
log "ok: none lost"
