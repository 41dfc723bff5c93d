#!/usr/bin/env bash
# A failed delivery of rows the floors' proof has already passed. Such rows stay PENDING
# below the floors, so the reset must send the next claims from the bottom; claims from the
# floors would publish the later rows of their keys first, and find the failed rows only at
# a safety pass. On librdkafka's mock cluster (one broker, one partition, one request in
# flight) with 1.5 s of added round-trip time, rows stay in flight for seconds, long after
# the proof (a probe every 250 ms, the writers gone) passed them; then one Produce request
# fails with a permanent error (MSG_SIZE_TOO_LARGE: with the idempotent producer, a fatal
# error for every row in flight), and writers go on over the same keys.
# Result: nothing lost, each key's first deliveries in id order (outbox-check), and the
# first failed row was older than the proof's lag when it failed (the premise: below the
# floors). Mutant 84 (the floors left in place by a failed delivery) must fail it.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
start_mock --brokers 1 --topic "$topic:1"
RELAY_ENV=(OUTBOX_BATCH_SIZE=50 OUTBOX_LOG_LEVEL=debug OUTBOX_KAFKA_MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION=1)
start_relay main >/dev/null
writers 2 100 10
wait_until 60 "the first rows SENT" all_sent

# slow acknowledgements: what is written now stays in flight for seconds
mock rtt 1 1500
writers 2 200 10
mock errors 1 MSG_SIZE_TOO_LARGE
wait_until 30 "a delivery failed" grep -q "delivery: row [0-9]* to .* failed" "$WORK/relay-main.log"
# later rows of the same keys, written after the failure
writers 2 100 10
mock rtt 1 0
wait_until 120 "every row SENT" all_sent

line=$(grep -m1 "delivery: row [0-9]* to .* failed" "$WORK/relay-main.log")
first=$(sed 's/.*delivery: row \([0-9]*\) to .*/\1/' <<<"$line")
at=$(cut -d' ' -f1 <<<"$line")
age=$(psqlc "SELECT round(extract(epoch FROM '$at'::timestamptz - created_at) * 1000) FROM outbox_all WHERE id = $first")
log "the first failed row ($first) had waited $age ms when its delivery failed"
[ -n "$age" ] && [ "$age" -ge 1000 ] ||
    fail "the first failed row had waited ${age:-?} ms, under the 1,000 ms that put it below the floors: nothing tested"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$topic" || fail "loss or per-key disorder after a failed delivery of rows below the floors"
mock quit
log "ok"
