#!/usr/bin/env bash
# PgBouncer (Debian's package) in front of PostgreSQL. In transaction pooling mode the relay
# refuses to start (exit 2) with a message naming OUTBOX_PG_DSN and what to do, because
# LISTEN and the leases' session advisory locks need a real session; writers through the
# same pool are fine. In session mode the relay runs through it and publishes everything.
. "$(dirname "$0")/lib.sh"
setup_db
chmod 755 "$WORK"
B=$WORK/pgbouncer # its files, writable by the postgres user it runs as under root
mkdir -p "$B"
[ "$(id -u)" = 0 ] && chown postgres: "$B"
bouncer_port=$(free_port)
# start_bouncer MODE: PgBouncer on bouncer_port in pool_mode MODE (as the postgres user:
# it refuses to run as root), its log in $B/MODE.log
start_bouncer() {
    cat >"$B/$1.ini" <<INI
[databases]
$DB = host=127.0.0.1 port=$RELAYTEST_PG_PORT dbname=$DB
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $B/userlist.txt
pool_mode = $1
default_pool_size = 4
max_client_conn = 100
ignore_startup_parameters = extra_float_digits,search_path,options
logfile = $B/$1.log
pidfile = $B/$1.pid
INI
    printf '"it_relay" ""\n"it_writer" ""\n"postgres" ""\n' >"$B/userlist.txt"
    chmod 644 "$B"/*.ini "$B/userlist.txt"
    local as=()
    [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    "${as[@]}" /usr/sbin/pgbouncer -d "$B/$1.ini" || fail "pgbouncer ($1) did not start"
    wait_until 10 "pgbouncer listening" port_open "$bouncer_port"
}
stop_bouncer() { [ -f "$B/$1.pid" ] && kill "$(cat "$B/$1.pid")" 2>/dev/null; sleep 0.5; }
trap 'TEST_RC=${TEST_RC:-$?}; stop_bouncer transaction; stop_bouncer session; cleanup' EXIT
BDSN="host=127.0.0.1 port=$bouncer_port user=it_relay dbname=$DB"

# ---- transaction pooling: refused, clearly
start_bouncer transaction
# writers may use the transaction pool
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "host=127.0.0.1 port=$bouncer_port user=it_writer dbname=$DB" \
    -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'k1', 'E', '{}')" ||
    fail "a writer could not insert through the transaction pool"
rc=0
env OUTBOX_PG_DSN="$BDSN" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" OUTBOX_HTTP_ADDR= \
    timeout 30 "$RELAYTEST_RELAY_BIN" >"$WORK/relay-transaction.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "the relay behind a transaction pool exited $rc (want 2): $(tail -3 "$WORK/relay-transaction.log")"
grep -q "OUTBOX_PG_DSN leads to a connection pooler in transaction or statement mode" "$WORK/relay-transaction.log" &&
    grep -q "pool_mode = session" "$WORK/relay-transaction.log" ||
    fail "unclear refusal: $(cat "$WORK/relay-transaction.log")"
log "transaction pool refused: $(grep -o "OUTBOX_PG_DSN leads to[^:]*" "$WORK/relay-transaction.log" | head -1)"
stop_bouncer transaction

# ---- session pooling: works
start_bouncer session
RELAY_ENV=(OUTBOX_PG_DSN="$BDSN")
start_relay main >/dev/null
writers 4 250 50
wait_until 60 "all rows SENT through the session pool" all_sent
stop_relay main || fail "relay exited with $? on SIGTERM"
grep -q "pooler" "$WORK/relay-main.log" && fail "the session pool was taken for a transaction pool"
check "$TOPIC_PREFIX.order" --exact || fail "Kafka content does not match the table"
log "ok: session pool: $(count_status SENT) rows published through PgBouncer"
