#!/usr/bin/env bash
# Every setting the other tests leave at its default, run end to end once:
#   --check-config exits 0 and reaches both servers;
#   OUTBOX_TABLE schema-qualified and mixed-case (Sales.OrderEvents), migrated, granted
#     with deploy/roles.sql, relayed and checked;
#   OUTBOX_POISON_POLICY=skip: a parked row's key keeps flowing; with OUTBOX_LOG_FORMAT=json
#     every log line is one JSON object (also the warnings about the environment, given
#     before the settings are all read: an unknown OUTBOX_ variable here);
#   the doorbell on (a row after idling is published long before the 5 s poll) and off
#     (OUTBOX_NOTIFY_CHANNEL empty: no LISTEN session, rows found by polling);
#   OUTBOX_READY_STRICT: with Kafka unreachable /readyz is 503 with 1 and 200 with 0;
#   OUTBOX_RECONNECT_MAX_MS: while PostgreSQL is down the reconnect backoff stops at the cap.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
ms_now() { date +%s%3N; }
# ms_until_sent KEY: milliseconds until the row of KEY is SENT, polling every 20 ms (at most 20 s)
ms_until_sent() {
    local t0 n=0
    t0=$(ms_now)
    until rows_are 1 "aggregate_id = '$1' AND status = 'SENT'"; do
        n=$((n + 1))
        [ $n -lt 1000 ] || fail "the row of $1 was not SENT within 20 s"
        sleep 0.02
    done
    echo $(($(ms_now) - t0))
}
readyz() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(http_port "$1")/readyz"; }

# --check-config
relay_env
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/check-config.log" 2>&1 ||
    { cat "$WORK/check-config.log"; fail "--check-config exited $? with valid settings"; }
grep -q "check-config: postgres reachable" "$WORK/check-config.log" || fail "--check-config did not reach PostgreSQL"
grep -q "check-config: kafka reachable" "$WORK/check-config.log" || fail "--check-config did not reach Kafka"
log "--check-config: exit 0, both servers reachable"

# A schema-qualified, mixed-case table.
psqlc 'CREATE SCHEMA "Sales"'
OUTBOX_PG_DSN=$DSN OUTBOX_TABLE=Sales.OrderEvents "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-mixed.log" 2>&1 ||
    { cat "$WORK/migrate-mixed.log"; fail "migrate of Sales.OrderEvents failed"; }
[ "$(psqlc "SELECT to_regclass('\"Sales\".\"OrderEvents\"') IS NOT NULL")" = t ] || fail "\"Sales\".\"OrderEvents\" was not created"
PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q "$DSN" -v schema=Sales -v table=OrderEvents \
    -v relay=it_relay -v writer=it_writer -f "$RELAYTEST_SRC/deploy/roles.sql" >/dev/null || fail "deploy/roles.sql failed for Sales.OrderEvents"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "${DSN/user=postgres /user=it_writer }" -c "
    INSERT INTO \"Sales\".\"OrderEvents\" (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'order', 'm' || (g % 40), 'Placed', jsonb_build_object('n', g) FROM generate_series(1, 500) g" ||
    fail "the INSERT-only writer cannot insert into \"Sales\".\"OrderEvents\""
# every row, read before the relay runs (in delete mode it deletes them)
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM \"Sales\".\"OrderEvents\" ORDER BY id" >"$WORK/expected-mixed.tsv"
RELAY_ENV=(OUTBOX_TABLE=Sales.OrderEvents)
start_relay mixed >/dev/null
mixed_left() { [ "$(psqlc "SELECT count(*) FROM \"Sales\".\"OrderEvents\" WHERE status <> 'SENT'")" = 0 ]; } # none left in delete mode
wait_until 60 "the mixed-case table's rows SENT" mixed_left
stop_relay mixed || fail "relay exited with $? on SIGTERM"
"$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$topic" --expected "$WORK/expected-mixed.tsv" >"$WORK/check-mixed.out" 2>/dev/null ||
    { cat "$WORK/check-mixed.out"; fail "loss or disorder from Sales.OrderEvents"; }
log "Sales.OrderEvents: $(cat "$WORK/check-mixed.out")"

# OUTBOX_POISON_POLICY=skip, logging JSON.
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', 'p1', 'Bad', '{}', '[1]')"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', CASE WHEN g <= 5 THEN 'p1' ELSE 'q' || g END, 'After', '{}' FROM generate_series(1, 20) g"
RELAY_ENV=(OUTBOX_POISON_POLICY=skip OUTBOX_LOG_FORMAT=json OUTBOX_NOT_A_SETTING=1)
start_relay skip >/dev/null
wait_until 30 "the bad row parked" rows_are 1 "status = 'FAILED'"
wait_until 30 "the parked key's later rows SENT (skip)" rows_are 5 "aggregate_id = 'p1' AND status = 'SENT'"
stop_relay skip || fail "relay exited with $? on SIGTERM"
lines=$(wc -l <"$WORK/relay-skip.log")
parsed=$(jq -c 'select(type == "object" and (.ts | type == "string") and (.level | type == "string") and (.msg | type == "string"))' \
    "$WORK/relay-skip.log" | wc -l) || fail "a log line is not JSON"
[ "$lines" -gt 5 ] && [ "$parsed" = "$lines" ] || fail "$parsed of $lines log lines are JSON objects with ts, level and msg"
log "poison policy skip: the parked key's 5 later rows sent; JSON log: $parsed of $lines lines parse"

# The doorbell on, then off; each relay idles past its poll interval first. With the
# doorbell, an idle relay whose poll interval is 10 s publishes a new row within 500 ms
# (README: a few ms; measured from the INSERT's return to the SENT row seen by a 20 ms poll).
RELAY_POLL_MS=10000
RELAY_ENV=()
start_relay bell >/dev/null
wait_until 30 "the listen connection up" grep -q "pg listen: connected" "$WORK/relay-bell.log"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'warm1', 'Warm', '{}')"
ms_until_sent warm1 >/dev/null # the producer has the topic's metadata
# the adaptive poll backs off to 10 s (about 10 s of doubling) and arms the doorbell
wait_until 40 "the idle relay to arm its doorbell" bell_armed
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'bell', 'Rung', '{}')"
bell_ms=$(ms_until_sent bell)
[ "$bell_ms" -le 500 ] || fail "idle -> first event SENT took $bell_ms ms with the doorbell (poll interval 10 s; bound 500 ms)"
wait_until 5 "the doorbell wake-up counted" metric_at_least bell outbox_doorbell_wakeups_total 1
stop_relay bell || fail "relay exited with $? on SIGTERM"
RELAY_POLL_MS=1000
RELAY_ENV=(OUTBOX_NOTIFY_CHANNEL=)
start_relay nobell >/dev/null
wait_until 30 "the relay without a doorbell connected" grep -q "pg worker: connected" "$WORK/relay-nobell.log"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'warm2', 'Warm', '{}')"
ms_until_sent warm2 >/dev/null
sleep 3
! grep -q "pg listen" "$WORK/relay-nobell.log" || fail "the relay opened a listen connection with OUTBOX_NOTIFY_CHANNEL empty"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'nobell', 'Polled', '{}')"
nobell_ms=$(ms_until_sent nobell)
metric_is nobell outbox_doorbell_wakeups_total 0 || fail "doorbell wake-ups counted with the doorbell off"
stop_relay nobell || fail "relay exited with $? on SIGTERM"
RELAY_POLL_MS=
log "idle -> first event SENT: ${bell_ms} ms with the doorbell (poll interval 10 s), ${nobell_ms} ms without (poll interval 1 s)"

# OUTBOX_READY_STRICT with Kafka unreachable (nothing listens on the bootstrap port).
dead_kafka="127.0.0.1:$(free_port)"
RELAY_ENV=(OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$dead_kafka" OUTBOX_READY_STRICT=1)
start_relay strict >/dev/null
RELAY_ENV=(OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$dead_kafka" OUTBOX_READY_STRICT=0)
start_relay lenient >/dev/null
# both past their start-up (not ready until then, whatever the setting), then Kafka-less
wait_until 30 "the strict relay checked its schema" grep -q "schema: public.outbox at version" "$WORK/relay-strict.log"
wait_until 30 "the lenient relay checked its schema" grep -q "schema: public.outbox at version" "$WORK/relay-lenient.log"
wait_until 30 "the strict relay sees no Kafka broker" metric_is strict outbox_kafka_brokers_up 0
wait_until 30 "the lenient relay sees no Kafka broker" metric_is lenient outbox_kafka_brokers_up 0
wait_until 10 "/readyz 503 with OUTBOX_READY_STRICT=1" test "$(readyz strict)" = 503
wait_until 10 "/readyz 200 with OUTBOX_READY_STRICT=0 (degraded, not unready)" test "$(readyz lenient)" = 200
metric_is lenient outbox_kafka_brokers_up 0 || fail "Kafka came back during the lenient check?"
stop_relay strict || fail "relay exited with $? on SIGTERM"
stop_relay lenient || fail "relay exited with $? on SIGTERM"
log "Kafka unreachable: /readyz 503 with OUTBOX_READY_STRICT=1, 200 with 0"

# OUTBOX_RECONNECT_MAX_MS, on a PostgreSQL of this test's own that goes away for 4 s.
own_servers
pg2=$HA/pg2
PORT2=$(free_port)
pg_env start "$pg2" "$PORT2"
DSN2="host=127.0.0.1 port=$PORT2 user=postgres dbname=outbox"
OUTBOX_PG_DSN=$DSN2 "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate2.log" 2>&1 || { cat "$WORK/migrate2.log"; fail "migrate failed"; }
RELAY_ENV=(OUTBOX_PG_DSN="$DSN2" OUTBOX_RECONNECT_MAX_MS=300)
start_relay reconnect >/dev/null
wait_until 30 "connected to the second PostgreSQL" grep -q "pg worker: connected to 127.0.0.1:$PORT2" "$WORK/relay-reconnect.log"
pg_env stop "$pg2"
sleep 4
pg_env start "$pg2" "$PORT2"
"$PG_BIN/psql" -X -q "$DSN2" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'back', 'Again', '{}')"
back_sent() { [ "$("$PG_BIN/psql" -X -At "$DSN2" -c "SELECT count(*) FROM outbox WHERE status <> 'SENT'")" = 0 ]; } # SENT, or deleted in delete mode
wait_until 30 "relaying again after PostgreSQL came back" back_sent
stop_relay reconnect || fail "relay exited with $? on SIGTERM"
delays=$(sed -n 's/.*pg worker: reconnecting in \([0-9]*\) ms.*/\1/p' "$WORK/relay-reconnect.log" | sort -n | uniq -c | tr '\n' ' ')
largest=$(sed -n 's/.*pg worker: reconnecting in \([0-9]*\) ms.*/\1/p' "$WORK/relay-reconnect.log" | sort -n | tail -1)
[ -n "$largest" ] || fail "no reconnect attempt logged while PostgreSQL was down"
[ "$largest" -le 300 ] || fail "a reconnect delay of $largest ms is above OUTBOX_RECONNECT_MAX_MS=300"
[ "$largest" -ge 150 ] || fail "the backoff never approached the cap (largest $largest ms)"
log "OUTBOX_RECONNECT_MAX_MS=300: worker reconnect delays (count x ms): $delays"
log "ok"
