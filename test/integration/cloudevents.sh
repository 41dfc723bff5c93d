#!/usr/bin/env bash
# CloudEvents binary mode (OUTBOX_CLOUDEVENTS_SOURCE), read by the CloudEvents Python SDK
# (cloudevents 2.2.0, its Kafka binding's from_binary; cloudevents_check.py):
#  1. for each payload type (jsonb, json, text, bytea) and in the Debezium layout, every
#     published message parses, with id, source, type, subject, time and datacontenttype
#     equal to its row's, the key as partitionkey, and the value byte for byte the payload;
#     a NULL payload stays a tombstone whose ce_ headers are still the row's; an aggregate
#     id with '%' in it arrives as written (no percent-encoding either way); a row's own
#     content-type header wins over the derived one; a row with a ce_* header is parked with
#     the reason while the others flow; replay sends the same attributes; outbox-tail shows
#     them;
#  2. an OUTBOX_CLOUDEVENTS_SOURCE that is not a URI-reference, and an additional placement
#     named ce_*, stop start-up naming the setting;
#  3. outbox-inbox applies CloudEvents made by the SDK (no event_id header: the identity is
#     the pair ce_source + ce_id) once, counting a redelivered one as a duplicate, and an
#     event with the same ce_id from another source as another event.
. "$(dirname "$0")/lib.sh"
venv=${OUTBOX_PY_VENV:-$RELAYTEST_SRC/.work/venv}
"$venv/bin/python3" -c 'import cloudevents.core.bindings.kafka' 2>/dev/null ||
    fail "no CloudEvents SDK in $venv (scripts/deps.sh installs it)"
src_uri="/it/orders-service"

# ---- 2. bad settings first: exit 2, the setting named
refused() { # WANT ENV...
    local want=$1 rc=0 out
    shift
    out=$(env OUTBOX_PG_DSN="$DSN" "$@" timeout 30 "$RELAYTEST_RELAY_BIN" 2>&1) || rc=$?
    [ "$rc" = 2 ] && grep -qF -- "$want" <<<"$out" || fail "relay with $*: exit $rc, want 2 saying $want: $out"
}
refused "OUTBOX_CLOUDEVENTS_SOURCE: '/orders service' is not a URI-reference" OUTBOX_CLOUDEVENTS_SOURCE="/orders service"
refused "OUTBOX_CLOUDEVENTS_SOURCE: '1orders:x' is not a URI-reference" OUTBOX_CLOUDEVENTS_SOURCE="1orders:x"
refused "OUTBOX_CLOUDEVENTS_SOURCE: '/a%zz' is not a URI-reference" OUTBOX_CLOUDEVENTS_SOURCE="/a%zz"
refused "header name 'ce_tenant' is reserved for the CloudEvents attributes" OUTBOX_CLOUDEVENTS_SOURCE="$src_uri" \
    OUTBOX_LAYOUT=debezium OUTBOX_ADDITIONAL_PLACEMENT=tenant:header:ce_tenant
refused "OUTBOX_CLOUDEVENTS_CONTENT_TYPE: applies only with OUTBOX_CLOUDEVENTS_SOURCE" \
    OUTBOX_CLOUDEVENTS_CONTENT_TYPE=application/json
log "2. a source that is not a URI-reference, a ce_ placement, a content type without a source: refused at start-up"

# ---- 1. every payload type, then the Debezium layout
# one round: rows of TYPE in a fresh database, relayed with CloudEvents on, checked by the SDK
round() {
    local type=$1 topic="$TOPIC_PREFIX.ce-$1" bytes ctype extra=()
    fresh_db
    if [ "$type" = debezium ]; then
        psqlc "CREATE TABLE outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
                 aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL,
                 type varchar(255) NOT NULL, payload jsonb, tenant text)"
        OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=debezium "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-$type.log" 2>&1 ||
            { cat "$WORK/migrate-$type.log"; fail "migrate (debezium) failed"; }
        extra=(OUTBOX_ADDITIONAL_PLACEMENT=tenant:header)
    else
        OUTBOX_PG_DSN=$DSN OUTBOX_PAYLOAD_TYPE=$type "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate-$type.log" 2>&1 ||
            { cat "$WORK/migrate-$type.log"; fail "migrate with OUTBOX_PAYLOAD_TYPE=$type failed"; }
    fi
    db_fixtures
    # pay N: the payload of row N as an SQL expression (N a number or a column)
    case $type in
    jsonb | debezium)
        pay() { echo "jsonb_build_object('n', $1, 'text', 'caf' || chr(233) || ' \"q\"')"; }
        bytes="convert_to(payload::text, 'UTF8')" ctype=application/json ;;
    json) # as written: spacing and the \u escape kept
        pay() { echo "format('{\"n\" :  %s, \"text\": \"caf\\u00e9\"}', $1)::json"; }
        bytes="convert_to(payload::text, 'UTF8')" ctype=application/json ;;
    text)
        pay() { echo "'line ' || $1 || E'\\nplain text, caf' || chr(233)"; }
        bytes="convert_to(payload, 'UTF8')" ctype="text/plain; charset=utf-8" ;;
    bytea)
        pay() { echo "decode('00ff' || lpad(to_hex($1), 8, '0') || 'c328', 'hex')"; }
        bytes="payload" ctype=application/octet-stream ;;
    esac
    if [ "$type" = debezium ]; then
        ins() { # KEY PAYLOAD [TENANT]
            psqlc "INSERT INTO outbox (aggregatetype, aggregateid, type, payload, tenant)
                   VALUES ('order', '$1', 'OrderPlaced', $2, ${3:-NULL})"
        }
        psqlc "INSERT INTO outbox (aggregatetype, aggregateid, type, payload, tenant)
               SELECT 'order', 'k' || (g % 10), 'OrderPlaced', jsonb_build_object('n', g), 'tenant-' || (g % 3)
               FROM generate_series(1, 200) g"
    else
        ins() { # KEY PAYLOAD [HEADERS]
            psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
                   VALUES ('order', '$1', 'OrderPlaced', $2, ${3:-NULL})"
        }
        for g in $(seq 1 5); do ins "k$g" "$(pay "$g")"; done
        psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
               SELECT 'order', 'k' || (g % 10), 'OrderPlaced', $(pay g) FROM generate_series(6, 200) g"
        ins traced "$(pay 201)" "'{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}'"
        ins own-type "$(pay 202)" "'{\"content-type\": \"application/vnd.order+json; version=2\"}'"
        ins spoof "$(pay 203)" "'{\"ce_type\": \"Spoofed\"}'"
    fi
    ins 'order%41%zz/caf'"$(printf '\xc3\xa9')" "$(pay 204)"
    ins tomb NULL
    local extra_env=()
    [ "$type" = debezium ] && extra_env=(OUTBOX_LAYOUT=debezium OUTBOX_ON_SENT=delete)
    RELAY_ENV=(OUTBOX_CLOUDEVENTS_SOURCE="$src_uri" OUTBOX_TOPIC_TEMPLATE="$topic" "${extra[@]}" "${extra_env[@]}")
    start_relay "$type" >/dev/null
    local want_parked=1
    [ "$type" = debezium ] && want_parked=0
    settled() {
        rows_are "$want_parked" "status = 'FAILED'" && rows_are 0 "status = 'PENDING'"
    }
    wait_until 60 "$type: every row SENT but the spoofing one" settled
    if [ "$want_parked" = 1 ]; then
        reason=$(psqlc "SELECT last_error FROM outbox WHERE aggregate_id = 'spoof'")
        grep -q "'ce_type' is reserved for the CloudEvents attributes" <<<"$reason" ||
            fail "$type: the row with a ce_type header was not parked with the reason: '$reason'"
    fi
    local replayed=0
    if [ "$type" = jsonb ]; then # replay: the same attributes again (duplicates, by design)
        env "${RELAY_BASE_ENV[@]}" "${RELAY_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key k3 >"$WORK/replay.log" 2>&1 ||
            { cat "$WORK/replay.log"; fail "replay with CloudEvents on failed"; }
        replayed=$(count_where "aggregate_id = 'k3' AND status = 'SENT'")
    fi
    stop_relay "$type" || fail "$type: relay exited with $? on SIGTERM"
    CHECK_WHERE="status = 'SENT'" check "$topic" --max-duplicates "$replayed" --dump "$WORK/ce-$type.dump" \
        >"$WORK/check-$type.out" || { cat "$WORK/check-$type.out"; fail "$type: outbox-check failed"; }
    # relay and replay pass ce_time from the same created_at expression as Kafka's timestamp
    "$PG_BIN/psql" -X -At "$DSN" -c "SELECT json_build_object('event_id', event_id, 'event_type', event_type,
            'aggregate_id', aggregate_id, 'created_ms', (extract(epoch FROM created_at) * 1000)::int8,
            'payload_hex', encode($bytes, 'hex'),
            'content_type', coalesce(headers->>'content-type', '$ctype'))
        FROM outbox_all WHERE status = 'SENT'" >"$WORK/ce-$type.rows" || fail "$type: cannot export the rows"
    "$venv/bin/python3" "$RELAYTEST_SRC/test/integration/cloudevents_check.py" "$WORK/ce-$type.dump" \
        "$WORK/ce-$type.rows" "$src_uri" >"$WORK/ce-$type.out" 2>&1 || { cat "$WORK/ce-$type.out"; fail "$type: the SDK's reading differs"; }
    local sent
    sent=$(count_status SENT)
    grep -q "^CE-CHECK messages=$((sent + replayed)) rows=$sent tombstones=1 mismatches=0$" "$WORK/ce-$type.out" ||
        fail "$type: $(tail -1 "$WORK/ce-$type.out"), want $((sent + replayed)) messages of $sent rows, one tombstone"
    grep -q "ce_subject=$(printf 'order%%41%%zz/caf\xc3\xa9' | od -An -tx1 | tr -d ' \n');" "$WORK/ce-$type.dump" ||
        fail "$type: the aggregate id with '%' is not in a ce_subject header as written"
    log "1. $type: $(tail -1 "$WORK/ce-$type.out") ($replayed replayed), content-type $ctype"
}
for type in jsonb json text bytea; do
    round "$type"
done
# outbox-tail: the attributes of the last round's first message
timeout 20 "$RELAYTEST_TAIL_BIN" --bootstrap "$BOOTSTRAP" --topic "$TOPIC_PREFIX.ce-bytea" --from-beginning \
    >"$WORK/tail.out" 2>"$WORK/tail.err" &
tail_pid=$!
RELAY_PIDS+=("$tail_pid")
tail_shows() { grep -q "^  cloudevent specversion=1.0 id=[-0-9a-f]* source=$src_uri type=OrderPlaced subject=k[0-9] time=20[0-9-]*T[0-9:.]*Z datacontenttype=application/octet-stream$" "$WORK/tail.out"; }
wait_until 20 "outbox-tail to show a message's CloudEvents attributes" tail_shows
kill "$tail_pid" 2>/dev/null || true
log "1. outbox-tail: $(grep -m1 '^  cloudevent' "$WORK/tail.out")"
LAYOUT=debezium ON_SENT=delete ID_HEADER=id
round debezium

# ---- 3. the inbox takes CloudEvents from any producer: identity (ce_source, ce_id)
setup_inbox_db
ce_topic="$TOPIC_PREFIX.ce-sdk"
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$ce_topic" 3 >/dev/null || fail "cannot create $ce_topic"
"$venv/bin/python3" - "$WORK/sdk.lines" <<'PY' || fail "the SDK could not write its messages"
import sys, uuid
from cloudevents.core.bindings.kafka import to_binary
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
u1, u2 = str(uuid.uuid4()), str(uuid.uuid4())
def line(source, ident, n):
    event = CloudEvent(attributes={"type": "com.example.placed", "source": source, "id": ident, "subject": "k-sdk"},
                       data={"n": n})
    m = to_binary(event, JSONFormat(), key_mapper=lambda e: e.get_subject())
    headers = ";".join(f"{k}={v.hex()}" for k, v in m.headers.items())
    return f"{m.key.encode().hex()}\t{m.value.hex()}\t{headers}\n"
# A (sent twice), B: A's id from another source, C
with open(sys.argv[1], "w") as f:
    f.write(line("/sdk/a", u1, 1) + line("/sdk/a", u1, 1) + line("/sdk/b", u1, 2) + line("/sdk/a", u2, 3))
PY
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" produce "$ce_topic" <"$WORK/sdk.lines" >"$WORK/produce.out" ||
    fail "cannot produce the SDK's messages"
grep -q "^produced 4$" "$WORK/produce.out" || fail "produce: $(cat "$WORK/produce.out")"
INBOX_TOPICS_TEST=$ce_topic start_inbox sdk
wait_until 60 "the SDK's three events applied, the redelivered one a duplicate" \
    eval 'metric_is sdk "inbox_messages_total{result=\"applied\"}" 3 && metric_is sdk "inbox_messages_total{result=\"duplicate\"}" 1'
[ "$(cpsql "SELECT string_agg(times::text, ',' ORDER BY times) FROM applied")" = "1,2" ] ||
    fail "applications per ce_id: $(cpsql "SELECT event_id, times FROM applied")"
[ "$(cpsql "SELECT count(*) FROM inbox WHERE dedupe_key LIKE '[\"/sdk/_\",\"%\"]' AND status = 'APPLIED'")" = 3 ] ||
    fail "inbox rows: $(cpsql "SELECT dedupe_key, status FROM inbox")"
[ "$(cpsql "SELECT sum(violations) FROM key_order")" = 0 ] || fail "the SDK's events were applied out of order"
log "3. outbox-inbox: the SDK's CloudEvents applied once per (ce_source, ce_id): 3 applied, 1 duplicate"
log "ok"
