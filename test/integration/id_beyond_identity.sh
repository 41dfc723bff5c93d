#!/usr/bin/env bash
# A row inserted with an id far beyond the identity's last value (OVERRIDING SYSTEM VALUE, as
# COPY with ids, logical replication into the table or a restore would) breaks the premise
# that ids are drawn in time order. It must not move the proof: the relay names it (log and
# outbox_id_beyond_identity), the floors and keep mode's watermarks stay at or below the
# identity's value, the 500 ordinary rows written after it are published at once, in key
# order, and retention (5 s here) deletes none of them unpublished. (Before the proof read
# the identity, every watermark jumped to the row's id within 3 s, the next rows were never
# claimed and retention deleted them; in mark mode only the safety pass found them.)
. "$(dirname "$0")/lib.sh"
setup_db
# every row ever inserted, whatever retention deletes, for the check against Kafka
track_inserts
RELAY_ENV=(OUTBOX_RETENTION=5s)
start_relay main >/dev/null
writers 2 50 20 order
wait_until 30 "the first rows SENT" all_sent
[ "$(metric main outbox_id_beyond_identity)" = 0 ] || fail "outbox_id_beyond_identity is not 0 before any such row"

last=$(psqlc "SELECT last_value FROM outbox_id_seq")
far=$((last + 1000000))
psqlc "INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE VALUES ($far, 'order', 'far', 'E', '{}')"
wait_until 15 "the relay naming the row beyond the identity" metric_is main outbox_id_beyond_identity "$far"
grep -q "proof: row $far was claimed with an id beyond the identity's last value" "$WORK/relay-main.log" ||
    fail "no log line names row $far"
log "named: $(grep -m1 -o "proof: row $far .\{0,80\}" "$WORK/relay-main.log")"

before=$(psqlc "SELECT count(*) FROM inserted")
writers 2 250 50 order
wait_until 15 "the 500 rows after it published" all_sent
if [ "$ON_SENT" = keep ]; then
    seq=$(psqlc "SELECT last_value FROM outbox_id_seq")
    high=$(psqlc "SELECT coalesce(max(w), 0) FROM outbox_watermark")
    [ "$high" -le "$seq" ] || fail "a watermark ($high) passed the identity's last value ($seq)"
    log "watermarks at most $high, the identity at $seq"
fi
sleep 8 # retention (5 s) has its chances to delete what it may
rows=$(($(psqlc "SELECT count(*) FROM inserted") - before))
[ "$rows" = 500 ] || fail "$rows rows written after the far row, want 500"
stop_relay main || fail "relay exited with $? on SIGTERM"
check_inserted "$TOPIC_PREFIX.order" || fail "rows lost (deleted unpublished?), repeated or out of key order"
log "ok: $(cat "$WORK/check.out")"
