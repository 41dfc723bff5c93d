#!/usr/bin/env bash
# Rows an application can write must not stop the relay or its metrics:
#   1. created_at = 'infinity' and '-infinity' among normal rows (as on a table of schema 1,
#      before migration 002 refused them; the test drops its constraint to write them): every
#      row is published (the infinite ones with the claim's time as Kafka timestamp), the
#      metrics, /status and `status --json` keep working;
#   2. created_at two hours ahead (the broker rejects timestamps more than an hour ahead:
#      INVALID_TIMESTAMP fails its whole batch, which the gapless producer turns into a fatal
#      error): the row is isolated, its attempts counted, and it is parked with the reason,
#      while the 1,000 normal rows, those sharing its Kafka partition included, are SENT;
#   3. a row naming __consumer_offsets: parked (OUTBOX_TOPIC_ALLOW), never produced.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
ins() { # n key created_at-sql
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
           SELECT 'order', 'k' || (g % 50), 'Created', jsonb_build_object('n', g), $3
           FROM generate_series(1, $1) g"
}

# ---- 1. infinite timestamps
ins 300 x "now()"
psqlc "ALTER TABLE outbox DROP CONSTRAINT outbox_created_at_finite;
       INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
       VALUES ('order', 'inf', 'Created', '{}', 'infinity'), ('order', 'neginf', 'Created', '{}', '-infinity')"
ins 300 x "now()"
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=2)
start_relay main >/dev/null
wait_until 60 "every row, the infinite ones included, SENT" all_sent
wait_until 10 "metrics show an empty backlog" metric_is main outbox_pending_rows 0
OUTBOX_PG_DSN=$DSN "$RELAYTEST_RELAY_BIN" status --json >"$WORK/status.json" 2>"$WORK/status.err" ||
    { cat "$WORK/status.err"; fail "status --json fails with infinite created_at rows"; }
curl -sf "http://127.0.0.1:$(http_port main)/status" -o /dev/null || fail "/status fails"
log "1. infinite created_at: $(count_status SENT) rows SENT, metrics and status fine"

# ---- 2. a row dated two hours ahead among 1,000 normal rows
ins 500 x "now()"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
       VALUES ('order', 'future', 'Created', '{}', now() + interval '2 hours')"
ins 500 x "now()"
future_parked() {
    [ "$(count_where "aggregate_id = 'future' AND status = 'FAILED'")" = 1 ] &&
        [ "$(count_where "aggregate_id <> 'future' AND status <> 'SENT'")" = 0 ]
}
wait_until 120 "the future row parked, every other row SENT" future_parked
reason=$(psqlc "SELECT last_error FROM outbox WHERE aggregate_id = 'future'")
log "2. future row parked: $reason"
grep -qi "timestamp" <<<"$reason" || fail "the parked row's reason does not name the timestamp: $reason"
resets=$(grep -c "fatal producer error" "$WORK/relay-main.log" || true)
log "2. fatal producer errors on the way: $resets"

# ---- 3. a row naming an internal topic (not allowed by the default OUTBOX_TOPIC_ALLOW)
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       VALUES ('order', 'internal', 'Created', '{}', '__consumer_offsets')"
ins 100 x "now()"
internal_parked() {
    rows_are 1 "aggregate_id = 'internal' AND status = 'FAILED' AND last_error LIKE '%not allowed by OUTBOX_TOPIC_ALLOW%'" &&
        rows_are 0 "aggregate_id NOT IN ('future', 'internal') AND status <> 'SENT'"
}
wait_until 60 "the row naming __consumer_offsets parked, the others SENT" internal_parked
log "3. internal topic refused: $(psqlc "SELECT last_error FROM outbox WHERE aggregate_id = 'internal'")"
stop_relay main || fail "relay exited with $? on SIGTERM"
CHECK_WHERE="aggregate_id NOT IN ('future', 'internal')" check "$topic" || fail "loss or disorder around hostile rows"
log "ok"
