#!/usr/bin/env bash
# A worker statement whose send fails at once (a fault point compiled into test builds: once
# 1,000 rows were published, the next statement's PQsendQueryParams fails; once 2,000 were,
# the next one's PQflush), as when the socket breaks under a send: the relay stays up,
# reconnects, and publishes the rest while writers go on. Nothing is lost, per-key order
# holds; rows may be published twice (each failure drops the session, its leases and the
# marks in flight), at most OUTBOX_MAX_INFLIGHT per failure.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (g % 50), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 3000) g"
RELAY_ENV=(OUTBOX_TESTHOOK_SEND_FAIL_AFTER=1000 OUTBOX_TESTHOOK_FLUSH_FAIL_AFTER=2000
    OUTBOX_BATCH_SIZE=200 OUTBOX_MAX_INFLIGHT=600)
start_relay main >/dev/null
writers 2 500 50 &
wpid=$!

# relay_up_and CONDITION...: the relay is running (else the test fails at once) and CONDITION holds
relay_up_and() {
    kill -0 "$(relay_pid main)" 2>/dev/null || fail "the relay exited after a failed send"
    "$@"
}
wait_until 60 "the send failed" relay_up_and grep -q "test hook: the send of the next worker statement" "$WORK/relay-main.log"
wait_until 60 "the flush failed" relay_up_and grep -q "test hook: the flush of the next worker statement" "$WORK/relay-main.log"
wait "$wpid" || fail "writers failed"
wait_until 120 "every row SENT after the failed sends" relay_up_and all_sent
grep -q "pg worker: connection lost: test hook: PQsendQueryParams failed" "$WORK/relay-main.log" ||
    fail "the failed send did not drop the worker connection"
grep -q "pg worker: connection lost: test hook: PQflush failed" "$WORK/relay-main.log" ||
    fail "the failed flush did not drop the worker connection"
reconnects=$(metric main outbox_postgres_reconnects_total)
[ "$reconnects" -ge 2 ] || fail "outbox_postgres_reconnects_total is $reconnects after two failed sends"
log "$(grep -o 'test hook: the [a-z]* of the next worker statement ([^)]*)' "$WORK/relay-main.log" | paste -sd ';')"
stop_relay main || fail "the relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder after failed sends"
dups=$(check_field duplicates)
[ "$dups" -le 1200 ] || fail "$dups duplicates: more than OUTBOX_MAX_INFLIGHT (600) per failed send"
log "ok: $(count_status SENT) rows SENT, none lost, $dups published twice; $reconnects reconnects"
