#!/usr/bin/env bash
# The backlog gauges (outbox_pending_rows, outbox_oldest_pending_age_seconds) come from a
# statement that reads each lease partition from a bound, not from the bottom of the
# pending index (under a long transaction that read grew to 23 s: lib/relay/outbox.c): from
# the first row the last statement found pending there, or from just above what was
# proven when it was sent, whichever is lower (monitor_heads_bounds). Both halves matter:
#   - a row that commits late, below a row already pending in its partition, is counted
#     (a bound at the head alone would skip it);
#   - a row pending below the proof is still counted once the proof moves past it (a bound
#     just above the proof alone would skip it).
# Rows stay PENDING here because their key waits behind a parked row (a topic the relay
# refuses). The statement from the bottom (at start, then once a minute, sooner after the
# claim floors went to the bottom) would hide either fault: a test hook puts it 10 minutes
# apart, and the test checks that the floors did not go to the bottom meanwhile.
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_TESTHOOK_STATS_BOTTOM_MS=600000)
start_relay main >/dev/null
ins() { # key [topic]
    psqlc "INSERT INTO outbox ($OUTBOX_COLS, topic) VALUES ('order', '$1', 'Created', '{}', ${2:-NULL}) RETURNING id"
}
ins k "'__consumer_offsets'" >/dev/null
wait_until 30 "the row naming __consumer_offsets parked" rows_are 1 "status = 'FAILED'"
wait_until 15 "the gauges counting the parked row" metric_is main outbox_failed_rows 1
resets=$(metric main outbox_floor_resets_total)
# a writer that inserts a row of key k and commits 15 s later (its id below the next row's)
PGAPPNAME=late_writer "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k', 'Created', '{\"late\": true}')" \
    -c "SELECT pg_sleep(15)" -c "COMMIT" >"$WORK/late.log" 2>&1 &
late_pid=$!
late_sleeping() {
    [ "$(psqlc "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'late_writer'
                AND query LIKE '%pg_sleep%'")" = 1 ]
}
wait_until 10 "the late writer's row inserted, its transaction open" late_sleeping
next_id=$(ins k)
wait_until 15 "one row of k pending behind the parked one" metric_is main outbox_pending_rows 1
log "pending 1 (row $next_id; the late row's transaction still open)"
wait "$late_pid" || { cat "$WORK/late.log"; fail "the late writer failed"; }
late_id=$(psqlc "SELECT id FROM outbox WHERE payload ? 'late'")
[ "$late_id" -lt "$next_id" ] || fail "the late row ($late_id) should lie below the row after it ($next_id)"
rows_are 2 "status = 'PENDING'" || fail "two rows of k should be PENDING: $(count_where "status = 'PENDING'")"
wait_until 15 "row $late_id, committed late below row $next_id, counted" metric_is main outbox_pending_rows 2
log "pending 2 once row $late_id committed"
# rows of other keys move the proof past both rows of k; they must still be counted
for i in $(seq 1 20); do ins "other$i" >/dev/null; done
wait_until 30 "the other rows SENT" rows_are 20 "aggregate_id LIKE 'other%' AND status = 'SENT'"
for s in $(seq 1 20); do # four backlog statements and more, each must count both rows
    v=$(metric main outbox_pending_rows)
    [ "$v" = 2 ] || fail "rows pending below the proof not counted: outbox_pending_rows $v at ${s}s, 2 PENDING"
    sleep 1
done
log "pending 2 for 20 s after the proof passed both rows"
[ "$(metric main outbox_floor_resets_total)" = "$resets" ] ||
    fail "the claim floors went to the bottom during the test (the statement from the bottom may have hidden a fault)"
stop_relay main || fail "relay exited with $? on SIGTERM"
log "ok"
