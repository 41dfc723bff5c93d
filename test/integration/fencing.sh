#!/usr/bin/env bash
# Fencing of a frozen relay, judged from Kafka alone. Two relays (lease timeout 4 s) share
# the table while rows are written; relay a is frozen with SIGSTOP for 12 s (its kernel
# still answers TCP keepalives, so only the server's idle_session_timeout notices), relay b
# must take over a's partitions within the lease timeout, and a, resumed with SIGCONT,
# must not publish any partition b took: every message carries the lease partition and the
# token of the acquisition that published it, and outbox-check fails on a first delivery
# whose token is older than one already seen in its Kafka partition (what a's producer
# still sent as it woke up may only be a duplicate of an event already delivered: counted
# as stale_duplicates). Nothing lost, per-key order kept, a rejoins.
# Relay a reaches Kafka through the project's fault proxy, which holds every request a sends
# for 8 s before it reaches the broker (a slow network): when a is frozen, Produce requests
# it already sent are on their way, out of its reach - no purge can call them back. They
# reach Kafka after b has taken over and published those rows again, and must be counted
# as stale duplicates, never as first deliveries. (Messages a had only queued when frozen
# are purged when it wakes and sees its lease lost - seen once as 56 messages "Purged in
# queue": that race is why the delay is on requests already sent.) Relay b and the check
# talk to the broker directly. Every message must carry the lease header. In keep mode, a's
# marks of those late acknowledgements are refused in SQL and counted.
# With RabbitMQ (fencing_rabbitmq) the same, judged from the queue (amqp-check): relay a
# reaches the node through the proxy in raw mode, which holds every byte a sends for 8 s;
# what a published before the freeze lands in the queue after b has published those rows
# again, each message counted a stale duplicate by its outbox_lease header, never a first
# delivery. (a's confirms for them come after a has lost its leases: not recorded.)
. "$(dirname "$0")/lib.sh"
if [ "$SINK" = rabbitmq ]; then
    proxied_rabbitmq
else
    proxied_kafka
fi
setup_db
T=4000
relay() { # NAME through|direct
    local saved=$BOOTSTRAP saved_amqp=${AMQP_URL:-}
    if [ "$2" = through ]; then
        [ "$SINK" = rabbitmq ] && AMQP_URL=$PROXIED_AMQP_URL
    else
        [ "$SINK" = rabbitmq ] || BOOTSTRAP=$DIRECT_BOOTSTRAP
    fi
    RELAY_ENV=(OUTBOX_RELAY_NAME="$1" OUTBOX_LEASE_TIMEOUT_MS=$T OUTBOX_BATCH_SIZE=200)
    start_relay "$1" >/dev/null
    BOOTSTRAP=$saved
    AMQP_URL=$saved_amqp
}
held() { metric "$1" outbox_lease_partitions_held; }
relay a through
relay b direct
[ "$SINK" = rabbitmq ] || BOOTSTRAP=$DIRECT_BOOTSTRAP
balanced() { [ "$(held a)" -ge 28 ] && [ "$(held b)" -ge 28 ]; }
wait_until 30 "partitions balanced over 2 relays" balanced
log "balanced: a $(held a), b $(held b) partitions"

# rows keep coming, 200 every 0.1 s over 500 keys, until told to stop (or the test ends)
psqlc "CREATE TABLE writing (go bool)"
psqlc "INSERT INTO writing VALUES (true)"
test_pid=$$
( while kill -0 "$test_pid" 2>/dev/null && [ "$(psqlc "SELECT go FROM writing")" = t ]; do
      psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', 'k' || (g % 500), 'Updated', jsonb_build_object('g', g, 'pad', repeat('x', 500))
             FROM generate_series(1, 200) g"
      sleep 0.1
  done ) &
wp=$!
wait_until 30 "both relays publishing" rows_at_least 3000 "status = 'SENT'"

proxy delay_requests 8000
a_queued() { metric_at_least a outbox_inflight_rows 500; }
wait_until 4 "a has rows in flight to the slow network" a_queued
a_pid=$(relay_pid a)
inflight_a=$(metric a outbox_inflight_rows)
stopped_at=$(psqlc "SELECT clock_timestamp()")
kill -STOP "$a_pid"
log "relay a had $inflight_a rows in flight (claimed, not acknowledged) when frozen"
log "froze relay a (pid $a_pid) holding $(held b) / 64 partitions on b's side"
wait_until 15 "b holds all 64 partitions" metric_is b outbox_lease_partitions_held 64
took=$(psqlc "SELECT round(extract(epoch FROM max(publish_from) - '$stopped_at'::timestamptz)::numeric, 2)
              FROM outbox_lease_log WHERE event = 'acquired' AND relay LIKE 'b/%' AND at > '$stopped_at'")
[ -n "$took" ] || fail "no acquisition by b logged after the freeze"
log "b took over a's partitions and published them $took s after the freeze (bound: the lease timeout, $((T / 1000)) s)"
awk -v t="$took" -v b="$((T / 1000))" 'BEGIN { exit !(t <= b) }' || fail "takeover took $took s, more than the lease timeout"
sleep 8
kill -CONT "$a_pid"
proxy delay_requests 0
log "resumed relay a after $(psqlc "SELECT round(extract(epoch FROM clock_timestamp() - '$stopped_at'::timestamptz)::numeric, 1)") s"
wait_until 20 "a noticed it lost its leases" grep -q "lease: lost .*no answer from PostgreSQL\|lease: lost .*connection" "$WORK/relay-a.log"
wait_until 60 "a rejoined and holds partitions again" metric_at_least a outbox_lease_partitions_held 20
sleep 2
psqlc "UPDATE writing SET go = false"
wait "$wp" || fail "the writer loop failed"
wait_until 120 "all rows SENT" all_sent
if [ "$ON_SENT" = keep ]; then
    # a's late acknowledgements name rows of partitions b holds: a's marks may not record them
    # (nor move a watermark): the session check in SQL refuses them, and counts them
    refused=$(metric a outbox_watermark_refused_total)
    [ "$refused" -gt 0 ] || fail "keep mode: relay a recorded every late acknowledgement (no mark refused after the takeover)"
    grep -q "keep: [0-9]* acknowledged rows not recorded" "$WORK/relay-a.log" || fail "no log line for a's refused marks"
    log "keep mode: $refused acknowledgements of resumed relay a refused (b held their partitions)"
fi
stop_relay a || fail "a exited with $? on SIGTERM"
stop_relay b || fail "b exited with $? on SIGTERM"
{ grep "lease: lost" "$WORK/relay-a.log" || true; } | head -1 | sed "s/^/# a: /"
check "$TOPIC_PREFIX.order" --require-lease || fail "loss, disorder, a message without its lease or a stale relay's first delivery"
[ "$(check_field fenced)" -gt 0 ] || fail "no message carried a lease token"
[ "$(check_field stale_duplicates)" -gt 0 ] ||
    fail "none of frozen relay a's queued messages reached Kafka late: the fencing was not put to the test"
log "$(check_field stale_duplicates) messages of frozen relay a reached the broker late, each counted stale (already delivered by b)"
log "ok"
