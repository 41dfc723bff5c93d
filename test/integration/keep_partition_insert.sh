#!/usr/bin/env bash
# OUTBOX_ON_SENT=keep on an outbox partitioned by id (migrate --partition): a writer that
# inserts straight into a partition (not through the parent) locks that partition alone,
# and the floors' proof must still wait for it. Its row (drawn from the shared identity)
# stays open 6 s while later rows of its lease partition are published: W of that partition
# stays below it (the relay's live W, from the table after a save, is checked while it is
# open), and once it commits the row is published before the next row of its key. Runs on
# PostgreSQL 15 and 17. (Before the probe read the partitions' locks, W passed the open row
# and the row, once committed, was found only by the audit.)
# Then retention's partition drops (schema 11): a row planted below W in an old partition
# (no record names it; the audit off) keeps that partition from being dropped while a later
# one, wholly published, goes; a relay with the audit on then publishes the row. (Before,
# the drop took the unpublished row with its partition.)
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "run with RELAYTEST_ON_SENT=keep"
setup_db
OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=keep "$RELAYTEST_RELAY_BIN" migrate --partition 1000 >"$WORK/partition.log" 2>&1 ||
    { cat "$WORK/partition.log"; fail "migrate --partition failed"; }
# (a writer inserting straight into a partition draws the id from the identity's sequence
# itself: the partition has no default for it)
# every row ever inserted, whatever a drop takes, for the check against Kafka
track_inserts
RELAY_ENV=(OUTBOX_WATERMARK_AUDIT_MS=86400000 OUTBOX_RETENTION=1s)
start_relay main >/dev/null
p=$(part_of late)
for k in $(keys_in "$p" 5); do ins_key "$k" >/dev/null; done
wait_until 30 "the first rows SENT" all_sent
next=$(($(psqlc "SELECT last_value FROM outbox_id_seq") + 1))
part=$(psqlc "SELECT rel FROM outbox_id_partitions() WHERE coalesce(low, 0) <= $next AND $next < high")
[ -n "$part" ] && [ "$part" != outbox ] || fail "no partition holds id $next"
id_col="id, " id_val="nextval('outbox_id_seq'), "
[ "$(psqlc "SELECT attidentity FROM pg_attribute WHERE attrelid = '$part'::regclass AND attname = 'id'")" != a ] ||
    id_col="" id_val="" # PostgreSQL 17: the partition has the parent's identity
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN application_name=direct_writer" -c "BEGIN" \
    -c "INSERT INTO $part ($id_col$OUTBOX_COLS) VALUES (${id_val}'order', 'late', 'E1', '{}')" \
    -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null 2>"$WORK/direct.err" &
writer=$!
wait_until 5 "the direct writer's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name = '\''direct_writer'\'' AND datname = current_database() AND backend_xid IS NOT NULL")" = 1 ]'
late=$(psqlc "SELECT last_value FROM outbox_id_seq")
[ "$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND mode = 'RowExclusiveLock'")" = 0 ] ||
    fail "the direct writer locked the parent: this test proves nothing on this PostgreSQL"
for k in $(keys_in "$p" 5); do ins_key "$k" >/dev/null; done
wait_until 20 "the rows after the late one SENT" rows_are 5 "id > $late AND lease_partition = $p AND status = 'SENT'"
sleep 3 # W is written every 2 s: the table shows what the relay held by now
w=$(w_of "$p")
[ "$w" -lt "$late" ] || fail "W of partition $p is $w, at or past the open row $late inserted straight into $part"
wait "$writer" || { cat "$WORK/direct.err"; fail "the direct writer failed"; }
ins_key late E2 >/dev/null
wait_until 20 "the late row and its key's next SENT" all_sent
log "a row inserted straight into $part held W of partition $p at $w below it while open"

# ---- a partition drop meets a row below W that no record names
plant_below_w planted
first=$(psqlc "SELECT rel FROM outbox_id_partitions() WHERE coalesce(low, 0) <= $hole AND $hole < high")
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 20), 'E', '{}' FROM generate_series(1, 3100) g"
wait_until 60 "a wholly published old partition dropped" metric_at_least main outbox_partitions_dropped_total 1
sleep 11 # another call of the function: the held partition is still a candidate
[ "$(psqlc "SELECT count(*) FROM outbox_id_partitions() WHERE rel::text = '$first'")" = 1 ] ||
    fail "partition $first, holding row $hole that no record names, was dropped"
[ "$(psqlc "SELECT count(*) FROM outbox WHERE id = $hole")" = 1 ] || fail "row $hole is gone"
log "partition $first kept for row $hole (never published); $(metric main outbox_partitions_dropped_total) other partition(s) dropped"
stop_relay main || fail "relay exited with $? on SIGTERM"
RELAY_ENV=(OUTBOX_WATERMARK_AUDIT_MS=640 OUTBOX_RETENTION=1s)
start_relay audit >/dev/null
wait_until 30 "the audit publishing row $hole" metric_is audit outbox_watermark_gaps_total 1
wait_until 30 "row $hole published" eval '[ "$(psqlc "SELECT count(*) FROM outbox_parked WHERE id = '"$hole"'")" = 0 ]'
stop_relay audit || fail "relay exited with $? on SIGTERM"
check_inserted "$TOPIC_PREFIX.order" || fail "rows lost (dropped unpublished?), repeated or out of key order"
log "ok: $(cat "$WORK/check.out")"
