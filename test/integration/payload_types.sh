#!/usr/bin/env bash
# Payload types: a table made by `migrate` with OUTBOX_PAYLOAD_TYPE=json, text or bytea (and
# the default jsonb) is relayed as it is stored: json and text byte for byte (json keeps its
# spacing and duplicate keys), bytea as raw bytes — every byte value, NUL bytes, an empty
# value, a 600 KB payload (its size is its bytes, not its hex) — and a NULL payload as a null
# value. Rows come from plain INSERTs and from outbox_enqueue as the writer role. A bytea
# payload too large for Kafka is parked with its reason while the rest flow; replay sends
# the same bytes again. migrate refuses an OUTBOX_PAYLOAD_TYPE that differs from the
# table's, naming the setting.
. "$(dirname "$0")/lib.sh"

W() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=it_writer dbname=$DB" -c "$1"; }

# md5-made bytes: N random-looking bytes (incompressible), as a bytea expression
random_bytes() { echo "(SELECT substr(decode(string_agg(md5(g::text || '$2'), ''), 'hex'), 1, $1) FROM generate_series(1, $1 / 16 + 1) g)"; }

for type in ${PAYLOAD_TYPES:-bytea json text jsonb}; do
    fresh_db
    OUTBOX_PG_DSN=$DSN OUTBOX_PAYLOAD_TYPE=$type "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-$type.log" 2>&1 ||
        { cat "$WORK/migrate-$type.log"; fail "migrate with OUTBOX_PAYLOAD_TYPE=$type failed"; }
    db_fixtures
    [ "$(psqlc "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'outbox'::regclass AND attname = 'payload'")" = "$type" ] ||
        fail "OUTBOX_PAYLOAD_TYPE=$type made another column type"
    ins() { psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('$type', '$1', 'Happened', $2)"; }
    enq() { W "SELECT outbox_enqueue('$type', '$1', 'Happened', $2)" >/dev/null || fail "outbox_enqueue($type payload) as the writer failed"; }
    case $type in
    bytea)
        ins all-bytes "(SELECT decode(string_agg(lpad(to_hex(b), 2, '0'), '' ORDER BY b), 'hex') FROM generate_series(0, 255) b)"
        ins nul "'\\x00'::bytea"
        ins nuls "'\\x000100ff00'::bytea"
        ins empty "''::bytea"
        ins null "NULL"
        ins big "$(random_bytes 600000 big)"
        enq enqueued "'\\x00ff00fe'::bytea"
        psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
               SELECT 'bytea', 'k-' || (i % 50), 'Happened', substr(decode(md5(i::text) || md5((i + 1)::text), 'hex'), 1, i % 33)
               FROM generate_series(1, 2000) i"
        ins too-big "$(random_bytes 1100000 huge)"
        value="payload" ;;
    json)
        ins spaced "'{\"b\": 1,   \"a\" : [1,2],\"b\": 2}'"
        ins string "'\"just a string\"'"
        ins unicode "'{\"name\": \"Zoë ✓ 雪\"}'"
        ins null "NULL"
        enq enqueued "'{\"total\":  10}'::json"
        value="convert_to(payload::text, 'UTF8')" ;;
    text)
        ins plain "'plain text, not JSON'"
        ins empty "''"
        ins lines "E'two\\nlines\\ttabbed'"
        ins unicode "'Zoë ✓ 雪'"
        enq enqueued "'from the function'::text"
        value="convert_to(payload, 'UTF8')" ;;
    jsonb)
        ins spaced "'{\"b\": 1,   \"a\" : [1,2]}'"
        enq enqueued "'{\"total\":  10}'::jsonb"
        value="convert_to(payload::text, 'UTF8')" ;;
    esac
    rows=$(count_where true)
    RELAY_ENV=()
    start_relay "$type" >/dev/null
    if [ "$type" = bytea ]; then
        done_bytea() { [ "$(count_status PENDING)" = 0 ] && [ "$(count_status FAILED)" = 1 ]; }
        wait_until 90 "bytea rows SENT and the too-large one parked" done_bytea
        reason=$(psqlc "SELECT last_error FROM outbox WHERE status = 'FAILED'")
        [ "$(psqlc "SELECT aggregate_id FROM outbox WHERE status = 'FAILED'")" = too-big ] && grep -q "larger than" <<<"$reason" ||
            fail "parked: $(psqlc "SELECT aggregate_id, last_error FROM outbox WHERE status = 'FAILED'")"
        log "bytea: parked the 1.1 MB payload: $reason"
    else
        wait_until 60 "$type rows SENT" all_sent
    fi
    grep -q "payload $type" "$WORK/relay-$type.log" || fail "the relay did not log the payload type $type"
    CHECK_WHERE="status = 'SENT'" CHECK_VALUE=$value check "$TOPIC_PREFIX.$type" --exact >"$WORK/check-$type.out" ||
        { cat "$WORK/check-$type.out"; fail "$type: Kafka does not hold the rows' payloads"; }
    log "$type: $rows rows, $(cat "$WORK/check-$type.out")"
    if [ "$type" = bytea ] && ! delete_mode_refuses "replay" env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key all-bytes; then
        # replay sends the same bytes again
        for key in all-bytes big; do
            id=$(psqlc "SELECT id FROM outbox WHERE aggregate_id = '$key'")
            env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --id "$id" >>"$WORK/replay.log" 2>&1 ||
                { cat "$WORK/replay.log"; fail "replay --id $id exited $?"; }
        done
        CHECK_WHERE="status = 'SENT'" CHECK_VALUE=$value check "$TOPIC_PREFIX.$type" >"$WORK/check-replay.out" ||
            { cat "$WORK/check-replay.out"; fail "bytea: a replayed payload differs"; }
        grep -q " duplicates=2 " "$WORK/check-replay.out" || fail "replay: $(cat "$WORK/check-replay.out")"
        log "bytea: replayed 2 rows, same bytes: $(cat "$WORK/check-replay.out")"
    fi
    stop_relay "$type" || fail "relay exited with $? on SIGTERM"
done

# migrate never changes the type of an existing table (the last one made above)
other=bytea
[ "$type" = bytea ] && other=text
rc=0
OUTBOX_PG_DSN=$DSN OUTBOX_PAYLOAD_TYPE=$other "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-other.log" 2>&1 || rc=$?
[ "$rc" != 0 ] && grep -q "OUTBOX_PAYLOAD_TYPE=$other, but the payload column of .* is already $type" "$WORK/migrate-other.log" ||
    { cat "$WORK/migrate-other.log"; fail "migrate with a different OUTBOX_PAYLOAD_TYPE: exit $rc"; }
OUTBOX_PG_DSN=$DSN OUTBOX_PAYLOAD_TYPE=$type "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-same.log" 2>&1 ||
    { cat "$WORK/migrate-same.log"; fail "migrate with the table's own OUTBOX_PAYLOAD_TYPE failed"; }
rc=0
OUTBOX_PG_DSN=$DSN OUTBOX_PAYLOAD_TYPE=xml "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-bad.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "OUTBOX_PAYLOAD_TYPE" "$WORK/migrate-bad.log" ||
    { cat "$WORK/migrate-bad.log"; fail "OUTBOX_PAYLOAD_TYPE=xml: exit $rc"; }
log "ok: $(grep -o "OUTBOX_PAYLOAD_TYPE=$other, but[^;]*" "$WORK/migrate-other.log")"
