#!/usr/bin/env bash
# Throwaway RabbitMQ node from Debian's rabbitmq-server, for tests, demo and bench.
#   rabbitmq.sh start DIR PORT   a node with its data, logs, cookie and node name in DIR; AMQP on
#                                127.0.0.1:PORT, Erlang distribution on PORT+1, its own epmd on
#                                PORT+2 (loopback only); waits until it serves
#   rabbitmq.sh stop DIR         stops the node (rabbitmqctl, then SIGTERM/SIGKILL by its pid)
#                                and its epmd
#   rabbitmq.sh kill DIR         SIGKILL the node and its epmd at once
#   rabbitmq.sh restart DIR      starts a stopped node again with its data
#   rabbitmq.sh ctl DIR ARGS...  rabbitmqctl against the node
# RABBITMQ_TLS_PKI=D (a folder with ca.crt, server.crt and server.key) at start adds an AMQP
# TLS listener on 127.0.0.1:PORT+3 with that certificate (client certificates verified when
# sent, not required).
# The node runs as the calling user (the Debian wrapper that switches to the rabbitmq user is
# bypassed) and touches nothing outside DIR.
set -euo pipefail
bin=/usr/lib/rabbitmq/bin

wait_port() { # port seconds
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

# The node's environment, from DIR's port file.
node_env() {
    local dir=$1 port
    port=$(cat "$dir/port")
    export HOME=$dir # the Erlang cookie: $HOME/.erlang.cookie, for the node and rabbitmqctl
    export RABBITMQ_NODENAME=outbox$port@localhost
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=$port
    export RABBITMQ_DIST_PORT=$((port + 1))
    export ERL_EPMD_PORT=$((port + 2))
    export ERL_EPMD_ADDRESS=127.0.0.1
    export RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf
    export RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
    export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
    export RABBITMQ_MNESIA_BASE=$dir/mnesia
    export RABBITMQ_LOG_BASE=$dir/log
    export RABBITMQ_PID_FILE=$dir/node.pid
    export RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
    export RABBITMQ_USE_LONGNAME=false
}

launch() {
    local dir=$1
    node_env "$dir"
    setsid epmd -port "$ERL_EPMD_PORT" -address 127.0.0.1 >"$dir/epmd.log" 2>&1 </dev/null &
    echo $! >"$dir/epmd.pid"
    wait_port "$ERL_EPMD_PORT" 10 || { echo "rabbitmq.sh: epmd did not start" >&2; return 1; }
    setsid "$bin/rabbitmq-server" >>"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/server.pid"
    if ! "$bin/rabbitmqctl" -q wait --timeout 120 "$RABBITMQ_PID_FILE" >>"$dir/server.log" 2>&1 ||
        ! wait_port "$RABBITMQ_NODE_PORT" 30; then
        echo "rabbitmq.sh: node in $dir did not come up; log: $dir/server.log" >&2
        tail -20 "$dir/server.log" >&2
        return 1
    fi
}

start() {
    local dir=$1 port=$2
    mkdir -p "$dir/mnesia" "$dir/log"
    echo "$port" >"$dir/port"
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/.erlang.cookie"
    chmod 400 "$dir/.erlang.cookie"
    : >"$dir/rabbitmq-env.conf"
    echo '[].' >"$dir/enabled_plugins"
    echo '[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].' >"$dir/advanced.config"
    cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$port
loopback_users = none
log.file.level = warning
log.console = false
vm_memory_high_watermark.relative = 0.2
disk_free_limit.absolute = 50MB
CONF
    if [ -n "${RABBITMQ_TLS_PKI:-}" ]; then
        cat >>"$dir/rabbitmq.conf" <<CONF
listeners.ssl.default = 127.0.0.1:$((port + 3))
ssl_options.cacertfile = $RABBITMQ_TLS_PKI/ca.crt
ssl_options.certfile = $RABBITMQ_TLS_PKI/server.crt
ssl_options.keyfile = $RABBITMQ_TLS_PKI/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
CONF
    fi
    launch "$dir"
}

stop_pid() { # file
    local pid i
    [ -f "$1" ] || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

kill_node() {
    local dir=$1 f
    for f in node.pid server.pid epmd.pid; do
        [ -f "$dir/$f" ] && kill -9 "$(cat "$dir/$f")" 2>/dev/null || true
    done
    rm -f "$dir/node.pid"
}

stop() {
    local dir=$1
    [ -f "$dir/port" ] || return 0
    node_env "$dir"
    timeout 30 "$bin/rabbitmqctl" -q stop "$RABBITMQ_PID_FILE" >>"$dir/server.log" 2>&1 || true
    stop_pid "$dir/node.pid"
    stop_pid "$dir/server.pid"
    stop_pid "$dir/epmd.pid"
    rm -f "$dir/node.pid"
}

case "${1:-}" in
start) start "$2" "$3" ;;
stop) stop "$2" ;;
kill) kill_node "$2" ;;
restart) launch "$2" ;;
ctl)
    node_env "$2"
    dir=$2
    shift 2
    exec "$bin/rabbitmqctl" -q "$@"
    ;;
*)
    echo "usage: rabbitmq.sh start DIR PORT | stop DIR | kill DIR | restart DIR | ctl DIR ARGS..." >&2
    exit 2
    ;;
esac
