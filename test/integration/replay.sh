#!/usr/bin/env bash
# outbox-relay replay, the duplicate-delivery drill: 1,000 events relayed once, then
# replayed by time window (dry run first), by key and by id. A consumer that dedupes by
# event_id (outbox-check: delivered_unique is what it applies) sees exactly as many more
# duplicates as rows replayed and no new effect; a key's replay touches only that key;
# rows stay SENT and untouched (keep mode: nothing written to the table at all); each replay is logged with who, what and how many; a
# window of more than 100,000 rows without --limit is refused (exit 2).
. "$(dirname "$0")/lib.sh"
setup_db
topic="$TOPIC_PREFIX.order"
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
       SELECT 'order', 'k' || (g % 50), 'Placed', jsonb_build_object('n', g),
              jsonb_build_object('trace', 't' || g) FROM generate_series(1, 1000) g"
start_relay main >/dev/null
wait_until 60 "1,000 rows SENT" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
sent_at=$(psqlc "SELECT max(sent_at) FROM outbox_all")
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" "$WORK/check.out" | head -1; }
check "$topic" >/dev/null || fail "the first delivery is not complete"
[ "$(field duplicates)" = 0 ] || fail "duplicates before any replay"

relay_env
replay() { env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay "$@" 2>>"$WORK/replay.log"; }
if delete_mode_refuses "replay" env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --since 1970-01-01 --dry-run; then
    log "ok"
    exit 0
fi

out=$(replay --since 1970-01-01 --dry-run --json) || fail "dry run exited $?"
jq -e '.selected == 1000 and .replayed == 0 and .failed == 0 and .dry_run == true and (.first_id | type == "number") and (.last_id | type == "number")' \
    <<<"$out" >/dev/null || fail "dry run reported: $out"
check "$topic" >/dev/null || fail "check after the dry run"
[ "$(field duplicates)" = 0 ] || fail "the dry run published something"

out=$(replay --since 1970-01-01 --json) || fail "replay of the window exited $?"
jq -e '.selected == 1000 and .replayed == 1000 and .failed == 0 and .dry_run == false' <<<"$out" >/dev/null ||
    fail "replay of the window reported: $out"
check "$topic" >/dev/null || fail "loss or disorder after the replay"
[ "$(field delivered_unique)" = 1000 ] && [ "$(field duplicates)" = 1000 ] ||
    fail "after replaying 1,000 rows: $(cat "$WORK/check.out")"
log "1,000 rows replayed: the deduping consumer saw 1,000 more duplicates, 1,000 unique events (unchanged)"

n7=$(count_where "aggregate_id = 'k7'")
out=$(replay --key k7 --json) || fail "replay of key k7 exited $?"
[ "$(jq -r .replayed <<<"$out")" = "$n7" ] || fail "replay of k7 ($n7 rows) reported: $out"
check "$topic" --verbose >/dev/null || fail "check after the key's replay"
[ "$(field duplicates)" = $((1000 + n7)) ] || fail "after replaying k7: $(grep CHECK "$WORK/check.out")"
# messages per key: k7 three times its rows, every other key twice
"$PG_BIN/psql" -X -At -F $'\t' "$DSN" -c "SELECT aggregate_id, count(*) FROM outbox GROUP BY 1" >"$WORK/rows_per_key"
awk -F'\t' 'NR == FNR { rows[$1] = $2; next } NF == 5 { seen[$4]++ }
            END { for (k in rows) if (seen[k] != rows[k] * (k == "k7" ? 3 : 2)) { print k, rows[k], seen[k]; bad = 1 } exit bad }' \
    "$WORK/rows_per_key" "$WORK/check.out" || fail "a replay of k7 touched other keys (key, rows, messages above)"
log "replay --key k7: $n7 rows, only k7 published again"

first=$(psqlc "SELECT min(id) FROM outbox")
out=$(replay --id "$first") || fail "replay --id exited $?"
grep -q "^replayed 1 of 1 SENT row" <<<"$out" || fail "replay --id reported: $out"
[ "$(count_status SENT)" = 1000 ] && [ "$(psqlc "SELECT max(sent_at) FROM outbox_all")" = "$sent_at" ] ||
    fail "a replay changed rows"
grep -q "replay: .*@.* replayed the rows of public.outbox selected by --key k7: $n7 selected, $n7 delivered, 0 failed" \
    "$WORK/replay.log" || { cat "$WORK/replay.log"; fail "the replay of k7 was not logged with who, what and how many"; }

# Guard rail: more than 100,000 rows in a window needs --limit.
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, status)
       SELECT 'order', 'bulk' || (g % 100), 'Old', '{}', 'SENT' FROM generate_series(1, 100001) g"
# keep mode has no status in the row: the fixture's rows are SENT when every watermark is past them
[ "$ON_SENT" = keep ] && psqlc "INSERT INTO outbox_watermark (lease_partition, w, relay)
       SELECT g, (SELECT max(id) FROM outbox), 'fixture' FROM generate_series(0, 63) g
       ON CONFLICT (lease_partition) DO UPDATE SET w = excluded.w"
rc=0
replay --since 1970-01-01 >/dev/null || rc=$?
[ "$rc" = 2 ] || fail "a window of 101,001 rows without --limit: exit $rc, want 2"
grep -q "more than 100000 SENT rows: give --limit" "$WORK/replay.log" || fail "the refusal does not ask for --limit"
out=$(replay --since 1970-01-01 --limit 10 --dry-run --json) || fail "dry run with --limit exited $?"
[ "$(jq -r .selected <<<"$out")" = 10 ] || fail "--limit 10 selected: $out"
# A window PostgreSQL cannot read (an --until that is no time) ends with its error and exit 1,
# nothing replayed (the cursor's statement fails inside the replay's transaction: the result
# of its BEGIN was once freed twice on that path)
rc=0
msg=$(env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay --since 1970-01-01 --until not-a-time --limit 10 2>&1) ||
    rc=$?
[ "$rc" = 1 ] && grep -q 'invalid input syntax for type timestamp' <<<"$msg" && ! grep -q 'Sanitizer' <<<"$msg" ||
    fail "replay with an --until PostgreSQL cannot read: exit $rc (want 1 and its error), output: $msg"

# Usage errors: exit 2 with what to give.
usage() { # WANT ARGS...: replay ARGS exits 2 saying WANT
    local want=$1 rc=0 msg
    shift
    msg=$(env "${RELAY_BASE_ENV[@]}" "$RELAYTEST_RELAY_BIN" replay "$@" 2>&1) || rc=$?
    [ "$rc" = 2 ] && grep -qF -- "$want" <<<"$msg" || fail "replay $*: exit $rc, message: $msg"
}
usage "give exactly one of --id N, --key K, --since T"
usage "give exactly one of --id N, --key K, --since T" --id 1 --key k1
usage "--until needs --since" --key k1 --until 2026-01-01
usage "--limit: expected a positive number" --since 1970-01-01 --limit 0
usage "--id: expected a positive row id" --id x
if [ "$ON_SENT" = keep ]; then
    written=$(psqlc "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'outbox'")
    [ "$written" = 0 ] || fail "keep mode: the relay or a replay wrote to $written rows of the table"
fi
log "ok"
