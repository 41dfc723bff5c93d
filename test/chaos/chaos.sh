#!/usr/bin/env bash
# Chaos run: concurrent writers (writer rule, late commits, stalled inserts) insert events
# over many keys while the relay is SIGKILLed at random moments — each time only after it
# has published since its last start, every second kill in the middle of a burst's drain,
# so that kills hit rows in flight — Kafka is restarted
# twice, and PostgreSQL (its own durable cluster, fsync on) is killed with -m immediate
# once. Then every topic is consumed and compared with the table.
#   test/chaos/chaos.sh [--events N] [--kills K] [--keys N] [--clients N] [--on-sent mark|delete]
#                       [--sink kafka|rabbitmq] [--exactly-once 1 [--groups G]]
# With --exactly-once 1 the relay runs with OUTBOX_EXACTLY_ONCE=1: Kafka is read with
# read_committed and must hold every row once (duplicates 0); a read_uncommitted read shows
# that the faults hit open transactions (their aborted messages). --groups G: with
# OUTBOX_TRANSACTION_GROUPS=G (a producer, transactional.id and progress record per group).
# With --sink rabbitmq the relay publishes to RabbitMQ (the node of scripts/servers.sh), the
# node is restarted instead of Kafka, and a durable queue bound to the run's exchange is
# consumed and compared with the table (test/tools/amqp_check.c).
# Prints one final line:
#   CHAOS committed=.. sent=.. delivered_unique=.. lost=.. duplicates=.. order_violations=.. kills=..
# and exits non-zero if anything was lost or reordered, a row is left PENDING or FAILED, no
# duplicate or restart estimate shows that a kill hit rows in flight, or a relay exited other than by our
# SIGKILL (137) or the final SIGTERM (0) — an ASan abort included.
# Uses the Kafka of scripts/test.sh when RELAYTEST_* is set, else starts its own servers;
# PostgreSQL is always a cluster of its own with fsync on.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
events=200000 kills=20 keys=1000 clients=8 inflight=5000 burst=3000 on_sent=mark sink=kafka eos=0 groups=1
. "$src/scripts/common.sh" # PG_BIN, and the servers when run alone
common_flags "[--events N] [--kills K] [--keys N] [--clients N] [--on-sent mark|delete] [--sink kafka|rabbitmq] [--exactly-once 1 [--groups G]]" \
    "--events=events --kills=kills --keys=keys --clients=clients --on-sent=on_sent --sink=sink --exactly-once=eos --groups=groups" "$@"
if [ -z "${RELAYTEST_PG_PORT:-}" ]; then
    (cd "$src" && common_setup)
    own_servers=1
    servers_start
    RELAYTEST_RELAY_BIN=$src/build/outbox-relay
    RELAYTEST_CHECK_BIN=$src/build/test/outbox-check
    RELAYTEST_AMQP_BIN=$src/build/test/amqp-check
fi
work=$(mktemp -d /tmp/outbox-chaos.XXXXXX)
chmod 755 "$work" # the server runs as the postgres user when this runs as root
pg_dir=$work/pg
pg_port=$(free_ports 2) # (scripts/servers.sh: noted, so that a test beside this run never gets it)
PG_DURABLE=1 bash "$src/test/env/pg.sh" start "$pg_dir" "$pg_port"
trap 'rc=$?; bash "$src/test/env/pg.sh" kill "$pg_dir" >/dev/null 2>&1 || true; [ -z "${own_servers:-}" ] || servers_stop; exit $rc' EXIT
db=chaos_$$
dsn="host=127.0.0.1 port=$pg_port user=postgres dbname=$db"
bootstrap=127.0.0.1:$RELAYTEST_KAFKA_PORT
topic_prefix="chaos.$$.$(date +%s)"
sink_env=(OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$bootstrap") broker=Kafka
if [ "$sink" = rabbitmq ]; then
    amqp_url=amqp://guest:guest@127.0.0.1:$RELAYTEST_RABBITMQ_PORT
    "$RELAYTEST_AMQP_BIN" bind "$amqp_url" "$topic_prefix.x" "$topic_prefix.q" "$topic_prefix.#"
    sink_env=(OUTBOX_SINK=rabbitmq OUTBOX_RABBITMQ_URL="$amqp_url" OUTBOX_RABBITMQ_EXCHANGE="$topic_prefix.x") broker=RabbitMQ
fi
[ "$eos" = 1 ] && sink_env+=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$topic_prefix"
                              OUTBOX_PROGRESS_TOPIC="$topic_prefix.progress" OUTBOX_TRANSACTION_GROUPS="$groups")
say() { printf '# [%s chaos] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
psqlc() { "$PG_BIN/psql" -X -q -At "$dsn" -c "$1"; }

"$PG_BIN/psql" -X -q "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres" -c "CREATE DATABASE $db"
OUTBOX_PG_DSN=$dsn "$RELAYTEST_RELAY_BIN" migrate >"$work/migrate.log" 2>&1
psqlc "CREATE TABLE aggregate (id int PRIMARY KEY, version int NOT NULL DEFAULT 0);
       INSERT INTO aggregate SELECT g FROM generate_series(1, $keys) g;
       CREATE FUNCTION stall() RETURNS trigger LANGUAGE plpgsql AS \$\$
       BEGIN IF NEW.payload->>'stall' = 'true' THEN PERFORM pg_sleep(0.4); END IF; RETURN NEW; END \$\$;
       CREATE TRIGGER a_stall BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION stall();"
# What was committed, for the comparison with Kafka: the table itself when marking; in
# delete mode (acknowledged rows deleted) a trigger records every row written.
psqlc "CREATE TABLE written (id bigint PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text NOT NULL);
       CREATE FUNCTION record_written() RETURNS trigger LANGUAGE plpgsql AS \$\$
       BEGIN INSERT INTO written VALUES (NEW.id, NEW.event_id, NEW.aggregate_id); RETURN NULL; END \$\$;"
[ "$on_sent" = delete ] &&
    psqlc "CREATE TRIGGER b_record AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION record_written()"
rows=outbox
[ "$on_sent" = delete ] && rows=written
view=outbox # where a row's status is read: in keep mode the relay's view of it
[ "$on_sent" = keep ] && view=outbox_kept
# Writer rule: lock the aggregate, insert. 1% commit 0.3 s late; 0.5% stall in a BEFORE
# trigger after drawing their id.
cat >"$work/writer.sql" <<SQL
\set k random(1, $keys)
\set late random(1, 100)
\set stall random(1, 200)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
  VALUES ('order', 'k' || :k, 'E', jsonb_build_object('k', :k, 'stall', :stall = 1, 'pad', repeat('p', 100)));
SELECT pg_sleep(CASE WHEN :late = 1 THEN 0.3 ELSE 0 END);
COMMIT;
SQL

relay_pid=
start_relay() {
    env OUTBOX_PG_DSN="$dsn" "${sink_env[@]}" OUTBOX_HTTP_ADDR= \
        OUTBOX_TOPIC_TEMPLATE="$topic_prefix.{aggregate_type}" OUTBOX_MAX_INFLIGHT=$inflight \
        OUTBOX_POLL_INTERVAL_MS=100 OUTBOX_RETENTION=0 OUTBOX_RELAY_NAME=chaos OUTBOX_ON_SENT="$on_sent" \
        "$RELAYTEST_RELAY_BIN" >>"$work/relay.log" 2>&1 &
    relay_pid=$!
}

writers() {
    while [ "$(psqlc "SELECT count(*) FROM $rows" 2>/dev/null || echo 0)" -lt "$events" ]; do
        "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$pg_port" -U postgres -c "$clients" -j 2 -T 3 \
            -f "$work/writer.sql" "$db" >>"$work/pgbench.log" 2>&1 || sleep 0.5
    done
}

bad_exits=0
sent_count() { # rows acknowledged: SENT, or (delete mode) written and gone
    psqlc "SELECT (SELECT count(*) FROM $rows) - (SELECT count(*) FROM $view WHERE status <> 'SENT')" 2>/dev/null || echo -1
}
# start_tracked: start_relay, remembering how much was SENT when it started
start_tracked() { started_sent=$(sent_count); start_relay; }
# reap STATUS: waits for the relay and checks its exit status
reap() {
    local rc=0
    wait "$relay_pid" 2>/dev/null || rc=$?
    if [ "$rc" != "$1" ]; then
        say "relay $relay_pid exited with $rc, expected $1"
        bad_exits=$((bad_exits + 1))
    fi
}
# published since its last start: more rows SENT than when it started (waits up to 30 s).
# Returns 0 if it has, 2 if it had nothing to publish (no row left PENDING), 1 if rows
# waited and it published none of them for 30 s (a stall) or it died.
wait_published() {
    local deadline=$((SECONDS + 30)) n
    while [ $SECONDS -lt $deadline ]; do
        kill -0 "$relay_pid" 2>/dev/null || return 1
        n=$(sent_count)
        [ "$n" -gt "$started_sent" ] && return 0
        sleep 0.2
    done
    [ "$(psqlc "SELECT count(*) FROM $view WHERE status = 'PENDING'")" = 0 ] && return 2
    return 1
}

# burst_kill: commits a burst of rows (the writer rule: the aggregates locked first) and
# returns as soon as the relay has marked some of them, the rest still in flight
burst_kill() {
    local before deadline
    before=$(sent_count)
    psqlc "BEGIN;
           UPDATE aggregate SET version = version + 1;
           INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', 'k' || (1 + g % $keys), 'E',
                    jsonb_build_object('k', 1 + g % $keys, 'burst', true, 'pad', repeat('p', 100))
             FROM generate_series(1, $burst) g;
           COMMIT;" >/dev/null 2>&1 || return 0
    deadline=$((SECONDS + 30))
    while [ "$(sent_count)" -le "$before" ] && [ $SECONDS -lt $deadline ]; do sleep 0.02; done
}

start_tracked
writers &
writer_pid=$!
done_kills=0 kafka_restarts=0 pg_restarts=0 unpublished_kills=0 idle_kills=0
while [ $done_kills -lt "$kills" ] || kill -0 "$writer_pid" 2>/dev/null; do
    if [ $done_kills -ge "$kills" ]; then
        sleep 0.5
        continue
    fi
    if ! kill -0 "$relay_pid" 2>/dev/null; then
        reap unexpected # it died without our kill: a failure, whatever its status (137 too: an OOM kill)
        say "the relay was dead before kill $((done_kills + 1))"
        start_tracked
    fi
    published=0
    wait_published || published=$?
    case $published in
    1) unpublished_kills=$((unpublished_kills + 1)) ;;
    2) idle_kills=$((idle_kills + 1)) ;;
    esac
    if [ $((done_kills % 2)) = 1 ]; then
        # every second kill lands in the middle of a burst's drain, where rows are always
        # in flight (at the writers' steady rate a random moment may find none)
        burst_kill
    else
        sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", (r % 100) / 100 }')"
    fi
    kill -KILL "$relay_pid" 2>/dev/null || true
    reap 137
    done_kills=$((done_kills + 1))
    if [ $kafka_restarts -lt 2 ] && [ $done_kills -ge $(((kafka_restarts + 1) * kills / 3)) ]; then
        if [ "$sink" = rabbitmq ]; then
            say "restarting RabbitMQ (kill $done_kills)"
            bash "$src/test/env/rabbitmq.sh" stop "$RELAYTEST_RABBITMQ_DIR"
            start_tracked
            sleep 2
            bash "$src/test/env/rabbitmq.sh" restart "$RELAYTEST_RABBITMQ_DIR"
        else
            say "restarting Kafka (kill $done_kills)"
            bash "$src/test/env/kafka.sh" stop "$RELAYTEST_KAFKA_DIR"
            start_tracked
            sleep 2
            bash "$src/test/env/kafka.sh" start "$RELAYTEST_KAFKA_DIR" "$RELAYTEST_KAFKA_PORT"
        fi
        kafka_restarts=$((kafka_restarts + 1))
        continue
    fi
    if [ $pg_restarts -lt 1 ] && [ $done_kills -ge $((kills / 2)) ]; then
        say "killing PostgreSQL with -m immediate (kill $done_kills); fsync is on"
        bash "$src/test/env/pg.sh" kill "$pg_dir"
        start_relay
        sleep 2
        bash "$src/test/env/pg.sh" start "$pg_dir" "$pg_port"
        started_sent=$(sent_count)
        pg_restarts=$((pg_restarts + 1))
        continue
    fi
    start_tracked
done
wait "$writer_pid"
say "writers done: $(psqlc "SELECT count(*) FROM $rows") rows; $done_kills kills ($unpublished_kills while rows waited and the relay had published none of them for 30 s, $idle_kills with nothing to publish), $kafka_restarts $broker restarts, $pg_restarts PostgreSQL crash"
if ! kill -0 "$relay_pid" 2>/dev/null; then
    reap unexpected
    say "the last relay was dead"
    start_relay
fi
deadline=$((SECONDS + 600))
# (a relay that dies while draining ends the wait: a failure, not ten minutes of waiting)
until [ "$(psqlc "SELECT count(*) FROM $view WHERE status <> 'SENT'")" = 0 ] || [ $SECONDS -ge $deadline ] ||
      ! kill -0 "$relay_pid" 2>/dev/null; do sleep 1; done
if kill -0 "$relay_pid" 2>/dev/null; then
    kill -TERM "$relay_pid" 2>/dev/null || true
    reap 0
else
    reap unexpected
    say "the relay died while draining the rest"
fi

committed=$(psqlc "SELECT count(*) FROM $rows")
sent=$(sent_count)
left=$(psqlc "SELECT count(*) FROM $view WHERE status <> 'SENT'")
"$PG_BIN/psql" -X -At -F $'\t' "$dsn" -c "SELECT id, event_id, aggregate_id FROM $rows ORDER BY id" >"$work/expected.tsv"
rc=0
if [ "$sink" = rabbitmq ]; then # the same figures under the names outbox-check gives them
    "$RELAYTEST_AMQP_BIN" check "$amqp_url" "$topic_prefix.q" "$work/expected.tsv" \
        >"$work/check.out" 2>"$work/check.err" || rc=$?
    sed -i 's/ unique=/ delivered_unique=/; s/ missing=/ lost=/' "$work/check.out"
else
    txn=()
    [ "$eos" = 1 ] && txn=(--transactional)
    "$RELAYTEST_CHECK_BIN" --bootstrap "$bootstrap" --topics "$topic_prefix.order" --expected "$work/expected.tsv" \
        "${txn[@]}" >"$work/check.out" 2>"$work/check.err" || rc=$?
fi
aborted=0
if [ "$eos" = 1 ]; then # what read_uncommitted sees beyond it: the aborted transactions' messages
    "$RELAYTEST_CHECK_BIN" --bootstrap "$bootstrap" --topics "$topic_prefix.order" --expected "$work/expected.tsv" \
        --transactional --read-uncommitted >"$work/check-uncommitted.out" 2>/dev/null || true
    aborted=$(sed -n 's/.* duplicates=\([0-9]*\).*/\1/p' "$work/check-uncommitted.out")
fi
grep -v "has [0-9]* partitions" "$work/check.err" | head -20 >&2 || true
line=$(cat "$work/check.out")
val() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<" $line"; }
# each kill republishes at most the window; so may each Kafka restart (acknowledgements lost
# with the connection) and the PostgreSQL crash (marks lost with it)
dup_bound=$(((done_kills + kafka_restarts + pg_restarts) * inflight))
[ "$eos" = 1 ] && dup_bound=0 # exactly-once: none for read_committed
say "duplicates $(val duplicates); bound: ($done_kills kills + $kafka_restarts $broker restarts + $pg_restarts PostgreSQL crash) x OUTBOX_MAX_INFLIGHT $inflight = $dup_bound"
echo "CHAOS sink=$sink on_sent=$on_sent exactly_once=$eos groups=$groups aborted=${aborted:-0} committed=$committed sent=$sent delivered_unique=$(val delivered_unique) lost=$(val lost) duplicates=$(val duplicates) order_violations=$(val order_violations) kills=$done_kills bad_exits=$bad_exits"
# The kills must have hit rows in flight: duplicates in Kafka, or at least a restart that
# found rows claimed and not marked by the relay it replaced (its duplicates estimate; a
# row claimed but not yet acknowledged when the kill came is republished once, not twice).
hit=$(grep -c "PENDING rows are at or below the highest id a relay had claimed" "$work/relay.log" || true)
# exactly-once: kills that hit open transactions left aborted messages
[ "$eos" = 1 ] && hit=$((hit + ${aborted:-0}))
say "restarts that found rows in flight: $hit"
# keep mode: the audit publishes what a broken watermark passed before the check above can
# see it missing, so the run fails if any relay's audit found such a row (its log line;
# the relays here serve no metrics, and a killed relay's count dies with it)
gaps=$(grep -c "never recorded as published" "$work/relay.log" || true)
[ "$on_sent" != keep ] || say "audit: $gaps lines of rows below a watermark never recorded as published"
if [ "$gaps" != 0 ]; then
    say "FAILED: the watermark audit found rows below a watermark that were never published: $(grep -m1 -o "keep: .\{0,160\}" "$work/relay.log")"
    exit 1
fi
if [ "$rc" != 0 ] || [ "$left" != 0 ] || [ "$(val lost)" != 0 ] || [ "$(val order_violations)" != 0 ] ||
   [ "$bad_exits" != 0 ] || { [ "$done_kills" -gt 0 ] && [ "$(val duplicates)" = 0 ] && [ "$hit" = 0 ]; } ||
   [ "$unpublished_kills" != 0 ] || [ "$(val duplicates)" -gt "$dup_bound" ]; then
    say "FAILED: check exit $rc, $left rows not SENT, $bad_exits unexpected relay exits, $unpublished_kills stalls (rows waiting, none published in 30 s), $(val duplicates) duplicates (bound $dup_bound); relay log: $work/relay.log"
    exit 1
fi
rm -rf "$work"
