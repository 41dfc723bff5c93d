#!/usr/bin/env bash
# The floors' proof moves under ordinary overlapping writers: sixteen writers whose
# transactions each lock their aggregate, insert an outbox row and then do other work for
# 0.3-1 s before committing (staggered: at every probe some of them are open), beside fast
# writers. While they write:
#  - claims start above the proven floors: at most one claim a second from the bottom;
#  - in keep mode the watermark is set and moves up while they write (it stayed empty
#    until they stopped when a candidate needed every writer of one probe gone by the next);
#  - a writer that holds a low id for 16 s beside them holds the proof back (the floors and
#    W stay below it; the log names it) and its row is published at its commit;
# and afterwards every row is published once, in key order, and in keep mode the audit
# found no row that W passed unpublished.
. "$(dirname "$0")/lib.sh"
setup_db
SECS=${OVERLAP_SECONDS:-34}
# in keep mode the audit goes over all 64 partitions every 640 ms (60 s by default)
[ "$ON_SENT" != keep ] || RELAY_ENV=(OUTBOX_WATERMARK_AUDIT_MS=640)
start_relay main >/dev/null
wait_until 30 "the relay's first claim" metric_at_least main outbox_claims_total 1

psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, 2000) g"
cat >"$WORK/slow.sql" <<SQL
\set k random(1, 1000)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k;
INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k' || :k, 'Slow', '{}');
SELECT pg_sleep(0.3 + random() * 0.7);
COMMIT;
SQL
cat >"$WORK/fast.sql" <<SQL
\set k random(1001, 2000)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k;
INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k' || :k, 'Fast', '{}');
COMMIT;
SQL
pgb() { # pgb NAME CLIENTS [pgbench flags...]: writers for SECS seconds, in the background
    local name=$1 clients=$2
    shift 2
    "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "${WRITER_USER:-postgres}" -c "$clients" -j 1 \
        -T "$SECS" -f "$WORK/$name.sql" "$@" "$DB" >"$WORK/pgbench-$name.log" 2>&1
}
pgb slow 16 &
slow=$!
pgb fast 2 -R 400 &
fast=$!
RELAY_PIDS+=("$slow" "$fast")

sleep 4 # the writers overlap from here on
open=$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND mode = 'RowExclusiveLock'")
[ "$open" -ge 4 ] || fail "only $open writers open at once: the load does not overlap"
b0=$(metric main outbox_claims_from_bottom_total) c0=$(metric main outbox_claims_total) t0=$SECONDS
w0=0
[ "$ON_SENT" != keep ] || w0=$(psqlc "SELECT coalesce(sum(w), 0) FROM outbox_watermark")
sleep $((SECS - 24))
b1=$(metric main outbox_claims_from_bottom_total) c1=$(metric main outbox_claims_total) t1=$SECONDS
open=$(psqlc "SELECT count(*) FROM pg_locks WHERE relation = 'outbox'::regclass AND mode = 'RowExclusiveLock'")
[ "$open" -ge 4 ] || fail "only $open writers open at the end of the window: the load did not overlap throughout"
claims=$((c1 - c0)) bottom=$((b1 - b0)) span=$((t1 - t0))
log "with ${open}+ writers open at every moment: $claims claims in ${span}s, $bottom of them from the bottom"
[ "$claims" -ge 20 ] || fail "only $claims claims in ${span}s: too few for the share to mean anything"
[ "$bottom" -le "$span" ] || fail "$bottom of $claims claims in ${span}s started from the bottom: the proof does not move under overlapping writers"
if [ "$ON_SENT" = keep ]; then
    w1=$(psqlc "SELECT coalesce(sum(w), 0) FROM outbox_watermark")
    parts=$(psqlc "SELECT count(*) FROM outbox_watermark")
    log "keep mode: watermarks of $parts partitions, their sum moved from $w0 to $w1 while the writers wrote"
    [ "$w1" -gt "$w0" ] || fail "the watermark did not move while the writers wrote (sum $w0 -> $w1)"
fi

# a writer that holds a low id across 40+ probes while the others start and end
psqlc "INSERT INTO aggregate (id) VALUES ('late')"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN application_name=late_writer" -c "BEGIN" \
    -c "UPDATE aggregate SET version = version + 1 WHERE id = 'late'" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'Late', '{}')" \
    -c "SELECT pg_sleep(16)" -c "COMMIT" >/dev/null &
late_writer=$!
wait_until 5 "the late row's id drawn" eval '[ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name = '\''late_writer'\'' AND datname = current_database() AND backend_xid IS NOT NULL")" = 1 ]'
late=$(psqlc "SELECT last_value FROM outbox_id_seq")
# (the proof waits from the first probe after a claim that follows the writer's lock: a
# busy session may start the wait a second or two late; the writer stays 16 s)
wait_until 15 "the proof held back by the late writer for 10 s" eval '[ "$(metric main outbox_proof_held_seconds | cut -d. -f1)" -ge 10 ]'
wait_until 5 "the log naming the late writer" grep -q 'proof: the floors.* waited .* still open: pid [0-9]* (application_name "late_writer"' "$WORK/relay-main.log"
if [ "$ON_SENT" = keep ]; then
    p=$(part_of late)
    w=$(w_of "$p")
    [ "$w" -lt "$late" ] || fail "W of partition $p is $w, past the late row $late still open"
fi
[ "$(count_where "aggregate_id = 'late'")" = 0 ] || fail "the late row is visible before its writer committed"
wait "$late_writer" || fail "the late writer failed"
wait_until 10 "the late row SENT soon after its commit" rows_are 1 "aggregate_id = 'late' AND status = 'SENT'"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'After', '{}')" # its key's next event
log "a writer open 16 s beside them held the proof back (named in the log), and its row was published at its commit"
wait "$slow" || { cat "$WORK/pgbench-slow.log"; fail "the slow writers failed"; }
wait "$fast" || { cat "$WORK/pgbench-fast.log"; fail "the fast writers failed"; }
wait_until 60 "every row SENT" all_sent
if [ "$ON_SENT" = keep ]; then
    # the audit repairs what a broken W skipped: it must have found nothing here
    wait_until 20 "a round of audits" metric_at_least main outbox_watermark_audits_total 64
    gaps=$(metric main outbox_watermark_gaps_total) || fail "cannot read outbox_watermark_gaps_total"
    [ "$gaps" = 0 ] || fail "the audit found $gaps rows that W passed unpublished"
    ! grep -q "never recorded as published" "$WORK/relay-main.log" || fail "the audit logged a gap"
fi
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact >"$WORK/check-all.out" ||
    { cat "$WORK/check-all.out"; fail "rows lost, repeated or out of order"; }
log "ok: $(cat "$WORK/check-all.out")"
