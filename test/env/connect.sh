#!/usr/bin/env bash
# Kafka Connect in standalone mode with Debezium's PostgreSQL connector, from Maven Central
# jars (test/env/connect-pom.xml), for the side-by-side test against Debezium.
#   connect.sh fetch                        download the jars (cached in ~/.m2 and $CONNECT_JARS)
#   connect.sh start DIR BOOTSTRAP CONNECTOR_PROPERTIES
#                                           a worker (String converters, offsets in DIR) running
#                                           the connector; waits until its REST port answers
#   connect.sh stop DIR                     SIGTERM, then SIGKILL after 20 s
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jars=${CONNECT_JARS:-$HOME/.cache/outbox-relay/connect-jars}

fetch() {
    if [ -f "$jars/.complete" ]; then return 0; fi
    mkdir -p "$jars"
    mvn -B -q -f "$here/connect-pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$jars" >&2
    touch "$jars/.complete"
}

free_port() { # below the ephemeral port range (32768-), where an outgoing connection could take it first
    local p=$((22000 + RANDOM % 10000))
    while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
    echo "$p"
}

start() {
    local dir=$1 bootstrap=$2 connector=$3 port i
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    port=$(free_port)
    cat >"$dir/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$dir/offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$port
PROPS
    cat >"$dir/log4j2.properties" <<'PROPS'
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = STDERR
logger.dbz.name = io.debezium
logger.dbz.level = info
PROPS
    echo "$port" >"$dir/port"
    # CONNECT_JVM_OPTS: the JVM's options (the default starts fast for tests: a small heap,
    # the serial collector, C1 only; bench/debezium.sh gives it the JVM's defaults and 1 GB)
    # shellcheck disable=SC2086
    setsid java ${CONNECT_JVM_OPTS:--Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$jars/*" \
        org.apache.kafka.connect.cli.ConnectStandalone "$dir/worker.properties" "$connector" \
        >>"$dir/connect.log" 2>&1 </dev/null &
    echo $! >"$dir/connect.pid"
    for ((i = 0; i < 900; i++)); do
        if curl -sf "http://127.0.0.1:$port/connectors" >/dev/null 2>&1; then return 0; fi
        kill -0 "$(cat "$dir/connect.pid")" 2>/dev/null || break
        sleep 0.1
    done
    echo "connect.sh: the Connect worker in $dir did not come up; log: $dir/connect.log" >&2
    tail -20 "$dir/connect.log" >&2
    return 1
}

stop() {
    local dir=$1 pid i
    [ -f "$dir/connect.pid" ] || return 0
    pid=$(cat "$dir/connect.pid")
    kill -TERM "$pid" 2>/dev/null || { rm -f "$dir/connect.pid"; return 0; }
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$dir/connect.pid"
}

case "${1:-}" in
fetch) fetch ;;
start) start "$2" "$3" "$4" ;;
stop) stop "$2" ;;
*) echo "usage: $0 fetch | start DIR BOOTSTRAP CONNECTOR_PROPERTIES | stop DIR" >&2; exit 2 ;;
esac
