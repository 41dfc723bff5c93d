#!/usr/bin/env bash
# outbox-relay audit: the table against Kafka, on the relay's own role.
#  1. a clean run of 2,000 rows: lost 0, no duplicates or disorder, completion
#     percentiles present, every row judged; exit 0; the JSON shape the README documents;
#  2. a row set to SENT by hand (never published): exit 1, the row named by id;
#  3. --since/--until select a window: only its rows counted;
#  4. replayed rows show as duplicates (outbox-check agrees);
#  5. retention (DeleteRecords moves a partition's low watermark, as deleting old segments
#     does): the rows whose messages are gone are unverifiable, not lost, and the topic
#     says from when it could verify; exit 0; a later row that never reached Kafka is
#     still lost;
#  6. a key's first deliveries out of id order: an order violation, named; exit 1.
# Crash-before-mark duplicates are audited in crash_before_mark.sh.
# In keep mode (audit_keep) a row "set to SENT by hand" is also passed by its partition's
# watermark, set by hand: what the view outbox_kept then shows SENT; the relays' own audit,
# which would find and publish such a row, runs once a day here (keep_watermark tests it).
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_WATERMARK_AUDIT_MS=86400000)
# by_hand ID: in keep mode, the watermark of row ID's partition raised to it
by_hand() {
    [ "$ON_SENT" = keep ] || return 0
    psqlc "INSERT INTO outbox_watermark (lease_partition, w, relay) SELECT lease_partition, id, 'by hand'
           FROM outbox WHERE id = $1 ON CONFLICT (lease_partition) DO UPDATE SET w = greatest(outbox_watermark.w, excluded.w)"
}
topic="$TOPIC_PREFIX.order"
relay_env
audit() { env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit "$@" 2>>"$WORK/audit.log"; }
if delete_mode_refuses "audit" env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit; then
    log "ok"
    exit 0
fi

psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 40), 'Placed', jsonb_build_object('n', g) FROM generate_series(1, 2000) g"
start_relay main >/dev/null
wait_until 60 "2,000 rows SENT" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"

# 1. Clean run.
out=$(audit --json) || fail "audit of a clean run exited $? ($(tail -3 "$WORK/audit.log"))"
echo "$out" >"$WORK/audit1.json"
jq -e --arg t "$topic" '.table == "public.outbox" and .since == null and .until == null
       and .committed == 2000 and .sent == 2000 and .pending == 0 and .parked == 0 and .sent_after_start == 0
       and .delivered == 2000 and .lost == 0 and .unverifiable == 0 and .duplicates == 0
       and .order_violations == 0 and .other_messages == 0
       and (.completion_ms.p50 | type == "number") and (.completion_ms.p99 >= .completion_ms.p50)
       and .completion_ms.measured_to == "marked_sent"
       and (.topics | length == 1) and .topics[0].topic == $t and .topics[0].messages_read == 2000
       and (.topics[0].partitions | type == "number") and .topics[0].verified_from == null
       and .lost_rows == []' <<<"$out" >/dev/null || fail "clean run: $out"
log "clean run: $(jq -c '{committed, delivered, lost, duplicates, order_violations, completion_ms}' <<<"$out")"
text=$(audit) || fail "text audit exited $?"
grep -q "delivered 2000, lost 0, duplicates 0, order violations 0" <<<"$text" || fail "text report: $text"
grep -q "completion, created to marked SENT: p50 " <<<"$text" || fail "text report has no completion: $text"

# 2. A row marked SENT that never reached Kafka.
ghost=$(psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, sent_at)
               VALUES ('order', 'ghost', 'Placed', '{}', 'SENT', clock_timestamp() - interval '1 second') RETURNING id")
by_hand "$ghost"
ghost_event=$(psqlc "SELECT event_id FROM outbox WHERE id = $ghost")
rc=0
out=$(audit --json) || rc=$?
[ "$rc" = 1 ] || fail "audit with a lost row: exit $rc, want 1"
jq -e --argjson id "$ghost" --arg ev "$ghost_event" '.lost == 1 and .delivered == 2000 and .committed == 2001
       and .lost_rows == [{"id": $id, "event_id": $ev, "key": "ghost", "topic": .topics[0].topic}]' <<<"$out" >/dev/null ||
    fail "lost row report: $out"
grep -q "audit: lost: row $ghost (event_id $ghost_event, key 'ghost') was marked SENT at .* and is in no partition of $topic" \
    "$WORK/audit.log" || fail "the lost row is not named on the log"
log "row $ghost set to SENT by hand: exit 1, named"
psqlc "DELETE FROM outbox WHERE id = $ghost"

# 3. A window: rows created in a second batch only.
sleep 1
mid=$(psqlc "SELECT clock_timestamp()")
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 40), 'Paid', jsonb_build_object('n', g) FROM generate_series(1, 300) g"
start_relay second >/dev/null
wait_until 60 "300 more rows SENT" all_sent
stop_relay second || fail "relay exited with $? on SIGTERM"
out=$(audit --since "$mid" --json) || fail "audit --since exited $?"
jq -e --arg mid "$mid" '.since == $mid and .committed == 300 and .delivered == 300 and .lost == 0
       and .duplicates == 0 and .order_violations == 0' <<<"$out" >/dev/null || fail "audit --since: $out"
out=$(audit --until "$mid" --json) || fail "audit --until exited $?"
jq -e '.committed == 2000 and .delivered == 2000 and .lost == 0 and .other_messages == 300' <<<"$out" >/dev/null ||
    fail "audit --until: $out"
log "--since/--until: 300 and 2,000 rows, the other messages counted apart"

# 4. Replayed rows are duplicates.
n3=$(count_where "aggregate_id = 'k3'")
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --key k3 >/dev/null 2>>"$WORK/audit.log" || fail "replay failed"
out=$(audit --json) || fail "audit after a replay exited $?"
check "$topic" >/dev/null || fail "outbox-check after the replay"
dups=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$WORK/check.out")
jq -e --argjson n "$n3" '.duplicates == $n and .delivered == 2300 and .lost == 0 and .order_violations == 0' <<<"$out" >/dev/null &&
    [ "$dups" = "$n3" ] || fail "after replaying $n3 rows of k3: outbox-check $dups duplicates, audit $(jq -c . <<<"$out")"
log "replay of k3 ($n3 rows): audit and outbox-check both count $n3 duplicates"

# 5. Retention: delete the first half of the messages of partition 0.
check "$topic" --verbose >/dev/null || fail "outbox-check --verbose"
# topic partition offset key id: messages of partition 0, in offset order
awk -F'\t' 'NF == 5 && $2 == 0' "$WORK/check.out" | sort -t$'\t' -k3,3n >"$WORK/p0"
n0=$(wc -l <"$WORK/p0")
[ "$n0" -ge 100 ] || fail "partition 0 holds only $n0 messages"
cut_at=$(awk -F'\t' -v n="$n0" 'NR == int(n / 2) { print $3 + 1 }' "$WORK/p0")
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" delete-records "$topic" 0 "$cut_at" || fail "delete-records failed"
# the events whose every message was deleted
gone=$(awk -F'\t' -v c="$cut_at" '$3 < c { below[$5] = 1 } $3 >= c { kept[$5] = 1 }
                     END { for (id in below) if (!(id in kept)) n++; print n + 0 }' "$WORK/p0")
last_gone=$(awk -F'\t' -v c="$cut_at" '$3 < c { print $5 }' "$WORK/p0" | sort -n | tail -1)
rc=0
out=$(audit --json) || rc=$?
[ "$rc" = 0 ] || fail "audit after retention deleted $gone events: exit $rc: $out"
# verified only for rows created after the deleted ones
from=$(jq -r '.topics[0].verified_from' <<<"$out")
covered=$(psqlc "SELECT created_at <= '$from'::timestamptz FROM outbox WHERE id = $last_gone" 2>/dev/null || echo f)
jq -e --argjson gone "$gone" '.lost == 0 and .unverifiable == $gone' <<<"$out" >/dev/null && [ "$covered" = t ] ||
    fail "audit after retention deleted the only messages of $gone events (the last row $last_gone): $out"
log "retention deleted the messages of $gone events of partition 0: $gone rows unverifiable (verified from $from), lost 0"
# a row created after that bound and never published is still lost
ghost=$(psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, sent_at)
               VALUES ('order', 'ghost', 'Placed', '{}', 'SENT', clock_timestamp()) RETURNING id")
by_hand "$ghost"
sleep 0.2
rc=0
out=$(audit --json) || rc=$?
[ "$rc" = 1 ] && jq -e --argjson id "$ghost" --argjson gone "$gone" '.lost == 1 and .lost_rows[0].id == $id
       and .unverifiable == $gone' <<<"$out" >/dev/null || fail "a lost row beside truncated partitions: exit $rc: $out"

# 6. Order: a row of key 'late' marked SENT by hand, two later rows of the key relayed, then
# the first row replayed: its first delivery comes after theirs.
late=$(psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, sent_at)
              VALUES ('order', 'late', 'Placed', '{}', 'SENT', clock_timestamp()) RETURNING id")
by_hand "$late"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES
       ('order', 'late', 'Paid', '{}'), ('order', 'late', 'Shipped', '{}')"
start_relay third >/dev/null
wait_until 60 "the rows of key 'late' SENT" all_sent
stop_relay third || fail "relay exited with $? on SIGTERM"
env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --id "$late" >/dev/null 2>>"$WORK/audit.log" || fail "replay --id $late"
rc=0
out=$(audit --json) || rc=$?
[ "$rc" = 1 ] && jq -e '.order_violations == 1 and .lost == 1' <<<"$out" >/dev/null ||
    fail "a key's rows delivered out of order: exit $rc: $out"
grep -q "audit: order: row $late of key 'late' was first delivered to $topic after row $((late + 2))" "$WORK/audit.log" ||
    fail "the order violation is not named on the log"
log "row $late first delivered after rows $((late + 1)) and $((late + 2)) of its key: one order violation, named"

# Usage errors.
rc=0
msg=$(env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" audit --limit 5 2>&1) || rc=$?
[ "$rc" = 2 ] && grep -q "audit: only --since T, --until T and --json apply" <<<"$msg" || fail "audit --limit: exit $rc: $msg"
log "ok"
