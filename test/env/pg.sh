#!/usr/bin/env bash
# Throwaway PostgreSQL 15 cluster (Debian packages) for tests, demo and bench.
#   pg.sh start DIR PORT    initdb DIR if new, start on 127.0.0.1:PORT (trust auth, db "outbox")
#   pg.sh stop DIR          fast shutdown
#   pg.sh kill DIR          immediate shutdown (crash-like)
#   pg.sh standby DIR PORT PRIMARY_PORT
#                           streaming standby of the server on PRIMARY_PORT (pg_basebackup -R;
#                           PG_STANDBY_SLOT=NAME: through a physical replication slot it creates)
#   pg.sh promote DIR       promotes a standby to primary (waits until it accepts writes)
# PG_DURABLE=1 keeps fsync and synchronous_commit on (the benchmark). PG_EXTRA_CONF: more
# postgresql.conf lines for a new cluster (e.g. "wal_level = logical" for Debezium).
# initdb and pg_ctl refuse to run as root, so as root they run as the "postgres" user.
# PG_ROOT=DIR runs the server programs of another Debian root instead (test/env/pg17-root.sh:
# PostgreSQL 17 from Debian 13), inside it (as root only; the clusters must live under /tmp,
# which is bound into it); psql stays the host's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
client=$bin # psql: the host's, which talks to either server
if [ -n "${PG_ROOT:-}" ]; then
    bin=/usr/lib/postgresql/17/bin
fi

as_owner() {
    if [ -n "${PG_ROOT:-}" ]; then
        unshare --mount --propagation private sh "$here/pg-root-run.sh" "$PG_ROOT" "$@"
    elif [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

start() {
    local dir=$1 port=$2
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
            { cat "$dir/initdb.log" >&2; return 1; }
        cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
shared_buffers = 256MB
max_connections = 200
max_prepared_transactions = 10
log_min_messages = warning
${PG_EXTRA_CONF:-}
CONF
        # Tests trade durability for speed; the benchmark (PG_DURABLE=1) keeps it.
        if [ "${PG_DURABLE:-0}" != 1 ]; then
            printf 'fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n' >>"$dir/data/postgresql.conf"
        fi
    fi
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { tail -20 "$dir/server.log" >&2; return 1; }
    "$client/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtc \
        "SELECT 1 FROM pg_database WHERE datname='outbox'" | grep -q 1 ||
        "$client/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE outbox"
}

stop() {
    local dir=$1 mode=${2:-fast}
    [ -f "$dir/data/postmaster.pid" ] || return 0
    as_owner "$bin/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >/dev/null
}

standby() {
    local dir=$1 port=$2 primary_port=$3
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    local slot=()
    [ -z "${PG_STANDBY_SLOT:-}" ] || slot=(-C -S "$PG_STANDBY_SLOT")
    as_owner "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$dir/data" -R \
        -X stream -c fast "${slot[@]}" >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log" >&2; return 1; }
    # The copied configuration names the primary's port and socket folder; later lines win.
    printf "port = %s\nunix_socket_directories = '%s'\n" "$port" "$dir" >>"$dir/data/postgresql.conf"
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { tail -20 "$dir/server.log" >&2; return 1; }
}

promote() {
    as_owner "$bin/pg_ctl" -D "$1/data" -w -t 60 promote >/dev/null
}

case ${1:-} in
start) start "$2" "$3" ;;
stop) stop "$2" ;;
kill) stop "$2" immediate ;;
standby) standby "$2" "$3" "$4" ;;
promote) promote "$2" ;;
*) echo "usage: $0 start DIR PORT | stop DIR | kill DIR | standby DIR PORT PRIMARY_PORT | promote DIR" >&2; exit 2 ;;
esac
