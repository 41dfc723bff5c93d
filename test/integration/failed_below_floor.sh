#!/usr/bin/env bash
# A failed delivery of rows the floors' proof has already passed. Such rows stay PENDING
# below the floors, so the reset must send the next claims from the bottom; claims from the
# floors would publish the later rows of their keys first, and find the failed rows only at
# a safety pass. On librdkafka's mock cluster (one broker, one partition, one request in
# flight) with 2 s of added round-trip time, rows stay in flight for seconds, long after
# the proof (a probe every 250 ms, the writers gone) passed them; then one Produce request
# fails with a permanent error (MSG_SIZE_TOO_LARGE: with the idempotent producer, a fatal
# error for every row in flight), and writers go on over the same keys.
# Result: nothing lost, each key's first deliveries in id order (outbox-check); the premise,
# asserted: when the failure reset the floors, rows in flight lay below them (the relay's
# debug line counts them). Mutant 84 (the floors left in place by a failed delivery) must
# fail it.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
start_mock --brokers 1 --topic "$topic:1"
# One Produce request in flight, as in mock_faults (whose header says why: the mock cluster
# checks no sequence numbers, and a failed request's messages would be acknowledged by the
# next one's success); it also keeps the rows queued behind the one slow request. Debug: the
# reset's line that counts the rows below the floors (the premise, checked at the end).
RELAY_ENV=(OUTBOX_BATCH_SIZE=50 OUTBOX_LOG_LEVEL=debug OUTBOX_KAFKA_MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION=1)
start_relay main >/dev/null
writers 2 100 10
wait_until 60 "the first rows SENT" all_sent

# slow acknowledgements: what is written now stays in flight for seconds (one request at a
# time, each answered 2 s after it left); the error is pushed while the writers still write,
# once the first request is out, so it fails the next request: rows queued behind the first
# one, which the proof passes while they wait
mock rtt 1 2000
writers 2 300 10 &
wp=$!
wait_until 10 "rows in flight behind the slow broker" metric_at_least main outbox_inflight_rows 1
sleep 0.3
mock errors 1 MSG_SIZE_TOO_LARGE
wait "$wp" || fail "writers failed"
wait_until 30 "a delivery failed" grep -q "delivery: row [0-9]* to .* failed" "$WORK/relay-main.log"
# later rows of the same keys, written after the failure
writers 2 100 10
mock rtt 1 0
wait_until 120 "every row SENT" all_sent

stop_relay main || fail "relay exited with $? on SIGTERM"
check "$topic" || fail "loss or per-key disorder after a failed delivery of rows below the floors"
# the premise: when the failure reset the floors, rows in flight lay below them (only a
# claim from the bottom finds those)
reset=$(grep -m1 "reset: [0-9]* rows in flight lay below the floors" "$WORK/relay-main.log") ||
    fail "no reset logged after the failed delivery"
below=$(sed -n 's/.*reset: \([0-9]*\) rows in flight lay below the floors.*/\1/p' <<<"$reset")
log "the failure reset the floors with ${below:-?} rows in flight below them"
[ -n "$below" ] && [ "$below" -gt 0 ] ||
    fail "no row in flight lay below the floors when the delivery failed: nothing tested ($reset)"
mock quit
log "ok"
