#!/usr/bin/env bash
# Bad input on a keep-mode outbox partitioned by id (`migrate --partition`): each a clear
# message, nothing lost.
#  - an id beyond every partition: the writer's insert fails naming the missing partition;
#  - an id beyond the identity (OVERRIDING SYSTEM VALUE, inside a partition made ahead): the
#    watermarks stop (outbox_watermark_blocked, the log says why) until the sequence is set
#    past it; then the row is published;
#  - an id below a watermark (an id a rolled-back writer drew): the audit finds and
#    publishes it (outbox_watermark_gaps_total);
#  - parked entries for rows that are not in the table (a failed one, a requeued one): the
#    relay removes them, with a warning naming the ids; nothing else parked changes;
#  - a sequence rewound below the table's rows: start-up refused, naming it.
# Then every row in Kafka exactly once, in key order.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "keep_partitions_input runs with RELAYTEST_ON_SENT=keep"
setup_db
OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=keep "$RELAYTEST_RELAY_BIN" migrate --partition 1000 >"$WORK/partition.log" 2>&1 ||
    { cat "$WORK/partition.log"; fail "migrate --partition failed"; }
all_sent() { rows_are 0 "status = 'PENDING'"; }
last() { psqlc "SELECT last_value FROM outbox_id_seq"; }

RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1 OUTBOX_WATERMARK_AUDIT_MS=640)
start_relay main >/dev/null
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 20), 'E', '{}' FROM generate_series(1, 200) g"
wait_until 30 "the first rows SENT" all_sent

# ---- an id beyond every partition
top=$(psqlc "SELECT max(high) FROM outbox_id_partitions()")
if psqlc "INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE VALUES ($((top + 5)), 'order', 'far', 'E', '{}')" \
    2>"$WORK/far.err"; then
    fail "an id beyond every partition was inserted"
fi
grep -q 'no partition of relation "outbox" found for row' "$WORK/far.err" || { cat "$WORK/far.err"; fail "unclear error"; }

# ---- an id beyond the identity, inside a partition made ahead
beyond=$(($(last) + 50))
psqlc "INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE VALUES ($beyond, 'order', 'beyond', 'E', '{}')"
wait_until 30 "the watermarks stopped" metric_is main outbox_watermark_blocked 1
grep -q "keep:.*$beyond" "$WORK/relay-main.log" ||
    fail "the log does not name the row beyond the identity: $(grep -m3 'keep:' "$WORK/relay-main.log")"
grep -m1 "keep:.*$beyond" "$WORK/relay-main.log" | sed 's/^/# /'
psqlc "SELECT setval('outbox_id_seq', $beyond)" >/dev/null
wait_until 30 "the watermarks going again" metric_is main outbox_watermark_blocked 0
ins_key after-beyond >/dev/null
wait_until 30 "the row beyond the identity published, and the rest" all_sent

# ---- an id below a watermark
plant_below_w planted
wait_until 10 "the audit found the planted row" metric_is main outbox_watermark_gaps_total 1
wait_until 30 "the planted row published" all_sent

# ---- parked entries for rows that are not in the table
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       VALUES ('order', 'p-topic', 'E1', '{}', 'bad topic!')"
wait_until 30 "the bad row parked" rows_are 1 "status = 'FAILED'"
psqlc "INSERT INTO outbox_parked (id, lease_partition, aggregate_id, attempts, last_error, failed)
       VALUES ($((top + 7)), 3, 'ghost', 1, 'by hand', true), ($((top + 9)), 4, 'ghost2', 0, 'by hand', false)"
wait_until 30 "the ghosts removed" eval '[ "$(psqlc "SELECT count(*) FROM outbox_parked WHERE aggregate_id LIKE '"'"'ghost%'"'"'")" = 0 ]'
grep -q "removed 2 parked entries for rows that are not in public.outbox .*ids $((top + 7)),$((top + 9))" \
    "$WORK/relay-main.log" || fail "no warning naming the removed entries"
[ "$(psqlc "SELECT count(*) FROM outbox_parked WHERE failed")" = 1 ] || fail "the real parked row went too"

# ---- a role that cannot run the function keeping the partitions: start-up refused
stop_relay main || fail "the relay exited with $? on SIGTERM"
psqlc "REVOKE EXECUTE ON FUNCTION outbox_partitions(integer, integer, bigint) FROM it_relay"
rc=0
env "${RELAY_BASE_ENV[@]}" timeout 30 "$RELAYTEST_RELAY_BIN" >"$WORK/denied.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "is partitioned by id and this role cannot run the function" "$WORK/denied.log" ||
    fail "no EXECUTE on outbox_partitions: exit $rc: $(grep -m2 error "$WORK/denied.log")"
psqlc "GRANT EXECUTE ON FUNCTION outbox_partitions(integer, integer, bigint) TO it_relay"

# ---- a sequence rewound below the table's rows
high=$(last)
psqlc "SELECT setval('outbox_id_seq', 5)" >/dev/null
rc=0
env "${RELAY_BASE_ENV[@]}" timeout 30 "$RELAYTEST_RELAY_BIN" >"$WORK/rewound.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "was rewound" "$WORK/rewound.log" || fail "a rewound sequence: exit $rc: $(grep -m2 error "$WORK/rewound.log")"
psqlc "SELECT setval('outbox_id_seq', $high)" >/dev/null

CHECK_WHERE="status = 'SENT'" check "$TOPIC_PREFIX.order" --exact || fail "rows lost, published twice or out of key order"
log "ok: $(count_status SENT) rows published once; the bad inputs named and nothing lost"
