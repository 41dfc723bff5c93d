#!/usr/bin/env bash
# /metrics passes `promtool check metrics`; counters advance by exactly N for N rows; with
# Kafka stopped the backlog and its oldest age grow and the relay reports degraded (while
# /readyz stays ready by default); after Kafka returns the backlog drains.
. "$(dirname "$0")/lib.sh"
setup_db
start_relay main >/dev/null
port=$(http_port main)
wait_until 20 "/metrics answering" curl -sf "http://127.0.0.1:$port/metrics" -o /dev/null
curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/m0.txt"
promtool check metrics <"$WORK/m0.txt" || fail "promtool check metrics rejected /metrics"
for m in outbox_pending_rows outbox_oldest_pending_age_seconds outbox_failed_rows outbox_published_total \
    outbox_marked_total outbox_publish_failures_total outbox_possible_duplicates_total \
    outbox_event_latency_seconds_bucket outbox_claim_batch_rows_bucket outbox_inflight_rows \
    outbox_postgres_connected outbox_kafka_brokers_up outbox_notify_queue_usage_ratio outbox_build_info \
    outbox_degraded outbox_stalled outbox_long_transaction_age_seconds outbox_retention_deleted_total; do
    grep -q "^# TYPE $m\b\|^# TYPE ${m%_bucket} histogram" "$WORK/m0.txt" || fail "metric $m missing"
done
pub0=$(metric main outbox_published_total)
marked0=$(metric main outbox_marked_total)
lat0=$(metric main outbox_event_latency_seconds_count)

writers 4 500 50
wait_until 60 "2000 rows SENT" all_sent
wait_until 10 "counters advanced" metric_at_least main outbox_marked_total $((marked0 + 2000))
pub1=$(metric main outbox_published_total)
marked1=$(metric main outbox_marked_total)
lat1=$(metric main outbox_event_latency_seconds_count)
log "published +$((pub1 - pub0)), marked +$((marked1 - marked0)), latency observations +$((lat1 - lat0))"
[ $((pub1 - pub0)) = 2000 ] || fail "outbox_published_total advanced by $((pub1 - pub0)), not 2000"
[ $((marked1 - marked0)) = 2000 ] || fail "outbox_marked_total advanced by $((marked1 - marked0)), not 2000"
[ $((lat1 - lat0)) = 2000 ] || fail "latency histogram count advanced by $((lat1 - lat0)), not 2000"
[ "$(metric main outbox_postgres_connected)" = 1 ] || fail "outbox_postgres_connected is not 1"
wait_until 15 "brokers up reported" metric_at_least main outbox_kafka_brokers_up 1

log "stopping Kafka"
kafka_stop
writers 2 500 50
wait_until 30 "degraded reported" metric_is main outbox_degraded 1
wait_until 15 "backlog counted" metric_at_least main outbox_pending_rows 1000
age1=$(metric main outbox_oldest_pending_age_seconds)
sleep 6
age2=$(metric main outbox_oldest_pending_age_seconds)
log "while Kafka is down: pending $(metric main outbox_pending_rows), oldest age $age1 -> $age2 s"
awk -v a="$age1" -v b="$age2" 'BEGIN { exit !(b > a) }' || fail "oldest pending age did not grow ($age1 -> $age2)"
curl -sf "http://127.0.0.1:$port/status" | grep '"degraded":true' >/dev/null || fail "/status does not show degraded"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")
[ "$code" = 200 ] || fail "/readyz is $code during a Kafka outage; the default keeps the pod ready"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")
[ "$code" = 200 ] || fail "/healthz is $code"
# the images' health check asks /healthz without curl: healthy now, not while frozen
OUTBOX_HTTP_ADDR=127.0.0.1:$port "$RELAYTEST_RELAY_BIN" healthcheck >"$WORK/hc.log" 2>&1 ||
    fail "healthcheck exited $? while /healthz answers 200: $(cat "$WORK/hc.log")"
kill -STOP "$(relay_pid main)"
rc=0
OUTBOX_HTTP_ADDR=127.0.0.1:$port "$RELAYTEST_RELAY_BIN" healthcheck >"$WORK/hc.log" 2>&1 || rc=$?
kill -CONT "$(relay_pid main)"
[ "$rc" = 1 ] || fail "healthcheck exited $rc against a frozen relay (want 1): $(cat "$WORK/hc.log")"
grep -q "no HTTP answer" "$WORK/hc.log" || fail "healthcheck said: $(cat "$WORK/hc.log")"
rc=0
OUTBOX_HTTP_ADDR=127.0.0.1:$(free_port) "$RELAYTEST_RELAY_BIN" healthcheck >"$WORK/hc.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "healthcheck exited $rc with nothing listening (want 1)"

kafka_start
wait_until 120 "backlog drained after Kafka returned" all_sent
gauges_normal() { metric_is main outbox_pending_rows 0 && metric_is main outbox_degraded 0; }
wait_until 20 "gauges back to normal" gauges_normal
[ "$(metric main outbox_published_total)" -ge $((pub1 + 1000)) ] || fail "published_total did not advance after the outage"
curl -sf "http://127.0.0.1:$port/metrics" | promtool check metrics || fail "promtool check metrics rejected /metrics after the outage"
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss across the outage"
log "ok"
