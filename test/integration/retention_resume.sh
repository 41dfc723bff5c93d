#!/usr/bin/env bash
# Retention starts most cycles where the last one stopped (the first row it left) and one in
# every few from the bottom (OUTBOX_TESTHOOK_PURGE_BOTTOM_EVERY=3 here, 30 in production): a
# row that committed below that point after a cycle had passed it (a late commit), published
# and too old since, is deleted by the next cycle from the bottom, not left for ever.
. "$(dirname "$0")/lib.sh"
[ "$ON_SENT" != delete ] || fail "delete mode keeps no SENT rows: run in mark or keep mode"
setup_db
RELAY_ENV=(OUTBOX_RETENTION=2s OUTBOX_TESTHOOK_PURGE_BOTTOM_EVERY=3)
start_relay main >/dev/null
# a writer whose row takes a low id and commits 25 s later, its key its own
psqlc "INSERT INTO aggregate (id) VALUES ('late') ON CONFLICT DO NOTHING"
"$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
    -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'late', 'Updated', '{\"late\": true}') RETURNING id" \
    -c "SELECT pg_sleep(25)" -c "COMMIT" >"$WORK/late.out" 2>&1 &
late=$!
sleep 1
writers 2 100 10
wait_until 60 "the later rows published and deleted by retention" metric_at_least main outbox_retention_deleted_total 200
wait "$late" || { cat "$WORK/late.out"; fail "the late writer failed"; }
late_id=$(head -1 "$WORK/late.out")
log "row $late_id committed after retention had deleted the 200 rows above it"
wait_until 30 "the late row published" all_sent
wait_until 60 "retention deleting the late row (a cycle from the bottom)" \
    eval '[ "$(psqlc "SELECT count(*) FROM outbox WHERE id = $late_id")" = 0 ]'
stop_relay main || fail "relay exited with $? on SIGTERM"
log "ok: row $late_id deleted by retention after its late commit"
