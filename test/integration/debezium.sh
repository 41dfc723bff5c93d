#!/usr/bin/env bash
# Side by side with Debezium. One Debezium outbox table (id uuid, aggregatetype, aggregateid,
# type, payload, and eight columns of the user's own), written by concurrent writers exactly as
# Debezium's users write it, is read twice at the same time:
#   - by Debezium 3.6.1 (PostgreSQL connector, pgoutput, a publication, its outbox event
#     router) in Kafka Connect 4.1.1 standalone with String converters, from the WAL;
#   - by the relay in the Debezium layout (OUTBOX_LAYOUT=debezium, delete-on-send), from
#     the table.
# Each writes its own topics (the event router's route.topic.replacement, the relay's
# OUTBOX_TOPIC_TEMPLATE); the same additional columns go to headers on both sides
# (table.fields.additional.placement = OUTBOX_ADDITIONAL_PLACEMENT: text, integer, timestamp
# and timestamp(3), timestamptz, date, numeric and boolean columns, some NULL, in an order
# that is not sorted). Then the topics are
# compared message by message: for every event id the same key, the same value bytes, the
# same partition and the same headers in the same order, except what the README lists: the
# event router's __debezium.context.* headers and the relay's outbox_lease header. Both sides
# also lose nothing, duplicate nothing and keep per-key order (outbox-check), and Debezium
# ignores the relay's deletes (no other message reaches its topics). Timestamps: the relay's
# (the row's insert time) is never later than Debezium's.
# Then the consumer half on Debezium's own messages: outbox-inbox with its default identity
# (INBOX_EVENT_ID_HEADER=auto, which takes Debezium's id header) applies every event Debezium
# produced once, its handler given Debezium's id as event_id; ten of Debezium's messages
# produced again (headers and all) are counted as duplicates and applied nothing.
RELAYTEST_LAYOUT=debezium
. "$(dirname "$0")/lib.sh"
rows_per_writer=${DEBEZIUM_ROWS_PER_WRITER:-250}
writers_n=4
total=$((writers_n * rows_per_writer))

# Debezium needs wal_level=logical: a PostgreSQL of the test's own.
own_servers
RELAYTEST_PG_PORT=$(free_port)
PG_EXTRA_CONF="wal_level = logical" pg_env start "$HA/pg" "$RELAYTEST_PG_PORT"
DSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$DB"
trap 'TEST_RC=${TEST_RC:-$?}; bash "$RELAYTEST_SRC/test/env/connect.sh" stop "$WORK/connect" >/dev/null 2>&1 || true; own_servers_cleanup' EXIT

fresh_db
psqlc "CREATE TABLE outbox (
         id            uuid NOT NULL PRIMARY KEY,
         aggregatetype varchar(255) NOT NULL,
         aggregateid   varchar(255) NOT NULL,
         type          varchar(255) NOT NULL,
         payload       jsonb,
         tenant        text,
         attempt_no    integer,
         occurred      timestamp,
         occurred_ms   timestamp(3),
         recorded      timestamptz,
         business_day  date,
         amount        numeric(10, 2),
         urgent        boolean)"
OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=debezium "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate.log" 2>&1 ||
    { cat "$WORK/migrate.log"; fail "migrate in the Debezium layout failed"; }
db_fixtures

# The placements, not in any sorted order: headers keep the setting's order on both sides.
placement=urgent:header,tenant:header,type:header:eventType,attempt_no:header,occurred:header
placement=$placement,occurred_ms:header,recorded:header:recordedAt,business_day:header,amount:header

# Debezium: a connector on the outbox table only, streaming from its slot's creation on.
bash "$RELAYTEST_SRC/test/env/connect.sh" outbox-connector outbox-side-by-side "$RELAYTEST_PG_PORT" "$DB" \
    "$TOPIC_PREFIX.dbz.\${routedByValue}" "$placement" >"$WORK/connector.properties"
bash "$RELAYTEST_SRC/test/env/connect.sh" start "$WORK/connect" "$BOOTSTRAP" "$WORK/connector.properties" ||
    fail "Kafka Connect did not start"
slot_active() { [ "$(psqlc "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'outbox_side_by_side' AND active")" = 1 ]; }
wait_until 120 "Debezium streaming (its slot active)" slot_active
log "Debezium $(curl -s "http://127.0.0.1:$(cat "$WORK/connect/port")/connectors/outbox-side-by-side/status" |
    jq -r '"connector " + .connector.state + ", task " + .tasks[0].state + ", version " + .connector.version')"

for t in order payment; do
    "$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$TOPIC_PREFIX.dbz.$t" 6 >/dev/null
    "$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$TOPIC_PREFIX.relay.$t" 6 >/dev/null
done
RELAY_ENV=(OUTBOX_TOPIC_TEMPLATE="$TOPIC_PREFIX.relay.{aggregate_type}"
    OUTBOX_ADDITIONAL_PLACEMENT="$placement")
start_relay main >/dev/null

# Writers as Debezium's users write: the event's uuid from the application, the business row
# and the outbox row in one transaction; two aggregate types, payloads with text that JSON
# escapes, some NULL extra columns.
psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 60) g"
cat >"$WORK/dbz-writer.sql" <<'SQL'
\set k random(1, 60)
\set n random(1, 1000000)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k RETURNING version AS v \gset
INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tenant, attempt_no, occurred,
                    occurred_ms, recorded, business_day, amount, urgent)
  VALUES (gen_random_uuid(), CASE WHEN :k % 3 = 0 THEN 'payment' ELSE 'order' END, 'k' || :k,
          CASE WHEN :n % 2 = 0 THEN 'Created' ELSE 'Updated' END,
          jsonb_build_object('key', 'k' || :k, 'v', :v, 'text', 'caf' || chr(233) || ' "q" \ ' || chr(10) || :n,
                             'nested', jsonb_build_object('a', jsonb_build_array(1, 2.5, null, true))),
          CASE WHEN :n % 4 = 0 THEN NULL ELSE 'tenant-' || (:n % 7) END,
          CASE WHEN :n % 5 = 0 THEN NULL ELSE :n % 100 END,
          timestamp '2026-11-30 10:00:00' + :n * interval '1.01 millisecond',
          timestamp '2026-11-30 10:00:00' + :n * interval '10 millisecond',
          CASE :n % 3 WHEN 0 THEN NULL WHEN 1 THEN timestamptz '2026-11-30 10:00:00+00' + :n * interval '10 microsecond'
                      ELSE timestamptz '2026-11-30 10:00:00+00' + (:n % 1000) * interval '1 second' END,
          date '2026-01-01' + :n % 400, (:n % 10000) / 100.0, :n % 2 = 0);
COMMIT;
SQL
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "${WRITER_USER:-postgres}" -c "$writers_n" -j 2 \
    -t "$rows_per_writer" -f "$WORK/dbz-writer.sql" "$DB" >"$WORK/pgbench.log" 2>&1 ||
    { cat "$WORK/pgbench.log"; fail "writers failed"; }
wait_until 120 "all $total rows published by the relay" all_sent
[ "$(count_status SENT)" = "$total" ] || fail "expected $total rows published, got $(count_status SENT)"
[ "$(psqlc "SELECT count(*) FROM outbox")" = 0 ] || fail "delete-on-send left rows in the table"

# Both sides against the rows written: nothing lost, nothing twice, per-key order, murmur2
# partitions; and the dumps of every message.
both_complete() {
    local side
    for side in relay dbz; do
        for t in order payment; do
            CHECK_WHERE="aggregate_type = '$t'" CHECK_VALUE="convert_to(payload::text, 'UTF8')" \
                check "$TOPIC_PREFIX.$side.$t" --exact --dump "$WORK/$side.$t.dump" >"$WORK/check.$side.$t" ||
                return 1
        done
    done
}
wait_until 120 "Debezium's topics complete" both_complete
stop_relay main || fail "relay exited with $? on SIGTERM"
for t in order payment; do
    log "$t: relay $(cat "$WORK/check.relay.$t")"
    log "$t: debezium $(cat "$WORK/check.dbz.$t")"
done

# Message by message. A dump line: event id, partition, key, value, headers (name=hex;...).
normalise() { # FILE SIDE: one line per message, sorted by event id, without the documented headers
    awk -F '\t' -v OFS='\t' -v side="$2" '{
        n = split($5, h, ";"); out = ""
        for (i = 1; i <= n; i++) {
            if (side == "dbz" && h[i] ~ /^__debezium\.context\./) continue
            if (side == "relay" && h[i] ~ /^outbox_lease=/) continue
            out = out (out == "" ? "" : ";") h[i]
        }
        print $1, $2, $3, $4, out }' "$1" | sort
}
compared=0
for t in order payment; do
    normalise "$WORK/relay.$t.dump" relay >"$WORK/relay.$t.norm"
    normalise "$WORK/dbz.$t.dump" dbz >"$WORK/dbz.$t.norm"
    if ! diff "$WORK/dbz.$t.norm" "$WORK/relay.$t.norm" >"$WORK/diff.$t"; then
        head -6 "$WORK/diff.$t" | cut -c1-300 | sed 's/^/#   /'
        fail "$t: the relay's messages differ from Debezium's ($(grep -c '^[<>]' "$WORK/diff.$t") lines)"
    fi
    compared=$((compared + $(wc -l <"$WORK/relay.$t.norm")))
    # what was left out differs as documented, on every message
    [ "$(grep -c '__debezium.context.connectorName=' "$WORK/dbz.$t.dump")" = "$(wc -l <"$WORK/dbz.$t.dump")" ] ||
        fail "$t: not every Debezium message has the __debezium.context headers the README lists"
    [ "$(grep -c 'outbox_lease=' "$WORK/relay.$t.dump")" = "$(wc -l <"$WORK/relay.$t.dump")" ] ||
        fail "$t: not every relay message has its outbox_lease header"
done
[ "$compared" = "$total" ] || fail "compared $compared messages, expected $total"
# Timestamps differ as the README says: the relay's is the row's insert time, the event
# router's the change's time in Debezium's source record; per event, the relay's is never
# later (and, as a sanity bound, at most a minute earlier).
cat "$WORK"/relay.*.dump | awk -F '\t' '{ print $1 "\t" $6 }' | sort >"$WORK/relay.ts"
cat "$WORK"/dbz.*.dump | awk -F '\t' '{ print $1 "\t" $6 }' | sort >"$WORK/dbz.ts"
join -t $'\t' "$WORK/relay.ts" "$WORK/dbz.ts" | awk -F '\t' '{ print $3 - $2 }' | sort -n >"$WORK/ts.diff"
[ "$(wc -l <"$WORK/ts.diff")" = "$total" ] || fail "timestamps: joined $(wc -l <"$WORK/ts.diff") of $total events"
ts_min=$(head -1 "$WORK/ts.diff") ts_max=$(tail -1 "$WORK/ts.diff") ts_med=$(median <"$WORK/ts.diff")
log "Debezium's timestamp minus the relay's, per event: min $ts_min ms, median $ts_med ms, max $ts_max ms"
[ "$ts_min" -ge 0 ] && [ "$ts_max" -le 60000 ] || fail "timestamps differ beyond the documented bounds"
nulls=$(cat "$WORK"/relay.*.norm | grep -c 'tenant=-' || true)
escaped=$(cat "$WORK"/relay.*.norm | grep -c "$(printf 'caf\xc3\xa9' | od -An -tx1 | tr -d ' \n')" || true)
[ "$nulls" -gt 0 ] || fail "no message had a NULL additional column: the NULL header case was not compared"
[ "$escaped" = "$total" ] || fail "expected every payload to carry the non-ASCII text, found $escaped"
log "ok: $compared messages identical on both sides (key, value, partition, id header, $((nulls)) with a NULL column header); differences only in the documented headers"

# The inbox on Debezium's topics.
CDSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$CDB"
setup_inbox_db
cpsql "CREATE TABLE dbz_applied (event_id uuid PRIMARY KEY, key text NOT NULL, times int NOT NULL DEFAULT 1);
       CREATE FUNCTION apply_dbz(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
       RETURNS void LANGUAGE sql AS \$\$
           INSERT INTO dbz_applied VALUES (event_id, key)
               ON CONFLICT (event_id) DO UPDATE SET times = dbz_applied.times + 1 \$\$"
INBOX_TOPICS_TEST="$TOPIC_PREFIX.dbz.order,$TOPIC_PREFIX.dbz.payment" start_inbox dbz INBOX_HANDLER=apply_dbz
wait_until 120 "outbox-inbox to apply Debezium's $total events" \
    metric_is dbz 'inbox_messages_total{result="applied"}' "$total"
head -10 "$WORK/dbz.order.dump" | cut -f3-5 >"$WORK/again.lines"
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" produce "$TOPIC_PREFIX.dbz.order" <"$WORK/again.lines" >"$WORK/again.out" ||
    fail "cannot produce Debezium's messages again"
wait_until 60 "the ten messages produced again counted as duplicates" \
    metric_is dbz 'inbox_messages_total{result="duplicate"}' 10
[ "$(cpsql "SELECT count(*) || ' ' || max(times) FROM dbz_applied")" = "$total 1" ] ||
    fail "Debezium's events applied: $(cpsql "SELECT count(*), max(times) FROM dbz_applied") (want $total, each once)"
psqlc "SELECT event_id FROM outbox_all" | sort >"$WORK/dbz.want"
cpsql "SELECT event_id FROM dbz_applied" | sort | cmp -s - "$WORK/dbz.want" ||
    fail "the handler's event ids are not Debezium's ids"
[ "$(metric dbz 'inbox_messages_total{result="applied"}')" = "$total" ] || fail "the messages produced again were applied"
log "ok: outbox-inbox applied Debezium's $total events once each (identity: its id header), 10 produced again counted as duplicates"
