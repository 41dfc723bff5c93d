#!/usr/bin/env bash
# A topic-level error (TOPIC_AUTHORIZATION_FAILED on Produce, from librdkafka's mock
# cluster: the denied topic's partitions lead on broker 1, which fails its Produce
# requests) pauses only that topic: its rows stay PENDING, nothing is parked, the other
# topic flows, and it resumes by itself once the cause is gone. An outage never counts
# attempts: with OUTBOX_MAX_ATTEMPTS=1 (one counted failure parks a row) the denied topic
# goes through at least two pause cycles, and its rows keep attempts 0.
. "$(dirname "$0")/lib.sh"
setup_db
denied="$TOPIC_PREFIX.payment"
fine="$TOPIC_PREFIX.order"
start_mock --brokers 2 --topic "$denied:6" --topic "$fine:6"
for p in 0 1 2 3 4 5; do
    mock leader "$denied" $p 1
    mock leader "$fine" $p 2
done
mock broker_errors 1 2000 TOPIC_AUTHORIZATION_FAILED
RELAY_ENV=(OUTBOX_TOPIC_PAUSE_MS=2000 OUTBOX_MAX_ATTEMPTS=1)
start_relay main >/dev/null
writers 2 200 40 payment
writers 2 200 40 order
order_sent() { [ "$(psqlc "SELECT count(*) FROM outbox WHERE aggregate_type = 'order' AND status <> 'SENT'")" = 0 ]; }
wait_until 60 "the healthy topic drained" order_sent
pause_cycles() { [ "$(grep -c "relay: topic $denied paused" "$WORK/relay-$1.log")" -ge 2 ]; }
wait_until 30 "two pause cycles of $denied (paused, resumed, paused again)" pause_cycles main
grep -q "relay: topic $denied resumes" "$WORK/relay-main.log" || fail "the paused topic was never tried again"
attempted=$(psqlc "SELECT count(*) FROM outbox WHERE attempts > 0")
[ "$attempted" = 0 ] || fail "$attempted rows had attempts counted for a topic-level error"
pending=$(psqlc "SELECT count(*) FROM outbox WHERE aggregate_type = 'payment' AND status = 'PENDING'")
log "with $denied denied: $pending payment rows PENDING, $(count_status FAILED) FAILED"
[ "$pending" = 400 ] || fail "expected all 400 payment rows PENDING, got $pending"
[ "$(count_status FAILED)" = 0 ] || fail "a topic-level error parked rows"
grep -q "topic $denied paused" "$WORK/relay-main.log" || fail "no log line names the paused topic"
wait_until 10 "outbox_topic_paused shows $denied" metric_is main "outbox_topic_paused{topic=\"$denied\"}" 1
# the cause goes away: the denied topic's partitions move to broker 2, which allows them
for p in 0 1 2 3 4 5; do mock leader "$denied" $p 2; done
wait_until 60 "the paused topic resumed and drained" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$denied,$fine" || fail "loss or disorder around a paused topic"

# The same with UNKNOWN_TOPIC_OR_PART (the topic's partitions vanish from broker 1).
for p in 0 1 2 3 4 5; do mock leader "$denied" $p 1; done
mock broker_errors 1 2000 UNKNOWN_TOPIC_OR_PART
start_relay again >/dev/null
writers 2 100 40 payment
writers 2 100 40 order
wait_until 60 "the healthy topic drained again" order_sent
wait_until 30 "two pause cycles of $denied (unknown topic)" pause_cycles again
[ "$(count_status FAILED)" = 0 ] || fail "an unknown-topic error parked rows"
[ "$(psqlc "SELECT count(*) FROM outbox WHERE attempts > 0")" = 0 ] || fail "an unknown-topic error counted attempts"
pending=$(psqlc "SELECT count(*) FROM outbox WHERE aggregate_type = 'payment' AND status = 'PENDING'")
log "with UNKNOWN_TOPIC_OR_PART: $pending payment rows wait, 0 parked"
[ "$pending" = 200 ] || fail "expected the 200 new payment rows to wait, got $pending"
for p in 0 1 2 3 4 5; do mock leader "$denied" $p 2; done
wait_until 60 "the unknown topic resumed and drained" all_sent
stop_relay again || fail "relay exited with $? on SIGTERM"
check "$denied,$fine" || fail "loss or disorder around an unknown topic"
mock quit
log "ok"
