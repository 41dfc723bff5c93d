#!/usr/bin/env bash
# A real Kafka broker behind the project's fault proxy (test/tools/fault_proxy.c): while a
# committed backlog drains and writers commit, the proxy resets each connection 0.3-1.5 s
# after it opens (at its first Produce request in flight from then), holds each response up
# to 40 ms, and swallows one Produce response in 40 (the request then times out: the client
# side of that is socket.timeout.ms, lowered to 3 s so that costs seconds, not 60 -
# request.timeout.ms is the broker's ack timeout and does not end a request whose response
# was lost).
# (Until 2026-12 the proxy reset on one clock, every 0.3-1.5 s, the first connection with a
# Produce in flight. CI failed broker_faults_keep: 8186 of the 10000 backlog rows SENT, then
# nothing for 2 minutes. Reproduced with a 40000-row backlog, both modes: librdkafka doubles
# its reconnect backoff on every connect made within 10 s of the last, so after a few resets
# it waited 7.5-10 s to reconnect, found a reset already due, and had each new connection cut
# at its first Produce ("after 2ms in state UP"): no row could get through, in any mode, and
# whether the test passed depended on how many rows drained in the first seconds. A swallowed
# response also stalled the relay 60 s, socket.timeout.ms's default.) The relay runs with librdkafka's default in-flight
# requests per connection (5, with idempotence). Proof from Kafka alone: nothing lost, first
# deliveries in per-key order, the faults really cut responses of Produce requests in flight,
# and duplicates 0 - or, if the relay had to recreate its producer (a new producer id, whose
# retries the broker cannot recognise), at most OUTBOX_MAX_INFLIGHT per recreation, counted
# from the broker's side: the producer ids in the topic's log segments.
# This test carries the guarantees' "no loss" and "per-key order across failed deliveries" at the
# default in-flight setting; mock_faults cannot (docs/RELIABILITY.md: the mock cluster does
# not check idempotent sequence numbers).
. "$(dirname "$0")/lib.sh"
proxied_kafka
setup_db
topic="$TOPIC_PREFIX.order"
window=2000

psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 300) g"
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (1 + g % 300), 'Created', jsonb_build_object('n', g, 'pad', repeat('x', 300))
       FROM generate_series(1, 10000) g"
log "a committed backlog of 10000 rows"

proxy delay 40
proxy drop 40
proxy reset 300 1500
# reconnect.backoff.max.ms 1 s (librdkafka's default 10 s): the client comes back within a
# second of each reset, so the 25 s of faults cut about 15 connections, not 8
RELAY_ENV=(OUTBOX_MAX_INFLIGHT=$window OUTBOX_KAFKA_REQUEST_TIMEOUT_MS=3000 OUTBOX_KAFKA_SOCKET_TIMEOUT_MS=3000
    OUTBOX_KAFKA_RECONNECT_BACKOFF_MAX_MS=1000 OUTBOX_BATCH_SIZE=500)
start_relay main >/dev/null
# rows in flight, sampled every 0.2 s: never more than OUTBOX_MAX_INFLIGHT (docs/RELIABILITY.md, Bounded memory)
sample_inflight() {
    while [ ! -e "$WORK/stop-sampling" ]; do
        metric main outbox_inflight_rows >>"$WORK/inflight.samples" 2>/dev/null || true
        sleep 0.2
    done
}
sample_inflight &
sampler=$!
RELAY_PIDS+=("$sampler") # killed when the test ends, whatever its outcome
steady_writers() {
    while [ ! -e "$WORK/stop-writers" ]; do
        writers 4 100 300
        sleep 0.2
    done
}
steady_writers &
writer=$!
RELAY_PIDS+=("$writer")
sleep 25
touch "$WORK/stop-writers"
wait "$writer" || fail "writers failed"
log "during the faults: $(count_status SENT) of $(count_where true) rows SENT"
wait_until 120 "the backlog drained through the faults" rows_at_least 10000 "status = 'SENT'"
cut_during=$(proxy_stat cut)
touch "$WORK/stop-sampling"
wait "$sampler"
max_inflight=$(sort -n "$WORK/inflight.samples" | tail -1)
log "rows in flight: at most $max_inflight in $(wc -l <"$WORK/inflight.samples") samples (OUTBOX_MAX_INFLIGHT $window)"
[ "$(wc -l <"$WORK/inflight.samples")" -ge 20 ] || fail "too few samples of outbox_inflight_rows"
[ "$max_inflight" -le "$window" ] || fail "$max_inflight rows in flight, more than OUTBOX_MAX_INFLIGHT=$window"
[ "$max_inflight" -ge $((window / 2)) ] || fail "at most $max_inflight rows in flight: the window was never filled, so its bound was not tested"
log "proxy: $(grep '^STATS' "$WORK/proxy.out" | tail -1)"
proxy reset 0 0
proxy drop 0
proxy delay 0
wait_until 120 "everything SENT once the faults stop" all_sent
# rows whose delivery Kafka's client reported without an offset (a swallowed response's
# request acknowledged implicitly by the next one's success): the relay publishes them
# again (implicit_ack), and here, where the broker did write them, each is in the log twice.
# Only these widen the bound: failed deliveries that may have been written do not (a
# message timeout that left its row in the log is what mutant 23 plants).
unconfirmed=$(metric main outbox_unconfirmed_deliveries_total)
stop_relay main || fail "relay exited with $? on SIGTERM"

[ "${cut_during:-0}" -gt 0 ] || fail "the proxy cut no response of a Produce request in flight: the faults did not land"
[ "$(proxy_stat resets)" -gt 0 ] || fail "no connection was reset with a Produce request in flight"
[ "$(proxy_stat dropped)" -gt 0 ] || fail "no Produce response was swallowed"
# The producers that wrote the topic, from the broker's log segments (not from the relay's
# own account): each producer id after the first is a producer whose retries the broker
# could not match with what an earlier one wrote, and may repeat up to a window. Only the
# relay's own recreations may make one: a producer id or epoch it did not make is librdkafka
# resetting the idempotent producer by itself (after a message timeout, which the relay
# never sets: mutant 23), and that repeats messages beyond any bound the relay can state.
producers=$(bash "$RELAYTEST_SRC/test/env/kafka.sh" producers "$PK" "$topic") ||
    fail "cannot read the topic's producers from its log segments"
sessions=$(cut -d: -f1 <<<"$producers" | sort -u | grep -c . || true)
[ "$sessions" -gt 0 ] || fail "no producer id in the topic's log segments"
recreated_log=$(grep -c "kafka: producer recreated" "$WORK/relay-main.log" || true)
log "Produce requests whose response was cut while in flight: $cut_during; producer ids in the log: $sessions (id:epoch $(paste -sd' ' <<<"$producers")); the relay logged $recreated_log recreations"
[ "$sessions" -le $((recreated_log + 1)) ] && ! grep -qv ':0$' <<<"$producers" ||
    fail "producers the relay did not make wrote the topic: $sessions producer ids (id:epoch $(paste -sd' ' <<<"$producers")), the relay made $((recreated_log + 1))"
bound=$(((sessions - 1) * window + unconfirmed))
check "$topic" --max-duplicates "$bound" ||
    fail "loss, per-key disorder or too many duplicates behind the fault proxy (producers in the log: $sessions, unconfirmed deliveries: $unconfirmed)"
log "duplicates: $(check_field duplicates) (bound $bound: $((sessions - 1)) producers after the first x $window, $unconfirmed unconfirmed deliveries)"
log "ok"
