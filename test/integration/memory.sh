#!/usr/bin/env bash
# Memory has a byte bound (OUTBOX_MAX_INFLIGHT_BYTES), measured on a release build (a
# sanitizer build says nothing about RSS):
#   1. a 50 MB payload among 400 small rows: parked without its payload ever being fetched
#      (it is larger than the producer's message.max.bytes), the other keys flow, and the
#      relay's peak RSS stays under 100 MB;
#   2. Kafka unreachable and a backlog of four times the byte budget in 10 KB rows: the
#      relay claims and queues up to its budget and stops, peak RSS within the idle RSS plus
#      twice the budget (the producer's queue plus one claim being handed to it).
# The figures are printed.
. "$(dirname "$0")/lib.sh"
(cd "$RELAYTEST_SRC" && common_setup build release) >/dev/null || fail "release build failed"
RELAYTEST_RELAY_BIN=$RELAYTEST_SRC/build/outbox-relay
setup_db
peak_kb() { awk '/^VmHWM:/ { print $2 }' "/proc/$(relay_pid "$1")/status"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$(relay_pid "$1")/status"; }

# ---- 1. a 50 MB row
ins() { # n
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
           SELECT 'order', 'k' || (g % 40), 'Created', jsonb_build_object('n', g, 'pad', repeat('y', 500))
           FROM generate_series(1, $1) g"
}
ins 200
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       VALUES ('order', 'big', 'Created', jsonb_build_object('blob', repeat(md5('x'), 50 * 1024 * 1024 / 32)))"
ins 200
start_relay big >/dev/null
parked_and_flowing() {
    rows_are 1 "aggregate_id = 'big' AND status = 'FAILED'" && rows_are 0 "aggregate_id <> 'big' AND status <> 'SENT'"
}
wait_until 60 "the 50 MB row parked, the 400 others SENT" parked_and_flowing
peak=$(peak_kb big)
reason=$(psqlc "SELECT last_error FROM outbox WHERE aggregate_id = 'big'")
stop_relay big || fail "relay exited with $? on SIGTERM"
log "1. 50 MB row: parked ($reason); peak RSS $((peak / 1024)) MB"
grep -q "never fetched" <<<"$reason" || fail "the parked row's reason does not say its payload was never fetched"
[ "$peak" -lt $((100 * 1024)) ] || fail "peak RSS $((peak / 1024)) MB with a 50 MB row (want < 100 MB)"
CHECK_WHERE="aggregate_id <> 'big'" check "$TOPIC_PREFIX.order" || fail "loss or disorder around the 50 MB row"

# ---- 2. Kafka unreachable, a backlog of 4x the budget in 10 KB rows
budget=$((8 * 1024 * 1024))
psqlc "DELETE FROM outbox"
RELAY_ENV=(OUTBOX_MAX_INFLIGHT_BYTES=$budget OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1 OUTBOX_SHUTDOWN_TIMEOUT_MS=1000)
start_relay idle >/dev/null
wait_until 20 "idle relay up" curl -sf "http://127.0.0.1:$(http_port idle)/metrics" -o /dev/null
sleep 3
idle=$(peak_kb idle)
stop_relay idle || fail "relay idle exited with $? on SIGTERM (want 0)"
rows=$((4 * budget / 10240))
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 100), 'Created', jsonb_build_object('n', g, 'pad', repeat(md5(g::text), 10200 / 32))
       FROM generate_series(1, $rows) g"
start_relay down >/dev/null
inflight_stable() {
    local a b
    a=$(metric down outbox_inflight_rows)
    sleep 2
    b=$(metric down outbox_inflight_rows)
    [ "$a" -gt 0 ] && [ "$a" = "$b" ]
}
wait_until 60 "the relay fills its budget and stops claiming" inflight_stable
inflight=$(metric down outbox_inflight_rows)
peak=$(peak_kb down)
now=$(rss_kb down)
stop_relay down || fail "relay down exited with $? on SIGTERM (want 0)"
log "2. Kafka down, $rows rows of 10 KB ($((rows * 10 / 1024)) MB) pending, budget $((budget / 1048576)) MB:" \
    "$inflight rows in flight ($((inflight * 10 / 1024)) MB), idle RSS $((idle / 1024)) MB, peak $((peak / 1024)) MB, now $((now / 1024)) MB"
[ "$inflight" -lt "$rows" ] || fail "the whole backlog was claimed: no byte bound"
[ $((inflight * 10240)) -le $((budget + 20 * 10240)) ] || fail "$inflight rows in flight exceed the byte budget"
[ "$peak" -le $((idle + 2 * budget / 1024 + 8 * 1024)) ] ||
    fail "peak RSS $((peak / 1024)) MB above idle $((idle / 1024)) MB + twice the budget + 8 MB"
log "ok"
