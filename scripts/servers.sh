#!/usr/bin/env bash
# Starts a throwaway PostgreSQL 15 cluster, a single-node Kafka and (unless
# RELAYTEST_NO_RABBITMQ=1) a RabbitMQ node for tests, demo and bench.
# Source it: `. scripts/servers.sh; servers_start` exports RELAYTEST_PG_PORT, RELAYTEST_PG_DIR,
# RELAYTEST_KAFKA_PORT, RELAYTEST_KAFKA_DIR, RELAYTEST_RABBITMQ_PORT, RELAYTEST_RABBITMQ_DIR;
# `servers_stop` removes everything.
_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# free_ports N [BASE]: a port whose next N-1 ports are free too, below the kernel's
# ephemeral range (32768-), where an outgoing connection could take one first: the first
# such from BASE (stepping by 2), or from a random start in 22000-31998. The tests' and the
# servers' one way to pick ports. Tests run side by side, and a port handed out is free
# until its program listens: so each handed-out range is noted (under a lock, in
# /tmp/outbox-ports.<uid>.reserved) and not handed out again for an hour.
free_ports() {
    local n=$1 p=${2:-$((22000 + (RANDOM % 5000) * 2))} i ok now fd
    local reserved=/tmp/outbox-ports.$(id -u).reserved tries=0
    now=$(date +%s)
    exec {fd}>>"/tmp/outbox-ports.$(id -u).lock" || return 1
    flock "$fd" || return 1
    touch "$reserved"
    awk -v now="$now" '$3 > now - 3600' "$reserved" >"$reserved.new" && mv "$reserved.new" "$reserved"
    while :; do
        ok=1
        for ((i = 0; i < n; i++)); do
            if (exec 3<>"/dev/tcp/127.0.0.1/$((p + i))") 2>/dev/null; then ok=0; break; fi
        done
        if [ "$ok" = 1 ] && awk -v lo="$p" -v hi=$((p + n - 1)) '$1 <= hi && $1 + $2 - 1 >= lo { f = 1 } END { exit f }' "$reserved" &&
            [ $((p + n)) -le 32768 ]; then
            echo "$p $n $now" >>"$reserved"
            exec {fd}>&-
            echo "$p"
            return 0
        fi
        p=$((p + 2))
        [ $((p + n)) -le 32768 ] || p=22000
        tries=$((tries + 1))
        if [ "$tries" -gt 6000 ]; then # every port of 22000-32767 tried
            exec {fd}>&-
            echo "free_ports: no $n free ports below 32768" >&2
            return 1
        fi
    done
}

# Ports are drawn below the kernel's ephemeral range (32768+) so that no outgoing
# connection can hold them.
servers_start() {
    RELAYTEST_SERVERS_DIR=$(mktemp -d /tmp/outbox-servers.XXXXXX)
    chmod 755 "$RELAYTEST_SERVERS_DIR"
    export RELAYTEST_SERVERS_DIR
    export RELAYTEST_PG_DIR=$RELAYTEST_SERVERS_DIR/pg
    export RELAYTEST_KAFKA_DIR=$RELAYTEST_SERVERS_DIR/kafka
    RELAYTEST_PG_PORT=$(free_ports 2 "${RELAYTEST_PG_PORT_BASE:-$((16000 + (RANDOM % 3000) * 2))}")
    export RELAYTEST_PG_PORT
    bash "$_here/../test/env/pg.sh" start "$RELAYTEST_PG_DIR" "$RELAYTEST_PG_PORT" || return 1
    RELAYTEST_KAFKA_PORT=$(free_ports 2 "${RELAYTEST_KAFKA_PORT_BASE:-$((10000 + (RANDOM % 3000) * 2))}")
    export RELAYTEST_KAFKA_PORT
    bash "$_here/../test/env/kafka.sh" start "$RELAYTEST_KAFKA_DIR" "$RELAYTEST_KAFKA_PORT" || return 1
    local rabbit=""
    unset RELAYTEST_RABBITMQ_DIR RELAYTEST_RABBITMQ_PORT # (inherited ones are another caller's node)
    if [ "${RELAYTEST_NO_RABBITMQ:-}" != 1 ]; then
        export RELAYTEST_RABBITMQ_DIR=$RELAYTEST_SERVERS_DIR/rabbitmq
        RELAYTEST_RABBITMQ_PORT=$(free_ports 3 "${RELAYTEST_RABBITMQ_PORT_BASE:-$((6000 + (RANDOM % 900) * 4))}")
        export RELAYTEST_RABBITMQ_PORT
        bash "$_here/../test/env/rabbitmq.sh" start "$RELAYTEST_RABBITMQ_DIR" "$RELAYTEST_RABBITMQ_PORT" || return 1
        rabbit=", RabbitMQ on 127.0.0.1:$RELAYTEST_RABBITMQ_PORT"
    fi
    echo "servers: PostgreSQL on 127.0.0.1:$RELAYTEST_PG_PORT, Kafka on 127.0.0.1:$RELAYTEST_KAFKA_PORT$rabbit ($RELAYTEST_SERVERS_DIR)" >&2
}

servers_stop() {
    [ -n "${RELAYTEST_SERVERS_DIR:-}" ] || return 0
    [ -z "${RELAYTEST_RABBITMQ_DIR:-}" ] || bash "$_here/../test/env/rabbitmq.sh" stop "$RELAYTEST_RABBITMQ_DIR" || true
    bash "$_here/../test/env/kafka.sh" stop "$RELAYTEST_KAFKA_DIR" || true
    bash "$_here/../test/env/pg.sh" kill "$RELAYTEST_PG_DIR" >/dev/null 2>&1 || true
    rm -rf "$RELAYTEST_SERVERS_DIR"
    RELAYTEST_SERVERS_DIR=
}
