#!/usr/bin/env bash
# Exactly-once: two tables share the progress topic (one partition), and one of them is
# busy: its relay commits a transaction, and so ends one on the partition, every few ms.
# A read_committed consumer of that partition is never told it reached the end, so the
# other table's relay, taken over after a kill, must finish its read of the progress record
# where its position reaches the high watermark. It does so within seconds, records the
# rows the record lists, and publishes every row of its table exactly once.
. "$(dirname "$0")/lib.sh"
setup_db
OUTBOX_PG_DSN=$DSN OUTBOX_TABLE=public.outbox2 "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate2.log" 2>&1 ||
    { cat "$WORK/migrate2.log"; fail "migrate of outbox2 failed"; }
psqlc "INSERT INTO outbox ($OUTBOX_COLS)
       SELECT 'order', 'k' || (g % 20), 'Created', jsonb_build_object('n', g) FROM generate_series(1, 3000) g"
SHARED=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX"
        OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")
# the busy neighbour: outbox2 under writers at 400 rows/s, to a topic of its own
cat >"$WORK/busy.sql" <<SQL
INSERT INTO outbox2 (aggregate_type, aggregate_id, event_type, payload) VALUES ('busy', 'b' || (random() * 100)::int, 'E', '{}');
SQL
RELAY_ENV=("${SHARED[@]}" OUTBOX_TABLE=public.outbox2 OUTBOX_NOTIFY_CHANNEL=outbox2)
RELAY_USER=postgres start_relay busy >/dev/null # (the roles of deploy/roles.sql are for outbox)
"$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 2 -j 1 -R 400 -T 120 \
    -f "$WORK/busy.sql" "$DB" >"$WORK/pgbench.log" 2>&1 &
writer=$!
RELAY_PIDS+=("$writer")
wait_until 60 "the busy table's relay to commit transactions" metric_at_least busy outbox_transactions_committed_total 20

RELAY_ENV=("${SHARED[@]}" OUTBOX_BATCH_SIZE=200 OUTBOX_MARK_DELAY_MS=1000 OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER=600)
start_relay first >/dev/null
dead() { ! kill -0 "$(relay_pid first)" 2>/dev/null; }
wait_until 60 "the hook to SIGKILL the relay after a commit, before its record" dead
rc=0
wait "$(relay_pid first)" || rc=$?
[ "$rc" = 137 ] || fail "relay exited $rc, not by its hook: $(tail -5 "$WORK/relay-first.log")"

RELAY_ENV=("${SHARED[@]}")
start_relay second >/dev/null
wait_until 60 "every row of outbox SENT" all_sent
line=$(grep -m1 "older producers fenced and the progress record read in" "$WORK/relay-second.log") ||
    fail "the second relay never read the progress record"
ms=$(sed -n 's/.*progress record read in \([0-9]*\) ms.*/\1/p' <<<"$line")
recorded=$(sed -n 's/.*, \([0-9]*\) of them recorded now.*/\1/p' <<<"$line")
log "taken over beside a busy table: progress record read in $ms ms, ${recorded:-0} rows recorded from it"
[ "$ms" -lt 10000 ] || fail "the progress read took $ms ms beside a busy table"
[ "${recorded:-0}" -gt 0 ] || fail "no row recorded from the progress record: the kill tested nothing"
grep -q "progress record was not read within" "$WORK/relay-second.log" &&
    fail "a progress read timed out beside a busy table"
stop_relay second || fail "relay second exited $? on SIGTERM"
committed=$(metric busy outbox_transactions_committed_total)
check "$TOPIC_PREFIX.order" --exact --transactional || fail "a row lost, delivered twice or out of order"
log "ok: the busy neighbour committed $committed transactions meanwhile; every row once"
