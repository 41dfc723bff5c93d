#!/usr/bin/env bash
# A delivery reported without an offset is no proof. librdkafka reports a Produce request's
# messages delivered when it failed and a later request of the same partition succeeded
# ("implicitly acked by subsequent batch success"): a broker holding the producer's state
# would have refused the later sequence numbers. A broker without that state accepts them:
# a partition just created, or any partition for a producer just started. Found by
# `leases` (about one run in 30, in CI and here): three relays auto-created a topic on a real
# Kafka 4.1.1, a partition's first request failed and its second was written at offset 0;
# the first request's row was reported delivered with offset -1001, marked SENT, and is in
# no partition. librdkafka's mock cluster accepts any sequence from a producer that is not
# transactional (mock_faults.sh), so an injected Produce error with requests in flight
# behind it makes the same report at will.
# Proof: with errors injected while rows flow, librdkafka logged implicit acks, the relay
# counted those rows as failed deliveries that may have been written, and every row is in
# Kafka. Keys are unique: the later requests were written before the failed one, so a key
# shared between them would be out of order in the log whatever the relay does.
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
start_mock --brokers 3 --topic "$topic:6"
mock rtt 1 20 # Produce requests in flight behind each other
RELAY_ENV=(OUTBOX_BATCH_SIZE=100 OUTBOX_LOG_LEVEL=debug OUTBOX_KAFKA_DEBUG=msg)
start_relay main >/dev/null

psqlc "CREATE SEQUENCE unique_keys; GRANT USAGE ON SEQUENCE unique_keys TO $WRITER_USER"
cat >"$WORK/unique.sql" <<SQL
INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'u' || nextval('unique_keys'), 'Created', '{"pad": "$(printf 'x%.0s' {1..200})"}');
SQL
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "$WRITER_USER" -c 2 -j 2 -R 1500 -T 10 \
    -f "$WORK/unique.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
wp=$!
sleep 1
for _ in $(seq 1 12); do
    mock errors 6 NOT_LEADER_FOR_PARTITION REQUEST_TIMED_OUT
    sleep 0.5
done
wait "$wp" || { cat "$WORK/pgbench.log"; fail "writers failed"; }
wait_until 120 "all rows SENT" all_sent
unconfirmed=$(metric main outbox_unconfirmed_deliveries_total)
stop_relay main || fail "relay exited with $? on SIGTERM"
implicit=$(grep -c "implicitly acked" "$WORK/relay-main.log" || true)
log "librdkafka acknowledged requests implicitly $implicit times"
[ "$implicit" -gt 0 ] || fail "no request was acknowledged implicitly: the case was not exercised"
check "$topic" || fail "rows reported delivered without an offset were lost"
grep -q "reported delivered without an offset" "$WORK/relay-main.log" ||
    fail "the relay never counted a delivery without an offset as unproven"
[ "${unconfirmed:-0}" -gt 0 ] || fail "outbox_unconfirmed_deliveries_total is ${unconfirmed:-absent} after implicit acks"
log "deliveries without an offset, published again: $unconfirmed"
mock quit
log "ok"
