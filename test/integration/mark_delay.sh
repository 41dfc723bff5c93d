#!/usr/bin/env bash
# OUTBOX_MARK_DELAY_MS: acknowledged rows wait up to the delay for more before one statement
# records them (mark, delete, keep's record), and a SIGTERM records what waits at once.
# 1. With the delay at 1 s, twelve rows committed one at a time 50 ms apart from one session
#    (each its own claim and acknowledgement) are recorded by at most 3 statements; with the
#    delay at 0 (the same rows again), by more than 3. Nothing is published twice or lost.
# 2. A row acknowledged right before SIGTERM is recorded by the drain at once, not after the
#    delay: with OUTBOX_SHUTDOWN_TIMEOUT_MS (300) below the delay (1 s), a drain that waited
#    for the delay would time out and leave the row PENDING.
. "$(dirname "$0")/lib.sh"
setup_db
psqlc "INSERT INTO aggregate (id) VALUES ('k1') ON CONFLICT DO NOTHING"
one_by_one() { # N rows, each committed alone, 50 ms apart, from one session
    local args=() i
    for i in $(seq 1 "$1"); do
        args+=(-c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k1', 'Created', jsonb_build_object('i', $i))"
            -c "SELECT pg_sleep(0.05)")
    done
    "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" "${args[@]}" >/dev/null || fail "inserting rows one by one failed"
}
# the relay's debug line for each statement that recorded rows
records() { grep -c "mark: [0-9]* rows SENT" "$WORK/relay-$1.log" || true; }

RELAY_ENV=(OUTBOX_MARK_DELAY_MS=1000 OUTBOX_LOG_LEVEL=debug)
start_relay slow >/dev/null
wait_until 30 "the relay holds its lease partitions" metric_is slow outbox_lease_partitions_held 64
one_by_one 12
wait_until 30 "12 rows recorded" rows_at_least 12 "status = 'SENT'"
claims=$(metric slow outbox_claims_total)
slow=$(records slow)
[ "$claims" -ge 4 ] || fail "only $claims claims for 12 rows committed one at a time: the rows did not come in small groups"

stop_relay slow || fail "relay exited with $? on SIGTERM"
log "delay 1000 ms: 12 rows recorded by $slow statements ($claims claims)"
[ "$slow" -ge 1 ] && [ "$slow" -le 3 ] || fail "12 rows committed over about 0.6 s were recorded by $slow statements (want 1-3 with OUTBOX_MARK_DELAY_MS=1000)"

RELAY_ENV=(OUTBOX_MARK_DELAY_MS=0 OUTBOX_LOG_LEVEL=debug)
start_relay quick >/dev/null
wait_until 30 "the relay holds its lease partitions" metric_is quick outbox_lease_partitions_held 64
one_by_one 12
wait_until 30 "24 rows recorded" rows_at_least 24 "status = 'SENT'"
quick=$(records quick)
stop_relay quick || fail "relay exited with $? on SIGTERM"
log "delay 0: 12 rows recorded by $quick statements"
[ "$quick" -gt 3 ] || fail "with OUTBOX_MARK_DELAY_MS=0, 12 rows committed 50 ms apart were recorded by $quick statements: the comparison above proves nothing"

# 2. SIGTERM while an acknowledged row waits for the delay
RELAY_ENV=(OUTBOX_MARK_DELAY_MS=1000 OUTBOX_SHUTDOWN_TIMEOUT_MS=300)
start_relay drain >/dev/null
wait_until 30 "the relay holds its lease partitions" metric_is drain outbox_lease_partitions_held 64
one_by_one 1
wait_until 10 "the row acknowledged" metric_is drain outbox_published_total 1
stop_relay drain || fail "relay exited with $? on SIGTERM"
[ "$(count_status PENDING)" = 0 ] || fail "$(count_status PENDING) rows left unrecorded by the drain at SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "Kafka does not hold each row exactly once"
log "ok"
