#!/usr/bin/env bash
# Keep mode's id-range partitions (`outbox-relay migrate --partition IDS`, schema 9) on a live
# table: the step runs while writers insert and a keep relay publishes; nothing is lost,
# published twice or reordered (Kafka against the table); no writer fails; the relay makes
# partitions ahead as the identity climbs; no partition is ever updated or deleted from;
# event_id stays idempotent through <table>_enqueue with no unique index (two sessions at
# once); partitions missing ahead (dropped by hand) make the writer's error clear and are made
# again by the relay; retention drops the partitions that are wholly published and old, and
# keeps the one holding a parked row.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" = keep ] || fail "keep_partitions runs with RELAYTEST_ON_SENT=keep"
setup_db
WIDTH=4000
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1 OUTBOX_RETENTION=0)
partition() { OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=${1:-keep} "$RELAYTEST_RELAY_BIN" migrate --partition "$WIDTH"; }
parts() { psqlc "SELECT count(*) FROM outbox_id_partitions()"; }
ahead() { psqlc "SELECT count(*) FROM outbox_id_partitions() WHERE low > (SELECT last_value FROM outbox_id_seq)"; }

# a bad setting is refused before anything is touched
rc=0
partition mark >"$WORK/refused.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "id-range partitions are keep mode's" "$WORK/refused.log" ||
    { cat "$WORK/refused.log"; fail "--partition with OUTBOX_ON_SENT=mark: expected exit 2 naming keep mode, got $rc"; }

# a row that can never be published (an invalid topic name): parked, its partition is kept
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, topic)
       VALUES ('order', 'p-topic', 'E1', '{}', 'bad topic!')"
start_relay main >/dev/null
writers 4 1500 50 &
wpid=$!
wait_until 60 "1,000 rows published in keep mode" rows_at_least 1000 "status = 'SENT'"
# three at once (sidecars): one does it, the others wait for migrate's lock and find it done
for i in 1 2 3; do partition >"$WORK/partition-$i.log" 2>&1 & eval "mig$i=$!"; done
for i in 1 2 3; do
    eval "wait \$mig$i" || { cat "$WORK/partition-$i.log"; fail "migrate --partition ($i of 3 at once) failed"; }
done
[ "$(cat "$WORK"/partition-?.log | grep -c "is partitioned by id (")" = 1 ] ||
    { cat "$WORK"/partition-?.log; fail "not exactly one of three migrate --partition did the step"; }
[ "$(cat "$WORK"/partition-?.log | grep -c "partitioned by id already")" = 2 ] ||
    { cat "$WORK"/partition-?.log; fail "the two other migrate --partition did not find it done"; }
[ "$(psqlc "SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass")" = p ] || fail "outbox is not partitioned"
log "partitioned with writers and the relay running: $(parts) partitions, $(ahead) ahead"
[ "$(ahead)" -ge 2 ] || fail "fewer than two partitions ahead after the step"
partition >"$WORK/partition2.log" 2>&1 || { cat "$WORK/partition2.log"; fail "migrate --partition again failed"; }
grep -q "partitioned by id already" "$WORK/partition2.log" || fail "the second --partition did not see the first"
wait "$wpid" || fail "writers failed across the step"

# the identity climbs past the partitions made by the step: the relay makes more
created0=$(metric main outbox_partitions_created_total) || fail "outbox_partitions_created_total not exported"
seq_now=$(psqlc "SELECT last_value FROM outbox_id_seq")
high=$(psqlc "SELECT max(high) FROM outbox_id_partitions()")
burst=$((high - seq_now - WIDTH / 2))
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 50 + 1), 'Burst', '{}' FROM generate_series(1, $burst) g"
wait_until 30 "a partition made ahead by the relay" metric_at_least main outbox_partitions_created_total $((created0 + 1))
wait_until 30 "two partitions ahead again" metric_at_least main outbox_partitions_ahead 2
[ "$(metric main outbox_partitions_missing)" = 0 ] || fail "outbox_partitions_missing is not 0 with two ahead"

# enqueue stays idempotent without a unique index: a second session with the same event_id
# waits for the first one's transaction and gets its row
eid=8c1b7a52-9d7e-4c43-9d1a-0d2c6f0e5a11
"$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "SELECT outbox_enqueue('order', 'k-idem', 'Once', '{}'::jsonb, event_id => '$eid')" \
    -c "SELECT pg_sleep(2)" -c "COMMIT" >"$WORK/enqueue-a.out" &
first=$!
sleep 0.5
second_id=$(psqlc "SELECT outbox_enqueue('order', 'k-idem', 'Once', '{}'::jsonb, event_id => '$eid')")
wait "$first" || fail "the first enqueue failed"
first_id=$(head -1 "$WORK/enqueue-a.out")
[ -n "$first_id" ] && [ "$first_id" = "$second_id" ] || fail "two enqueues of one event_id: ids $first_id and $second_id"
[ "$(psqlc "SELECT count(*) FROM outbox WHERE event_id = '$eid'")" = 1 ] || fail "event_id $eid enqueued twice"

# partitions missing ahead (dropped by hand, the relay stopped so that it cannot make them
# again first): the writer's error says so; the relay, started again, makes them
stop_relay main || fail "the keep relay exited with $? on SIGTERM"
psqlc "SELECT 'DROP TABLE ' || rel FROM outbox_id_partitions()
       WHERE low > (SELECT last_value FROM outbox_id_seq)" >"$WORK/drop.sql"
while read -r stmt; do psqlc "$stmt"; done <"$WORK/drop.sql"
seq_now=$(psqlc "SELECT last_value FROM outbox_id_seq")
top=$(psqlc "SELECT max(high) FROM outbox_id_partitions()")
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 50 + 1), 'Fill', '{}'
       FROM generate_series(1, $((top - seq_now - 1))) g"
if psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k-late', 'Missing', '{}')" 2>"$WORK/missing.err"; then
    fail "an insert found a partition that had been dropped"
fi
grep -q 'no partition of relation "outbox" found for row' "$WORK/missing.err" ||
    { cat "$WORK/missing.err"; fail "the writer's error does not say the partition is missing"; }
start_relay main2 >/dev/null
wait_until 30 "the relay made the missing partitions again" metric_at_least main2 outbox_partitions_ahead 2
psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k-late', 'Missing', '{}')" >/dev/null ||
    fail "the insert still fails after the relay made partitions"
grep -q "partitions: made [0-9]* partitions ahead of the identity" "$WORK/relay-main2.log" ||
    fail "the relay did not log the partitions it made"

wait_until 120 "every row but the parked one published" rows_are 1 "status <> 'SENT'"
[ "$(psqlc "SELECT status FROM outbox_kept WHERE aggregate_id = 'p-topic'")" = FAILED ] || fail "the bad row is not parked"
[ "$(psqlc "SELECT coalesce(sum(n_tup_upd + n_tup_del), -1) FROM pg_stat_user_tables
            WHERE relid IN (SELECT rel FROM outbox_id_partitions())")" = 0 ] ||
    fail "a partition was updated or deleted from: $(psqlc "SELECT relname, n_tup_upd, n_tup_del FROM pg_stat_user_tables
            WHERE relid IN (SELECT rel FROM outbox_id_partitions())")"
stop_relay main2 || fail "the keep relay exited with $? on SIGTERM"
CHECK_WHERE="status = 'SENT'" check "$TOPIC_PREFIX.order" --exact ||
    fail "through the partitioning: rows lost, published twice or out of key order"
sent=$(count_status SENT)
# only keep mode keeps partitions: the table cannot leave it
rc=0
OUTBOX_PG_DSN=$DSN OUTBOX_ON_SENT=mark "$RELAYTEST_RELAY_BIN" migrate --leave-keep >"$WORK/leave.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "is partitioned by id" "$WORK/leave.log" ||
    { cat "$WORK/leave.log"; fail "--leave-keep on a partitioned table: expected exit 1 naming the partitions, got $rc"; }
[ "$(psqlc "SELECT count(*) FROM outbox WHERE status <> 'PENDING'")" = 0 ] || fail "the refused --leave-keep changed rows"

# retention: every partition the identity passed, wholly published, goes; the first (the
# parked row's) stays, and so do the partitions the identity has not passed
before=$(parts)
expect=$(psqlc "SELECT count(*) FROM outbox_id_partitions() WHERE low IS NOT NULL
                AND high - 1 <= (SELECT last_value FROM outbox_id_seq)")
[ "$expect" -ge 1 ] || fail "no partition the identity has passed (the test's burst is too small)"
RELAY_ENV=(OUTBOX_MAX_ATTEMPTS=1 OUTBOX_RETENTION=1s)
start_relay retain >/dev/null
wait_until 60 "retention dropped $expect partitions" metric_at_least retain outbox_partitions_dropped_total "$expect"
stop_relay retain || fail "the retention relay exited with $? on SIGTERM"
after=$(parts)
[ "$after" = $((before - expect)) ] || fail "partitions: $before before, $after after, $expect expected to go"
[ "$(psqlc "SELECT count(*) FROM outbox_id_partitions() WHERE low IS NULL")" = 1 ] ||
    fail "the partition holding the parked row was dropped"
[ "$(psqlc "SELECT count(*) FROM outbox_kept WHERE status = 'PENDING'")" = 0 ] || fail "a row left is PENDING"
grep "retention: dropped" "$WORK/relay-retain.log" | sed 's/^/# /'

# a partition dropped by hand while it holds rows never published: the relay says so, once,
# and goes on with the rest
seq_now=$(psqlc "SELECT last_value FROM outbox_id_seq")
read -r lost_rel lost_high < <(psqlc "SELECT rel, high FROM outbox_id_partitions() WHERE low <= $seq_now + 1 AND high > $seq_now + 1" | tr '|' ' ')
[ -n "$lost_high" ] || fail "no partition holds the next id"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 50 + 1), 'Doomed', '{}'
       FROM generate_series(1, $((lost_high - seq_now - 1))) g"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 50 + 1), 'After', '{}' FROM generate_series(1, 10) g"
doomed=$(psqlc "SELECT count(*) FROM $lost_rel")
psqlc "DROP TABLE $lost_rel"
start_relay lost >/dev/null
wait_until 30 "the partition dropped by hand reported" metric_at_least lost outbox_partitions_lost_total 1
grep -q "are gone, and the relay did not drop them" "$WORK/relay-lost.log" || fail "the log does not say a partition was dropped by hand"
grep "are gone" "$WORK/relay-lost.log" | sed 's/^/# /'
wait_until 60 "the rows after the lost partition published" rows_are 10 "event_type = 'After' AND status = 'SENT'"
sleep 11 # another maintenance call: reported once
[ "$(metric lost outbox_partitions_lost_total)" = 1 ] || fail "the lost partition was reported again"
stop_relay lost || fail "the relay exited with $? on SIGTERM"
log "a partition of $doomed rows never published, dropped by hand: reported once, the rest published"
log "ok: $sent rows published exactly once through the step; partitions $before -> $after"
