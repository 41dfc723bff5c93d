#!/usr/bin/env bash
# PostgreSQL restarted mid-run while writers keep inserting: the relay reconnects with
# backoff, loses nothing and keeps per-key order.
. "$(dirname "$0")/lib.sh"
setup_db
writer_loop() { # inserts batches until $WORK/stop exists; errors (server down) are retried
    local i=0
    while [ ! -f "$WORK/stop" ]; do
        i=$((i + 1))
        "$PG_BIN/psql" -X -q "$DSN" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
            SELECT 'order', 'k' || g, 'E', jsonb_build_object('batch', $i) FROM generate_series(1, 40) g" \
            >/dev/null 2>&1 || sleep 0.2
        sleep 0.05
    done
}
start_relay main >/dev/null
writer_loop &
wl=$!
sleep 3
log "restarting PostgreSQL"
pg_stop
sleep 2
pg_start
restart_max=$(psqlc "SELECT coalesce(max(id), 0) FROM outbox")
sleep 3
touch "$WORK/stop"
wait "$wl"
wait_until 60 "all rows SENT after the restart" all_sent
kill -0 "$(relay_pid main)" || fail "relay exited during the PostgreSQL restart"
grep -q "pg worker: connection lost" "$WORK/relay-main.log" || fail "relay never saw the restart"
stop_relay main || fail "relay exited with $? on SIGTERM"
after=$(count_where "id > $restart_max")
[ "$after" -gt 0 ] || fail "no row was written after the restart: the relay's recovery was not put to the test"
log "$(count_status SENT) rows SENT, $after of them written after PostgreSQL was back (all checked in Kafka below)"
check "$TOPIC_PREFIX.order" || fail "loss or disorder across a PostgreSQL restart"
log "ok"
