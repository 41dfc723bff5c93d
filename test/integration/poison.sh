#!/usr/bin/env bash
# One test per poison kind: a payload larger than the broker accepts, an invalid topic name,
# headers that are not a JSON object of strings. Each poison row ends FAILED with a clear
# last_error, other keys keep flowing, later rows of the same key wait until requeue, after
# which they flow in order. Parked rows also go to the dead-letter topic. (Rows are read
# through outbox_all: the table, or in delete and keep modes the view of what became of them.)
. "$(dirname "$0")/lib.sh"
setup_db
dlq="$TOPIC_PREFIX.dead-letters"
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=2 OUTBOX_KAFKA_MESSAGE_MAX_BYTES=10000000 OUTBOX_DEAD_LETTER_TOPIC="$dlq")
ins() { # key n payload-sql [topic-sql] [headers-sql]
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic, headers)
           VALUES ('order', '$1', 'E$2', $3, ${4:-NULL}, ${5:-NULL})"
}
big="jsonb_build_object('blob', (SELECT string_agg(md5(random()::text || g), '') FROM generate_series(1, 70000) g))"
for n in 1 2 3 4; do
    for k in $(seq 1 20); do ins "ok-$k" "$n" "'{\"n\": $n}'"; done
    if [ $n = 2 ]; then
        ins p-size 2 "$big"
        ins p-topic 2 "'{}'" "'bad topic!'"
        ins p-headers 2 "'{}'" NULL "'{\"trace\": 5}'"
    else
        for k in p-size p-topic p-headers; do ins "$k" "$n" "'{\"n\": $n}'"; done
    fi
done
start_relay main >/dev/null
poison_parked() { [ "$(count_status FAILED)" = 3 ] && [ "$(psqlc "SELECT count(*) FROM outbox_all WHERE aggregate_id LIKE 'ok-%' AND status <> 'SENT'")" = 0 ]; }
wait_until 90 "3 poison rows parked and healthy keys SENT" poison_parked
err_of() { psqlc "SELECT last_error FROM outbox_all WHERE aggregate_id = '$1' AND status = 'FAILED'"; }
log "size:    $(err_of p-size)"
log "topic:   $(err_of p-topic)"
log "headers: $(err_of p-headers)"
err_of p-size | grep -qi "size too large" || fail "p-size: unclear last_error"
err_of p-topic | grep -q "not a valid Kafka topic name" || fail "p-topic: unclear last_error"
err_of p-headers | grep -q "not a string" || fail "p-headers: unclear last_error"
[ "$(psqlc "SELECT attempts FROM outbox_all WHERE aggregate_id = 'p-size' AND status = 'FAILED'")" = 2 ] ||
    fail "p-size parked after $(psqlc "SELECT attempts FROM outbox_all WHERE aggregate_id = 'p-size' AND status = 'FAILED'") attempts, want OUTBOX_MAX_ATTEMPTS=2"
for k in p-size p-topic p-headers; do
    got=$(psqlc "SELECT string_agg(event_type || ':' || status, ' ' ORDER BY id) FROM outbox_all WHERE aggregate_id = '$k'")
    [ "$got" = "E1:SENT E2:FAILED E3:PENDING E4:PENDING" ] || fail "$k: later rows did not wait: $got"
done
sleep 2
for k in p-size p-topic p-headers; do
    [ "$(psqlc "SELECT count(*) FROM outbox_all WHERE aggregate_id = '$k' AND status = 'PENDING'")" = 2 ] ||
        fail "$k: later rows flowed before requeue"
done
# a gauge of the monitor's backlog statement, every 5 s at most
wait_until 15 "outbox_failed_rows to show the 3 parked rows" eval '[ "$(metric main outbox_failed_rows)" = 3 ]'
[ "$(metric main outbox_parked_total)" = 3 ] || fail "outbox_parked_total is $(metric main outbox_parked_total)"

"$RELAYTEST_RELAY_BIN" status --pg-dsn "$DSN" --on-sent "$ON_SENT" >"$WORK/status.txt"
grep -q "bad topic" "$WORK/status.txt" || fail "status does not list the parked rows"

# The operator fixes each cause, then requeues: by id, by key, and all.
parked_row() { echo "id = (SELECT id FROM outbox_all WHERE aggregate_id = '$1' AND status = 'FAILED')"; }
psqlc "UPDATE outbox SET payload = '{\"n\": 2}' WHERE $(parked_row p-size)"
psqlc "UPDATE outbox SET topic = NULL WHERE $(parked_row p-topic)"
psqlc "UPDATE outbox SET headers = '{\"trace\": \"5\"}' WHERE $(parked_row p-headers)"
id=$(psqlc "SELECT id FROM outbox_all WHERE aggregate_id = 'p-size' AND status = 'FAILED'")
out=$("$RELAYTEST_RELAY_BIN" requeue --id "$id" --pg-dsn "$DSN" --on-sent "$ON_SENT")
[ "$out" = "requeued 1 parked row to PENDING" ] || fail "requeue --id: $out"
"$RELAYTEST_RELAY_BIN" requeue --key p-topic --pg-dsn "$DSN" --on-sent "$ON_SENT" >/dev/null
out=$("$RELAYTEST_RELAY_BIN" requeue --all --json --pg-dsn "$DSN" --on-sent "$ON_SENT")
[ "$out" = '{"requeued": 1}' ] || fail "requeue --all --json: $out"
wait_until 60 "requeued keys flow" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" || fail "loss or disorder after requeue"
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT id, event_id, aggregate_id FROM outbox_all WHERE event_type = 'E2' AND aggregate_id LIKE 'p-%'" >"$WORK/dlq.tsv"
"$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$dlq" --expected "$WORK/dlq.tsv" --no-partition-check \
    ${RELAYTEST_EXACTLY_ONCE:+--transactional} \
    --dump "$WORK/dlq.dump" >"$WORK/dlq.out" 2>&1 || { cat "$WORK/dlq.out"; fail "dead-letter topic does not hold the 3 parked rows"; }
log "dead letters: $(cat "$WORK/dlq.out" | grep CHECK)"
# each dead letter carries its row's reason in the header outbox_error
dump_header "$WORK/dlq.dump" outbox_error >"$WORK/dlq.errors"
dlq_reason() { grep "^$1"$'\t' "$WORK/dlq.errors" | cut -f2-; }
dlq_reason p-size | grep -qi "size too large" || fail "p-size's dead letter: outbox_error '$(dlq_reason p-size)'"
dlq_reason p-topic | grep -q "not a valid Kafka topic name" || fail "p-topic's dead letter: outbox_error '$(dlq_reason p-topic)'"
dlq_reason p-headers | grep -q "not a string" || fail "p-headers' dead letter: outbox_error '$(dlq_reason p-headers)'"
log "ok"
