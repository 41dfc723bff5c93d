#!/usr/bin/env bash
# Operating the relay: retention deletes old SENT rows in small batches; a long open
# transaction is reported by pid and application_name in the log and metrics within a
# minute; `outbox-relay status --json` has the documented shape; `purge` runs retention now.
. "$(dirname "$0")/lib.sh"
setup_db
RELAY_ENV=(OUTBOX_RETENTION=3s)
start_relay main >/dev/null
writers 4 500 50
wait_until 60 "rows SENT" all_sent
if [ "$ON_SENT" = delete ]; then # the relay deletes what it published: retention finds nothing
    wait_until 30 "the published rows deleted" eval '[ "$(psqlc "SELECT count(*) FROM outbox")" = 0 ]'
    [ "$(metric main outbox_retention_deleted_total)" = 0 ] || fail "retention deleted rows in delete mode"
    log "delete mode: the relay deleted the rows it published; retention had none to delete"
else
    wait_until 30 "retention deleted the SENT rows" rows_are 0 true
    wait_until 10 "outbox_retention_deleted_total counts them" metric_at_least main outbox_retention_deleted_total 2000
    log "retention deleted $(metric main outbox_retention_deleted_total) rows"
fi

# A long transaction: opened now, must be reported within 60 s (threshold 30 s by default).
"$PG_BIN/psql" -X -q "$DSN application_name=stuck-batch-job" \
    -c "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(75); COMMIT;" >/dev/null 2>&1 &
holder=$!
started=$SECONDS
wait_until 60 "long transaction logged" grep -q "long-running transaction: .*application_name='stuck-batch-job'" "$WORK/relay-main.log"
log "long transaction reported after $((SECONDS - started)) s: $(grep -o "long-running transaction: [^:]*" "$WORK/relay-main.log" | head -1)"
wait_until 10 "long transaction metric" exported main 'outbox_long_transaction_age_seconds{.*application_name="stuck-batch-job"'
curl -sf "http://127.0.0.1:$(http_port main)/status" | grep '"application_name":"stuck-batch-job"' >/dev/null ||
    fail "/status does not name the long transaction"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true

# status --json, with one parked row and a backlog on a second topic.
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', 'bad', 'E', '{}', '[1]')"
wait_until 20 "poison row parked" rows_are 1 "status = 'FAILED'"
"$RELAYTEST_RELAY_BIN" status --json --pg-dsn "$DSN" --topic-template "$TOPIC_PREFIX.{aggregate_type}" >"$WORK/status.json"
cat "$WORK/status.json" | sed 's/^/#   /' | head -40
jq -e --argjson version "$(ls "$RELAYTEST_SRC"/schema/[0-9]*.sql | wc -l)" '
  (.table == "public.outbox") and (.schema_version == $version) and (.layout == "native")
  and (.pending_rows | type == "number")
  and (.failed_rows == 1) and (.oldest_pending_age_seconds == null or (.oldest_pending_age_seconds | type == "number"))
  and (.parked | length == 1) and (.parked[0] | has("id") and has("aggregate_id") and has("event_type")
       and has("topic") and has("attempts") and has("last_error") and has("created_at"))
  and (.parked[0].aggregate_id == "bad") and (.parked[0].last_error | test("JSON object"))
  and (.topics | type == "array") and (.topics[0] | has("topic") and has("pending_rows") and has("failed_rows"))
  and (.relays | length >= 1) and (.relays[0] | has("relay") and has("pid") and has("client_addr")
       and has("connected_since") and has("claimed_high") and has("last_claim_at") and has("partitions"))
  and (.relays[0].partitions == 64)
' "$WORK/status.json" >/dev/null || fail "status --json does not have the documented shape"

stop_relay main || fail "relay exited with $? on SIGTERM"
writers 2 100 10
psqlc "UPDATE outbox SET status = 'SENT', sent_at = now() - interval '1 hour' WHERE status = 'PENDING'"
out=$("$RELAYTEST_RELAY_BIN" purge --json --retention 10m --pg-dsn "$DSN")
[ "$out" = '{"deleted": 200}' ] || fail "purge --json: $out"

# Retention (the relay's and purge's statement) deletes old SENT rows and nothing else:
# PENDING and parked rows of any age stay, and so do recent SENT rows.
psqlc "DELETE FROM outbox"
mixed() { # n status sent_at
    psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status, sent_at, created_at)
           SELECT 'order', 'm' || g, 'E', '{}', '$2', $3, now() - interval '2 days' FROM generate_series(1, $1) g"
}
mixed 5 PENDING NULL
mixed 3 FAILED NULL
mixed 4 SENT "now()"
mixed 6 SENT "now() - interval '1 hour'"
out=$("$RELAYTEST_RELAY_BIN" purge --json --retention 10m --pg-dsn "$DSN")
[ "$out" = '{"deleted": 6}' ] || fail "purge with mixed rows: $out (want 6 old SENT rows deleted)"
left=$(psqlc "SELECT string_agg(status || '=' || n, ' ' ORDER BY status) FROM (SELECT status, count(*) n FROM outbox GROUP BY 1) s")
[ "$left" = "FAILED=3 PENDING=5 SENT=4" ] || fail "after retention: $left"
log "retention with mixed rows: deleted the 6 old SENT rows; kept $left"
log "ok"
