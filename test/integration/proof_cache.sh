#!/usr/bin/env bash
# The floors' proof rests on ids drawn in time order: the identity's sequence has CACHE 1.
# With CACHE 20 each writer session draws from a block of its own, so an id below one
# already claimed and proven can be drawn later; claims that start at proven floors would
# not see it (only the safety pass, one partition a second, would). Set while the relay
# runs: the next probe notices, the log names it, outbox_proof_blocked is 1, claims read
# from the bottom, and every row is published at once, each key's rows in order (each
# writer session writes keys of its own, so id order is each key's commit order); CACHE 1
# again, and the floors move on at once — which rests on ALTER SEQUENCE making every session
# drop the ids it drew ahead: a pooled session that drew a block under CACHE 20 and stays
# open gets, for its next row, an id above every row published meanwhile (checked).
. "$(dirname "$0")/lib.sh"
[ "$LAYOUT" = native ] || fail "run in the native layout"
setup_db
start_relay main >/dev/null
wait_until 30 "the relay's first claim" metric_at_least main outbox_claims_total 1
[ "$(metric main outbox_proof_blocked)" = 0 ] || fail "outbox_proof_blocked is not 0 with CACHE 1"
psqlc "ALTER SEQUENCE outbox_id_seq CACHE 20"
cat >"$WORK/cache.sql" <<SQL
\set k random(1, 20)
INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'c' || :client_id || '-' || :k, 'E', '{}');
SQL
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "${WRITER_USER:-postgres}" -c 6 -j 2 -T 10 -R 60 \
    -f "$WORK/cache.sql" "$DB" >"$WORK/pgbench.log" 2>&1 || { cat "$WORK/pgbench.log"; fail "writers failed"; }
out_of_order=$(psqlc "SELECT count(*) FROM (SELECT id < max(id) OVER (ORDER BY xmin::text::bigint, id
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS back FROM outbox) s WHERE back")
log "CACHE 20: $out_of_order rows got an id below one drawn before them (xid order)"
[ "$out_of_order" -gt 0 ] || fail "no id was drawn out of time order: the test proves nothing"
wait_until 10 "every row SENT soon after the writers" all_sent
metric_is main outbox_proof_blocked 1 || fail "outbox_proof_blocked is not 1 with CACHE 20"
grep -q "proof: claims read every lease partition from the bottom.*CACHE 20" "$WORK/relay-main.log" ||
    fail "no log line names CACHE 20"
# a pooled connection draws a block of ids while CACHE is 20 and stays open
mkfifo "$WORK/pooled.in"
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DSN application_name=pooled" <"$WORK/pooled.in" >"$WORK/pooled.out" 2>&1 &
pooled=$!
exec 8>"$WORK/pooled.in"
echo "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'pooled', 'E1', '{}');" >&8
wait_until 5 "the pooled session's first row" rows_are 1 "aggregate_id = 'pooled'"
psqlc "ALTER SEQUENCE outbox_id_seq CACHE 1"
writers 2 100 20 order
wait_until 30 "the rows after CACHE 1 SENT" all_sent
wait_until 5 "the proof going again" metric_is main outbox_proof_blocked 0
# what lets the proof go on at once: ALTER SEQUENCE made the pooled session drop the ids it
# had drawn ahead, so its next row gets an id above every row published meanwhile
echo "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'pooled', 'E2', '{}');" >&8
wait_until 5 "the pooled session's second row" rows_are 2 "aggregate_id = 'pooled'"
[ "$(psqlc "SELECT max(id) FROM outbox WHERE aggregate_id = 'pooled'")" = "$(psqlc "SELECT max(id) FROM outbox")" ] ||
    fail "a session kept ids it drew ahead under CACHE 20 after CACHE 1: the proof may not go on at once"
wait_until 10 "the pooled session's row SENT" all_sent
exec 8>&-
wait "$pooled" || { cat "$WORK/pooled.out"; fail "the pooled session failed"; }
writers 2 100 20 order
wait_until 30 "the rows after it SENT" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact >"$WORK/check-all.out" ||
    { cat "$WORK/check-all.out"; fail "rows lost, repeated or out of order"; }
log "ok: $(cat "$WORK/check-all.out")"
