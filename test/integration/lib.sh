#!/usr/bin/env bash
# Shared helpers for integration tests. The runner (scripts/test.sh) starts PostgreSQL and
# Kafka and exports: RELAYTEST_PG_PORT, RELAYTEST_PG_DIR, RELAYTEST_KAFKA_PORT,
# RELAYTEST_KAFKA_DIR, RELAYTEST_RELAY_BIN, RELAYTEST_CHECK_BIN, RELAYTEST_SRC.
# A test that cannot reach its servers fails; it never skips.
set -euo pipefail
. "${RELAYTEST_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}/scripts/common.sh"

TEST_NAME=$(basename "$0" .sh)
# RUN_NAME: the test's name in meson (RELAYTEST_NAME, e.g. flow_keep for flow.sh in keep mode).
# Tests run two or three at a time, variants of one script among them: the database, the
# work directory and the topic prefix are named by it, so no two runs share one.
RUN_NAME=${RELAYTEST_NAME:-$TEST_NAME}
: "${RELAYTEST_PG_PORT:?run through scripts/test.sh (PostgreSQL not started)}"
: "${RELAYTEST_KAFKA_PORT:?run through scripts/test.sh (Kafka not started)}"
BOOTSTRAP=127.0.0.1:$RELAYTEST_KAFKA_PORT
DB=t_${RUN_NAME//-/_}
DSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$DB"
WORK=$(mktemp -d "/tmp/outbox-it-$RUN_NAME.XXXXXX")
TOPIC_PREFIX="it.$RUN_NAME.$(date +%s%N | cut -c1-13)"
RELAY_PIDS=()

log() { printf '# [%s %s] %s\n' "$(date +%H:%M:%S)" "$RUN_NAME" "$*"; }

fail() {
    log "FAIL: $*"
    for f in "$WORK"/relay*.log "$WORK"/inbox*.log; do
        [ -f "$f" ] || continue
        log "---- last lines of $f"
        tail -n 40 "$f" | sed 's/^/#   /'
    done
    exit 1
}

# Keep mode: the watermark's audit publishes what a broken proof let W pass, before any check
# of Kafka can miss it. So a keep-mode test passes only if no relay's audit found such a row
# (the audit's log line in any relay log; stop_relay also reads outbox_watermark_gaps_total
# from a successful scrape) — unless the test planted one itself (plant_below_w sets
# KEEP_GAPS_PLANTED).
keep_audit_clean() {
    [ "$ON_SENT" = keep ] && [ -z "${KEEP_GAPS_PLANTED:-}" ] || return 0
    local f
    for f in "$WORK"/relay*.log; do
        [ -f "$f" ] || continue
        if grep -q "never recorded as published" "$f"; then
            log "FAIL: the audit found rows below a watermark that were never published: $(grep -m1 -o "keep: .\{0,160\}" "$f")"
            return 1
        fi
    done
}

# A test's own EXIT trap runs its steps and then cleanup; it starts with
# TEST_RC=${TEST_RC:-$?}, so that its steps' statuses do not hide the test's own (a failed
# test whose trap ended with a successful step exited 0).
cleanup() {
    local pid rc=${TEST_RC:-$?}
    [ "$rc" != 0 ] || keep_audit_clean || rc=1
    for pid in "${RELAY_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if [ -n "${RELAYTEST_PG17:-}" ] && [ -d "$WORK/pg17" ]; then # the test's PostgreSQL 17
        bash "$RELAYTEST_SRC/test/env/pg.sh" kill "$WORK/pg17" >/dev/null 2>&1 || true
    fi
    if [ -n "${IMAGE_CTR:-}" ]; then
        image_bh umount "$IMAGE_CTR" >/dev/null 2>&1 || true
        image_bh rm "$IMAGE_CTR" >/dev/null 2>&1 || true
    fi
    [ -z "${ONE_AT_A_TIME_DIR:-}" ] || rm -rf "$ONE_AT_A_TIME_DIR"
    if [ "${KEEP_WORK:-}" = "" ]; then rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT

# one_at_a_time GROUP: waits until no other test of GROUP runs, then holds GROUP until this
# test ends (a directory beside the suite's servers naming this shell's pid; taken over when
# its holder is gone). For tests that may run beside others but would overrun a shared
# server together: leases_rabbitmq and its delete and keep variants, nine relays each
# publishing to the suite's one RabbitMQ node (three at once drew no confirm within 30 s).
one_at_a_time() {
    local dir=${RELAYTEST_SERVERS_DIR:-/tmp}/one-at-a-time.$1 waited=0 holder
    until mkdir "$dir" 2>/dev/null; do
        holder=$(cat "$dir/pid" 2>/dev/null || true)
        if [ -n "$holder" ] && ! kill -0 "$holder" 2>/dev/null; then
            rm -rf "$dir"
            continue
        fi
        [ "$waited" != 0 ] || log "waiting for another test of group $1 ($holder) to end"
        waited=$((waited + 1))
        [ "$waited" -lt 600 ] || fail "another test of group $1 ran for more than 600 s"
        sleep 1
    done
    echo $$ >"$dir/pid"
    ONE_AT_A_TIME_DIR=$dir
    [ "$waited" = 0 ] || log "group $1 taken after ${waited} s"
}

# The container image (deploy/image.sh) of this source tree: its tag names a hash of the
# tracked files, so the tests that run the image build it once and share it.
image_bh() { buildah --storage-driver vfs --root "${IMAGE_STORAGE_ROOT:-/var/lib/containers/storage}" "$@"; }
image_tag() {
    local h
    h=$(cd "$RELAYTEST_SRC" && git ls-files -z 2>/dev/null | xargs -0 -r sha1sum 2>/dev/null | sha1sum | cut -c1-12)
    # outside a git checkout (the mutant suite's copy): a tag of this test's own
    [ -d "$RELAYTEST_SRC/.git" ] || h="own-$$"
    echo "outbox-relay:it-$h"
}
# RELAYTEST_IMAGE=1: the test runs the image's outbox-relay and outbox-inbox instead of the
# host build's — from the image's root file system, read-only, as user 10001
# (test/env/image-run.sh), with the host's /tmp and /etc/hosts bound in as volumes.
if [ -n "${RELAYTEST_IMAGE:-}" ]; then
    [ "$(id -u)" = 0 ] || fail "running the image's programs needs root (buildah, mounts, chroot)"
    # (one build for all: the image tests running beside this one wait for it)
    IMAGE_TAG=$(image_tag) # (once: the tree may change while the test runs)
    IMAGE_REUSE=1 flock /tmp/outbox-it-image.lock bash "$RELAYTEST_SRC/deploy/image.sh" --tag "$IMAGE_TAG" \
        >"$WORK/image.out" 2>"$WORK/image.err" ||
        { cat "$WORK/image.err"; fail "deploy/image.sh failed"; }
    IMAGE_CTR=$(image_bh from --pull=never "$IMAGE_TAG") || fail "buildah from $IMAGE_TAG failed"
    IMAGE_ROOT=$(image_bh mount "$IMAGE_CTR") || fail "buildah mount failed"
    chmod 755 "$WORK" # user 10001 reads the test's files
    mkdir -p "$WORK/image-bin" "$WORK/image-mnt"
    for prog in outbox-relay outbox-inbox; do
        printf '#!/bin/sh\nIMAGE_RUN_VOLUMES=1 exec unshare --mount --propagation private sh %s %s %s /usr/local/bin/%s "$@"\n' \
            "$RELAYTEST_SRC/test/env/image-run.sh" "$WORK/image-mnt" "$IMAGE_ROOT" "$prog" >"$WORK/image-bin/$prog"
        chmod 755 "$WORK/image-bin/$prog"
    done
    RELAYTEST_RELAY_BIN=$WORK/image-bin/outbox-relay RELAYTEST_INBOX_BIN=$WORK/image-bin/outbox-inbox
    log "the image's programs: $(awk '/^IMAGE / { print $2, $4 }' "$WORK/image.out"), $("$RELAYTEST_RELAY_BIN" --version)"
fi

psqlc() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$DSN" -c "$1"; }

# setup_db: a fresh database with the outbox table, migrated by the owner (postgres), and
# the least-privilege roles of deploy/roles.sql: relays started by start_relay log in as
# it_relay, the writers helper as it_writer (INSERT on the outbox, and its own aggregate
# table). Tests write their own fixtures as postgres.
# In the Debezium layout (RELAYTEST_LAYOUT=debezium) the table is first created as Debezium's
# users have it (with a default for id, so that a test's own INSERTs need not give one;
# the writers helper gives it, as Debezium's writers do), then migrated.
setup_db() {
    fresh_db
    if [ "$LAYOUT" = debezium ]; then
        psqlc "CREATE TABLE outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
                 aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL,
                 type varchar(255) NOT NULL, payload jsonb)"
    fi
    OUTBOX_PG_DSN=$DSN OUTBOX_LAYOUT=$LAYOUT "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate.log" 2>&1 ||
        { cat "$WORK/migrate.log"; fail "migrate failed"; }
    db_fixtures
}
# fresh_db: the test's database, empty (the first half of setup_db)
fresh_db() {
    "$PG_BIN/psql" -X -q -At "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
        -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" ||
        fail "cannot reach PostgreSQL on port $RELAYTEST_PG_PORT"
}
# db_fixtures: after migrate, the aggregate table, the roles and the outbox_all view (the
# second half of setup_db, for tests that migrate their own way)
db_fixtures() {
    psqlc "CREATE TABLE aggregate (id text PRIMARY KEY, version int NOT NULL DEFAULT 0)"
    # (roles belong to the cluster: a test running beside this one may create them first)
    psqlc "DO \$\$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'it_relay') THEN CREATE ROLE it_relay LOGIN; END IF;
           EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END \$\$"
    psqlc "DO \$\$ BEGIN
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'it_writer') THEN CREATE ROLE it_writer LOGIN; END IF;
           EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END \$\$"
    grant_roles outbox
    psqlc "GRANT SELECT, UPDATE ON aggregate TO it_writer"
    RELAY_USER=it_relay WRITER_USER=it_writer
    outbox_all_view
}

# OUTBOX_ON_SENT of the relays start_relay starts: RELAYTEST_ON_SENT=delete runs a test in
# delete mode, where acknowledged rows are deleted; RELAYTEST_ON_SENT=keep in keep mode, where
# no row is written again and outbox_all is the relay's view outbox_kept. Tests read rows through the view
# outbox_all: the table itself, and in delete mode also the rows deleted since (a trigger
# keeps them in outbox_gone), shown as SENT at the time of their deletion — so check,
# count_status and a test's own queries mean the same in both modes.
#
# RELAYTEST_LAYOUT=debezium runs a test on Debezium's outbox table (OUTBOX_LAYOUT=debezium,
# whose default is delete mode): outbox_all then shows it with the native column names (it
# reads the relay's view outbox_relay_rows), tests insert $OUTBOX_COLS, and messages carry
# the event id in the header id.
LAYOUT=${RELAYTEST_LAYOUT:-native}
if [ "$LAYOUT" = debezium ]; then
    ON_SENT=${RELAYTEST_ON_SENT:-delete}
    OUTBOX_COLS="aggregatetype, aggregateid, type, payload"
    ID_HEADER=id
else
    ON_SENT=${RELAYTEST_ON_SENT:-mark}
    OUTBOX_COLS="aggregate_type, aggregate_id, event_type, payload"
    ID_HEADER=event_id
fi

# RELAYTEST_SINK=rabbitmq runs a test with the relays publishing to RabbitMQ (the node of
# scripts/servers.sh, RELAYTEST_RABBITMQ_PORT): each test gets its own exchange AMQP_EXCHANGE
# and a durable queue AMQP_QUEUE bound to it for every topic of the test ($TOPIC_PREFIX.#),
# single-active-consumer (two outbox-inbox processes on it: one consumes, one stands by, as
# docs/INBOX.md advises for per-key order),
# and `check` reads that queue instead of Kafka (test/tools/amqp_check.c: every row's message
# once or more, per-key order of first deliveries, persistent, the headers).
SINK=${RELAYTEST_SINK:-kafka}
if [ "$SINK" = rabbitmq ]; then
    : "${RELAYTEST_RABBITMQ_PORT:?run through scripts/test.sh (RabbitMQ not started)}"
    AMQP_URL=amqp://guest:guest@127.0.0.1:$RELAYTEST_RABBITMQ_PORT
    AMQP_EXCHANGE=$TOPIC_PREFIX.exchange
    AMQP_QUEUE=$TOPIC_PREFIX.queue
    "$RELAYTEST_AMQP_BIN" bind "$AMQP_URL" "$AMQP_EXCHANGE" "$AMQP_QUEUE" "$TOPIC_PREFIX.#" single-active ||
        { log "FAIL: cannot bind a queue on RabbitMQ (port $RELAYTEST_RABBITMQ_PORT)"; exit 1; }
fi

outbox_all_view() { # [TABLE]: the view TABLE_all (default outbox_all over outbox)
    local t=${1:-outbox}
    local cols="id, event_id, aggregate_type, aggregate_id, event_type, topic, payload, headers"
    if [ "$LAYOUT" = debezium ]; then
        local gone="SELECT relay_seq, id::text, aggregatetype::text, aggregateid::text, type::text, NULL::text,
                      payload, NULL::jsonb, 'SENT', relay_attempts, relay_error, relay_created_at, gone_at,
                      relay_partition FROM ${t}_gone"
        [ "$ON_SENT" = delete ] || gone="$gone WHERE false"
        # (copied by column name: a test may add columns of its own to the table)
        psqlc "CREATE TABLE ${t}_gone (LIKE $t);
               ALTER TABLE ${t}_gone ADD COLUMN gone_at timestamptz NOT NULL DEFAULT clock_timestamp();
               CREATE FUNCTION ${t}_keep_gone() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
                 SET search_path = pg_catalog, public AS \$\$
               BEGIN
                 INSERT INTO ${t}_gone SELECT (jsonb_populate_record(NULL::${t}_gone,
                   to_jsonb(OLD) || jsonb_build_object('gone_at', clock_timestamp()))).*;
                 RETURN NULL;
               END \$\$;
               CREATE TRIGGER ${t}_keep_gone AFTER DELETE ON $t FOR EACH ROW EXECUTE FUNCTION ${t}_keep_gone();
               CREATE VIEW ${t}_all AS
                 SELECT $cols, status, attempts, last_error, created_at, sent_at, lease_partition FROM ${t}_relay_rows
                 UNION ALL $gone"
    elif [ "$ON_SENT" = delete ]; then
        psqlc "CREATE TABLE ${t}_gone (LIKE $t);
               ALTER TABLE ${t}_gone ADD COLUMN gone_at timestamptz NOT NULL DEFAULT clock_timestamp();
               CREATE FUNCTION ${t}_keep_gone() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
                 SET search_path = pg_catalog, public AS \$\$
               BEGIN INSERT INTO ${t}_gone SELECT OLD.*; RETURN NULL; END \$\$;
               CREATE TRIGGER ${t}_keep_gone AFTER DELETE ON $t FOR EACH ROW EXECUTE FUNCTION ${t}_keep_gone();
               CREATE VIEW ${t}_all AS
                 SELECT $cols, status, attempts, last_error, created_at, sent_at, lease_partition FROM $t
                 UNION ALL
                 SELECT $cols, 'SENT', attempts, last_error, created_at, gone_at, lease_partition FROM ${t}_gone"
    elif [ "$ON_SENT" = keep ]; then # the relay's own view: status from the watermark
        psqlc "CREATE VIEW ${t}_all AS SELECT * FROM ${t}_kept"
    else
        psqlc "CREATE VIEW ${t}_all AS SELECT * FROM $t"
    fi
}
# Keep mode (RELAYTEST_ON_SENT=keep): the lease partition of key $1; its watermark as written
# in outbox_watermark; N keys other than $2 that fall in lease partition $1; one row of key
# $1 (event type $2), its id printed (ins_key).
part_of() { psqlc "SELECT ((hashtext('$1') & 2147483647) % 64)"; }
w_of() { psqlc "SELECT coalesce((SELECT w FROM outbox_watermark WHERE lease_partition = $1), 0)"; }
# live_w NAME P: relay NAME's own W of lease partition P, from /status (its table lags by up
# to 2 s); fails when the scrape fails or the relay does not know that partition's W
live_w() {
    curl -sf "http://127.0.0.1:$(http_port "$1")/status" |
        python3 -c "import json, sys; print(json.load(sys.stdin)['watermarks']['$2'])"
}
keys_in() { psqlc "SELECT string_agg(k, ' ') FROM (SELECT 'x' || g AS k FROM generate_series(1, 20000) g
                   WHERE ((hashtext('x' || g) & 2147483647) % 64) = $1 LIMIT $2) s"; }
ins_key() { psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', '$1', '${2:-E}', '{}') RETURNING id"; }
# plant_below_w KEY: a row of KEY planted below its partition's watermark, as a writer
# breaking the writer rule would: the id a rolled-back writer drew, inserted with OVERRIDING
# SYSTEM VALUE once the watermark passed it (later rows of other keys of the partition
# published). Sets r (the lease partition) and hole (the id). Needs a keep relay running.
plant_below_w() {
    KEEP_GAPS_PLANTED=1
    r=$(part_of "$1")
    hole=$("$PG_BIN/psql" -X -q -At "$DSN" -c "BEGIN" \
        -c "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', '$1', 'E', '{}') RETURNING id" -c "ROLLBACK" | head -1)
    for k in $(keys_in "$r" 3); do ins_key "$k" >/dev/null; done
    wait_until 10 "W past the rolled-back id" eval '[ "$(w_of "$r")" -ge "$hole" ]'
    psqlc "INSERT INTO outbox (id, $OUTBOX_COLS) OVERRIDING SYSTEM VALUE VALUES ($hole, 'order', '$1', 'E', '{}')"
}
# delete_mode_refuses WHAT COMMAND...: in delete mode (RELAYTEST_ON_SENT=delete) COMMAND, a
# command that needs SENT rows (replay, audit), must refuse with exit 2 and a message naming
# OUTBOX_ON_SENT=delete; then true, and the caller leaves out what only mark mode can do.
# False in mark mode (COMMAND not run).
delete_mode_refuses() {
    [ "$ON_SENT" = delete ] || return 1
    local what=$1 rc=0
    shift
    "$@" >"$WORK/refused.out" 2>&1 || rc=$?
    [ "$rc" = 2 ] && grep -q "OUTBOX_ON_SENT=delete" "$WORK/refused.out" ||
        fail "$what in delete mode: exit $rc, want 2 naming OUTBOX_ON_SENT=delete: $(head -3 "$WORK/refused.out")"
    log "delete mode: $what refused as documented: $(grep -m1 -o "OUTBOX_ON_SENT=delete.*" "$WORK/refused.out" | cut -c1-100)"
}
# bell_armed: the idle relay has armed outbox's doorbell (schema 6: the bell sequence is set)
bell_armed() { [ "$(psqlc "SELECT pg_sequence_last_value('outbox_bell') IS NOT NULL")" = t ]; }

# grant_roles TABLE: deploy/roles.sql for public.TABLE, relay it_relay, writer it_writer.
# Tried up to three times: its GRANT of a role (pg_read_all_stats) is cluster-wide, and two
# tests setting up at the same moment can both insert the membership (a unique violation in
# pg_auth_members for the second; seen with three tests started together).
grant_roles() {
    local try
    for try in 1 2 3; do
        PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q "$DSN" -v ON_ERROR_STOP=1 -v schema=public \
            -v table="$1" -v relay=it_relay -v writer=it_writer -f "$RELAYTEST_SRC/deploy/roles.sql" \
            >/dev/null 2>"$WORK/roles.err" && return 0
        grep -q 'pg_auth_members' "$WORK/roles.err" || break
        sleep 0.$((RANDOM % 5 + 1))
    done
    cat "$WORK/roles.err" >&2
    fail "deploy/roles.sql failed for $1"
}

# port_open PORT: something listens on 127.0.0.1:PORT (a condition for wait_until)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() { free_ports 1; } # (scripts/servers.sh)

# The relay's environment for this test; tests add settings to RELAY_ENV (NAME=value), and
# RELAY_DSN_EXTRA to the relay's DSN alone (libpq options the host's psql may not know).
# Each relay serves HTTP on a free port, remembered as HTTP_PORT_<name>.
relay_env() {
    RELAY_HTTP_PORT=$(free_port)
    RELAY_BASE_ENV=(OUTBOX_PG_DSN="${DSN/user=postgres /user=${RELAY_USER:-postgres} }${RELAY_DSN_EXTRA:+ $RELAY_DSN_EXTRA}"
        OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP"
        OUTBOX_HTTP_ADDR="127.0.0.1:$RELAY_HTTP_PORT"
        OUTBOX_TOPIC_TEMPLATE="$TOPIC_PREFIX.{aggregate_type}" OUTBOX_LOG_LEVEL="${RELAY_LOG_LEVEL:-info}"
        OUTBOX_POLL_INTERVAL_MS="${RELAY_POLL_MS:-100}" OUTBOX_ON_SENT="$ON_SENT" OUTBOX_LAYOUT="$LAYOUT")
    [ "$SINK" != rabbitmq ] || RELAY_BASE_ENV+=(OUTBOX_SINK=rabbitmq OUTBOX_RABBITMQ_URL="$AMQP_URL"
        OUTBOX_RABBITMQ_EXCHANGE="$AMQP_EXCHANGE")
    # exactly-once (RELAYTEST_EXACTLY_ONCE=1): an id prefix and a progress topic of this run's own
    [ -z "${RELAYTEST_EXACTLY_ONCE:-}" ] || RELAY_BASE_ENV+=(OUTBOX_EXACTLY_ONCE=1
        OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX" OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress")
}

# start_relay NAME [flags...]: runs the relay in the background, log in $WORK/relay-NAME.log
start_relay() {
    local name=$1
    shift
    relay_env
    [ -n "${RELAY_WRAPPER:-}" ] && log "relay $name runs under: ${RELAY_WRAPPER%% *}"
    # RELAY_WRAPPER (e.g. valgrind) runs in front of the relay when set
    # shellcheck disable=SC2086
    env "${RELAY_BASE_ENV[@]}" "${RELAY_ENV[@]}" ${RELAY_WRAPPER:-} "$RELAYTEST_RELAY_BIN" "$@" >>"$WORK/relay-$name.log" 2>&1 &
    local pid=$!
    RELAY_PIDS+=("$pid")
    eval "RELAY_PID_$name=$pid HTTP_PORT_$name=$RELAY_HTTP_PORT"
    echo "$pid"
}
RELAY_ENV=()

relay_pid() { eval "echo \${RELAY_PID_$1}"; }
http_port() { eval "echo \${HTTP_PORT_$1}"; }

# metric NAME SERIES: the value of one series (name and labels, as exported) of relay NAME;
# fails (prints nothing) when /metrics cannot be scraped or the series is not exported, so
# that "the metric is 0" is never read from a relay that does not answer.
metric() { metric_at "http://127.0.0.1:$(http_port "$1")/metrics" "$2"; }
# metric_at_least NAME SERIES N / metric_is NAME SERIES V: conditions for wait_until (false
# when the series cannot be read).
metric_at_least() { local v; v=$(metric "$1" "$2") && [ "$v" -ge "$3" ]; }
# metric_sum NAME SERIES...: the sum of relay NAME's series; fails, printing nothing, if any
# read fails (summed inside $(( )), a failed read's empty output would be a unary + : 0)
metric_sum() {
    local name=$1 series v total=0
    shift
    for series in "$@"; do
        v=$(metric "$name" "$series") || return 1
        total=$((total + v))
    done
    echo "$total"
}
metric_is() { local v; v=$(metric "$1" "$2") && [ "$v" = "$3" ]; }
# exported NAME PATTERN: a line of relay NAME's /metrics matches the grep pattern.
# (read whole first: with pipefail, grep -q leaving early makes curl fail on SIGPIPE, which
# would read as "not exported")
exported() {
    local body
    body=$(curl -sf "http://127.0.0.1:$(http_port "$1")/metrics") || return 1
    grep -q "$2" <<<"$body"
}
# not_exported NAME PATTERN: relay NAME's /metrics answers and no line matches (false, not
# true, when the scrape fails).
not_exported() {
    local body
    body=$(curl -sf "http://127.0.0.1:$(http_port "$1")/metrics") || { log "scraping relay $1's /metrics failed"; return 1; }
    ! grep -q "$2" <<<"$body"
}

# stop_relay NAME: SIGTERM and wait; returns the relay's exit status.
stop_relay() {
    local pid gaps
    pid=$(relay_pid "$1")
    if [ "$ON_SENT" = keep ] && [ -z "${KEEP_GAPS_PLANTED:-}" ] && gaps=$(metric "$1" outbox_watermark_gaps_total 2>/dev/null); then
        [ "$gaps" = 0 ] || fail "relay $1's audit found $gaps rows below a watermark that were never published"
    fi
    kill -TERM "$pid" 2>/dev/null || true
    local rc=0
    wait "$pid" || rc=$?
    return $rc
}

kill_relay() {
    local pid
    pid=$(relay_pid "$1")
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

count_status() { psqlc "SELECT count(*) FROM outbox_all WHERE status = '$1'"; }
# count_where CONDITION: outbox rows matching an SQL condition.
count_where() { psqlc "SELECT count(*) FROM outbox_all WHERE $1"; }
# rows_at_least N CONDITION / rows_are N CONDITION: conditions for wait_until.
rows_at_least() { [ "$(count_where "$2")" -ge "$1" ]; }
rows_are() { [ "$(count_where "$2")" = "$1" ]; }

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds.
wait_until() {
    local secs=$1 what=$2
    shift 2
    local deadline=$((SECONDS + secs))
    until "$@"; do
        [ $SECONDS -lt $deadline ] || fail "timed out after ${secs}s waiting for: $what"
        sleep 0.2
    done
}

all_sent() { [ "$(count_status PENDING)" = 0 ] && [ "$(count_status FAILED)" = 0 ]; }

# writers CLIENTS TRANSACTIONS KEYS [AGG_TYPE]: concurrent writers that follow the writer
# rule (lock the aggregate row, then insert the outbox row, in one transaction).
writers() {
    local clients=$1 tx=$2 keys=$3 agg=${4:-order} writer_cols=$OUTBOX_COLS writer_id=
    # Debezium's writers give the event's uuid themselves
    [ "$LAYOUT" = debezium ] && writer_cols="id, $OUTBOX_COLS" writer_id="gen_random_uuid(), "
    # (rows that exist are not inserted again: ON CONFLICT alone would wait for a transaction
    # holding one of them, as late_commit's late writers do)
    psqlc "INSERT INTO aggregate (id) SELECT 'k' || g FROM generate_series(1, $keys) g
           WHERE NOT EXISTS (SELECT FROM aggregate a WHERE a.id = 'k' || g) ON CONFLICT DO NOTHING"
    cat >"$WORK/writer.sql" <<SQL
\set k random(1, $keys)
BEGIN;
UPDATE aggregate SET version = version + 1 WHERE id = 'k' || :k;
INSERT INTO outbox ($writer_cols)
  VALUES ($writer_id'$agg', 'k' || :k, 'Updated', jsonb_build_object('key', 'k' || :k, 'pad', repeat('x', 200)));
COMMIT;
SQL
    "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U "${WRITER_USER:-postgres}" -c "$clients" -j 2 \
        -t "$tx" -f "$WORK/writer.sql" "$DB" >"$WORK/pgbench.log" 2>&1 ||
        { cat "$WORK/pgbench.log"; fail "writers failed"; }
}

# check TOPICS [outbox-check flags]: compares Kafka with the table; prints the CHECK line.
# CHECK_WHERE (an SQL condition, default all rows) limits the rows Kafka must hold;
# CHECK_VALUE (an SQL expression of the bytes a row's message value must be, e.g.
# "convert_to(payload::text, 'UTF8')") makes every message's value compared too.
check() {
    local topics=$1 value="'-'"
    shift
    if [ -n "${CHECK_VALUE:-}" ]; then
        value="CASE WHEN payload IS NULL THEN '-' ELSE 'x' || encode($CHECK_VALUE, 'hex') END"
        set -- "$@" --values
    fi
    "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -F $'\t' "$DSN" \
        -c "SELECT id, event_id, aggregate_id, $value FROM outbox_all WHERE ${CHECK_WHERE:-true} ORDER BY id" \
        >"$WORK/expected.tsv" || { log "check: reading the expected rows failed"; return 2; }
    if [ "$SINK" = rabbitmq ]; then # the queue bound to every topic, with the flags amqp-check has
        local flags=()
        while [ $# -gt 0 ]; do
            case $1 in
            --exact | --require-lease | --values) flags+=("$1") ;;
            --max-duplicates) flags+=(--max-duplicates "$2"); shift ;;
            *) log "check: $1 has no counterpart in the RabbitMQ check (amqp-check)"; return 2 ;;
            esac
            shift
        done
        "$RELAYTEST_AMQP_BIN" check "$AMQP_URL" "$AMQP_QUEUE" "$WORK/expected.tsv" "${flags[@]}" \
            >"$WORK/check.out" 2>"$WORK/check.err"
        local rc=$?
        cat "$WORK/check.out"
        head -20 "$WORK/check.err" | sed 's/^/# /' || true
        return $rc
    fi
    "$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$topics" --expected "$WORK/expected.tsv" \
        --id-header "$ID_HEADER" ${RELAYTEST_EXACTLY_ONCE:+--transactional} "$@" \
        >"$WORK/check.out" 2>"$WORK/check.err"
    local rc=$?
    cat "$WORK/check.out"
    grep -v 'has [0-9]* partitions' "$WORK/check.err" | head -20 | sed 's/^/# /' || true
    return $rc
}

# track_inserts: every row ever inserted into outbox is noted in the table `inserted` (a
# trigger), so that check_inserted can compare Kafka with rows retention or a drop took since.
track_inserts() {
    psqlc "CREATE TABLE inserted (id bigint, event_id text, aggregate_id text);
           CREATE FUNCTION note_insert() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
             SET search_path = pg_catalog, public AS \$\$
           BEGIN INSERT INTO inserted VALUES (NEW.id, NEW.event_id, NEW.aggregate_id); RETURN NULL; END \$\$;
           CREATE TRIGGER note_insert AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION note_insert()"
}
# check_inserted TOPICS: every row track_inserts noted is in Kafka exactly once, in key order.
check_inserted() {
    "$PG_BIN/psql" -X -At -v ON_ERROR_STOP=1 -F $'\t' "$DSN" \
        -c "SELECT id, event_id, aggregate_id, '-' FROM inserted ORDER BY id" >"$WORK/expected.tsv" ||
        { log "check_inserted: reading the inserted rows failed"; return 2; }
    "$RELAYTEST_CHECK_BIN" --bootstrap "$BOOTSTRAP" --topics "$1" --expected "$WORK/expected.tsv" \
        --id-header "$ID_HEADER" --exact >"$WORK/check.out" 2>"$WORK/check.err" ||
        { cat "$WORK/check.out"; head "$WORK/check.err"; return 1; }
}

# start_mock ARGS...: librdkafka's mock cluster (test/tools/mock_kafka) with ARGS; commands
# go to it with `mock COMMAND...`, which returns once the cluster has applied it (so a
# slow command cannot delay the next ones unseen); sets BOOTSTRAP to its brokers.
start_mock() {
    mkfifo "$WORK/mock.in"
    "$RELAYTEST_MOCK_BIN" "$@" <"$WORK/mock.in" >"$WORK/mock.out" 2>"$WORK/mock.err" &
    exec 7>"$WORK/mock.in"
    wait_until 10 "mock cluster up" grep -q BOOTSTRAP "$WORK/mock.out"
    BOOTSTRAP=$(sed -n 's/^BOOTSTRAP //p' "$WORK/mock.out")
}
MOCK_SENT=0
mock_applied() { [ "$(grep -c '^mock-kafka: done ' "$WORK/mock.err")" -ge "$MOCK_SENT" ]; }
mock() {
    echo "$*" >&7
    [ "$1" = quit ] && return 0
    MOCK_SENT=$((MOCK_SENT + 1))
    wait_until 120 "mock cluster applied: $*" mock_applied
}

# own_servers: PostgreSQL clusters of this test's own go under $HA (pg_env start/standby
# "$HA/name" PORT ...); they are killed when the test ends, resumed first if stopped.
own_servers() {
    HA=$WORK/ha
    mkdir -p "$HA"
    chmod 755 "$WORK" "$HA" # the servers run as the postgres user when the tests run as root
    trap own_servers_cleanup EXIT
}
own_servers_cleanup() {
    TEST_RC=${TEST_RC:-$?}
    local d
    for d in "$HA"/*; do
        [ -d "$d" ] || continue
        kill -CONT "$(head -1 "$d/data/postmaster.pid" 2>/dev/null)" 2>/dev/null || true
        bash "$RELAYTEST_SRC/test/env/pg.sh" kill "$d" >/dev/null 2>&1 || true
    done
    cleanup
}
pg_env() { bash "$RELAYTEST_SRC/test/env/pg.sh" "$@" || fail "pg.sh $* failed"; }

# kafka_stop / kafka_start, pg_stop / pg_kill / pg_start: the suite's shared servers.
kafka_stop() { bash "$RELAYTEST_SRC/test/env/kafka.sh" stop "$RELAYTEST_KAFKA_DIR"; }
kafka_start() { bash "$RELAYTEST_SRC/test/env/kafka.sh" start "$RELAYTEST_KAFKA_DIR" "$RELAYTEST_KAFKA_PORT"; }
pg_stop() { bash "$RELAYTEST_SRC/test/env/pg.sh" stop "$RELAYTEST_PG_DIR"; }
pg_kill() { bash "$RELAYTEST_SRC/test/env/pg.sh" kill "$RELAYTEST_PG_DIR"; }
pg_start() { bash "$RELAYTEST_SRC/test/env/pg.sh" start "$RELAYTEST_PG_DIR" "$RELAYTEST_PG_PORT"; }

# ---- outbox-inbox: the consumer half, in a database of its own ($CDSN)
CDB=${DB}_in
CDSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$CDB"
cpsql() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$CDSN" -c "$1"; }

# setup_inbox_db: the consumer's database with the inbox table (outbox-inbox migrate) and a
# handler apply_event that counts applications per event (applied.times) and checks each
# key's order (payload n must grow per key; key_order.violations counts the opposite).
# Key 'poison' always fails.
setup_inbox_db() {
    "$PG_BIN/psql" -X -q -At "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
        -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $CDB WITH (FORCE)" -c "CREATE DATABASE $CDB" ||
        fail "cannot create the consumer's database"
    INBOX_PG_DSN=$CDSN "$RELAYTEST_INBOX_BIN" migrate >"$WORK/inbox-migrate.log" 2>&1 ||
        { cat "$WORK/inbox-migrate.log"; fail "outbox-inbox migrate failed"; }
    cpsql "CREATE TABLE applied (event_id uuid PRIMARY KEY, key text NOT NULL, n int, times int NOT NULL DEFAULT 1);
           CREATE TABLE key_order (key text PRIMARY KEY, last_n int NOT NULL, violations int NOT NULL DEFAULT 0);
           CREATE FUNCTION apply_event(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
           RETURNS void LANGUAGE plpgsql AS \$\$
           #variable_conflict use_column
           BEGIN
               IF key = 'poison' THEN RAISE EXCEPTION 'cannot apply % of %', event_type, key; END IF;
               INSERT INTO applied VALUES (event_id, key, (payload->>'n')::int)
                   ON CONFLICT (event_id) DO UPDATE SET times = applied.times + 1;
               INSERT INTO key_order VALUES (key, (payload->>'n')::int)
                   ON CONFLICT (key) DO UPDATE SET last_n = EXCLUDED.last_n,
                       violations = key_order.violations + (EXCLUDED.last_n < key_order.last_n)::int;
           END \$\$"
}

# start_inbox NAME [env...]: outbox-inbox in the background on TOPICS (default: the
# test's order topic), log in $WORK/inbox-NAME.log; metric/http_port work with NAME.
start_inbox() {
    local name=$1
    shift
    local port
    port=$(free_port)
    env INBOX_PG_DSN="$CDSN" INBOX_TOPICS="${INBOX_TOPICS_TEST:-$TOPIC_PREFIX.order}" INBOX_HANDLER=apply_event \
        INBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" INBOX_KAFKA_GROUP_ID="$TOPIC_PREFIX.group" \
        INBOX_HTTP_ADDR="127.0.0.1:$port" INBOX_RETRY_BACKOFF_MS=10 INBOX_RETRY_BACKOFF_MAX_MS=200 \
        INBOX_KAFKA_TOPIC_METADATA_REFRESH_INTERVAL_MS=1000 INBOX_KAFKA_SESSION_TIMEOUT_MS=6000 \
        $([ "$SINK" = rabbitmq ] && echo "INBOX_SOURCE=rabbitmq INBOX_RABBITMQ_URL=$AMQP_URL INBOX_RABBITMQ_QUEUES=$AMQP_QUEUE") "$@" \
        "$RELAYTEST_INBOX_BIN" >>"$WORK/inbox-$name.log" 2>&1 &
    local pid=$!
    RELAY_PIDS+=("$pid")
    eval "RELAY_PID_$name=$pid HTTP_PORT_$name=$port"
}

# proxied_kafka: a real Kafka broker of this test's own whose every client connection goes
# through the project's fault proxy (test/tools/fault_proxy.c, loopback only, exits by itself
# after PROXY_DEADLINE seconds, default 600); BOOTSTRAP becomes the proxy's address,
# DIRECT_BOOTSTRAP the broker's own listener (clients that bootstrap there stay direct).
# `proxy COMMAND` sends a command (delay MS, drop N, reset MIN MAX, hold on|off) and returns
# once applied; `proxy_stat NAME` prints one figure of its STATS line (cut, dropped, resets,
# produce_requests, ...).
# fault_proxy_start TARGET_PORT [--raw]: the fault proxy on PROXY_PORT in front of
# 127.0.0.1:TARGET_PORT, its commands on fd 8 (`proxy`), stopped by proxied_cleanup.
fault_proxy_start() {
    PROXY_PORT=$(free_port)
    mkfifo "$WORK/proxy.in"
    "$RELAYTEST_PROXY_BIN" "${@:2}" --listen "$PROXY_PORT" --target "$1" --deadline "${PROXY_DEADLINE:-600}" \
        <"$WORK/proxy.in" >"$WORK/proxy.out" 2>"$WORK/proxy.err" &
    PROXY_PID=$!
    exec 8>"$WORK/proxy.in"
    trap proxied_cleanup EXIT
    wait_until 10 "fault proxy listening" grep -q LISTENING "$WORK/proxy.out"
    PROXY_SENT=0
}
proxied_kafka() {
    local base
    base=$(free_ports 3)
    PK=$WORK/pk
    fault_proxy_start $((base + 2))
    log "Kafka on 127.0.0.1:$base, its clients through the fault proxy on 127.0.0.1:$PROXY_PORT"
    KAFKA_HEAP="-Xms64m -Xmx384m" bash "$RELAYTEST_SRC/test/env/kafka.sh" proxied "$PK" "$base" "$PROXY_PORT" ||
        fail "the proxied broker did not start"
    BOOTSTRAP=127.0.0.1:$PROXY_PORT
    DIRECT_BOOTSTRAP=127.0.0.1:$base # the same broker, not through the proxy
}
proxied_cleanup() {
    TEST_RC=${TEST_RC:-$?}
    kill "$PROXY_PID" 2>/dev/null || true
    [ -z "${PK:-}" ] || bash "$RELAYTEST_SRC/test/env/kafka.sh" kill "$PK" 2>/dev/null || true
    cleanup
}
# proxied_rabbitmq: the same fault proxy (raw: AMQP is not framed as Kafka's requests, so only
# delay, delay_requests and hold apply) in front of the suite's RabbitMQ node; PROXIED_AMQP_URL
# reaches the node through it, AMQP_URL stays direct. `proxy` and `proxy_stat` as above.
proxied_rabbitmq() {
    fault_proxy_start "$RELAYTEST_RABBITMQ_PORT" --raw
    PROXIED_AMQP_URL=amqp://guest:guest@127.0.0.1:$PROXY_PORT
    log "RabbitMQ on 127.0.0.1:$RELAYTEST_RABBITMQ_PORT, through the fault proxy on 127.0.0.1:$PROXY_PORT"
}
proxy_applied() { [ "$(grep -c '^fault-proxy: done ' "$WORK/proxy.err")" -ge "$PROXY_SENT" ]; }
proxy() {
    kill -0 "$PROXY_PID" 2>/dev/null || fail "the fault proxy is gone: $(tail -2 "$WORK/proxy.err")"
    echo "$*" >&8
    PROXY_SENT=$((PROXY_SENT + 1))
    wait_until 10 "fault proxy applied: $*" proxy_applied
}
proxy_stat() {
    local before
    before=$(grep -c '^STATS' "$WORK/proxy.out" || true)
    proxy stats
    wait_until 10 "fault proxy stats" eval '[ "$(grep -c "^STATS" "$WORK/proxy.out")" -gt "$before" ]'
    grep '^STATS' "$WORK/proxy.out" | tail -1 | tr ' ' '\n' | sed -n "s/^$1=//p"
}
# check_field NAME: one figure of the last check's CHECK line
check_field() { tr ' ' '\n' <"$WORK/check.out" | sed -n "s/^$1=//p"; }
# dump_header FILE NAME: from an outbox-check --dump FILE, one line per message: its key and
# the value of its header NAME, decoded ("-" when the message has none)
dump_header() {
    python3 - "$1" "$2" <<'PY'
import sys
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    key = bytes.fromhex(f[2]).decode() if f[2] != "-" else "-"
    value = "-"
    for h in f[4].split(";") if f[4] else []:
        name, _, hexv = h.partition("=")
        if name == sys.argv[2]:
            value = bytes.fromhex(hexv).decode() if hexv != "-" else ""
    print(key + "\t" + value)
PY
}

# RELAYTEST_PG17=1: the test runs on PostgreSQL 17 (Debian 13's, inside the root that
# test/env/pg17-root.sh makes once under .work/) instead of the shared PostgreSQL 15: a
# cluster of the test's own becomes its server (RELAYTEST_PG_PORT, RELAYTEST_PG_DIR, DSN),
# and every cluster it starts through pg.sh is a PostgreSQL 17 one (PG_ROOT). psql, pgbench
# and the host build's libpq stay version 15: the clients users upgrade last.
if [ -n "${RELAYTEST_PG17:-}" ]; then
    [ "$(id -u)" = 0 ] || fail "PostgreSQL 17 runs in a Debian 13 root: needs root (chroot, mounts)"
    PG_ROOT=$(bash "$RELAYTEST_SRC/test/env/pg17-root.sh" "$RELAYTEST_SRC/.work/pg17-root") ||
        fail "cannot make the Debian 13 root with PostgreSQL 17"
    export PG_ROOT
    chmod 755 "$WORK"
    RELAYTEST_PG_DIR=$WORK/pg17 RELAYTEST_PG_PORT=$(free_port)
    pg_start || fail "PostgreSQL 17 did not start"
    DSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$DB"
    CDSN="host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=$CDB"
    log "PostgreSQL $("$PG_BIN/psql" -X -At "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" -c 'SHOW server_version') from $PG_ROOT on port $RELAYTEST_PG_PORT"
fi
