#!/usr/bin/env bash
# Throwaway single-node Apache Kafka (KRaft) from Maven Central jars, for tests, demo and bench.
#   kafka.sh fetch              download the broker jars (cached in ~/.m2 and $KAFKA_JARS)
#   kafka.sh start DIR PORT     format DIR, start a broker on 127.0.0.1:PORT, wait until it serves
#   kafka.sh stop DIR           SIGTERM, then SIGKILL after 20 s
#   kafka.sh kill DIR           SIGKILL at once
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jars=${KAFKA_JARS:-$HOME/.cache/outbox-relay/kafka-jars}

fetch() {
    if [ -f "$jars/.complete" ]; then return 0; fi
    mkdir -p "$jars"
    mvn -B -q -f "$here/kafka-pom.xml" \
        org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$jars" >&2
    touch "$jars/.complete"
}

wait_port() { # port seconds
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

start() {
    local dir=$1 port=$2 cport=$(($2 + 1))
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ ! -f "$dir/server.properties" ]; then
        cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=6
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.dedupe.buffer.size=8388608
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
PROPS
        java -cp "$jars/*" kafka.tools.StorageTool format -t "$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)" \
            -c "$dir/server.properties" >"$dir/format.log" 2>&1
    fi
    KAFKA_HEAP=${KAFKA_HEAP:--Xms128m -Xmx512m}
    # shellcheck disable=SC2086
    setsid java $KAFKA_HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" \
        -cp "$jars/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 </dev/null &
    echo $! >"$dir/broker.pid"
    if ! wait_port "$port" 90; then
        echo "kafka.sh: broker on port $port did not come up; log: $dir/broker.log" >&2
        tail -20 "$dir/broker.log" >&2
        return 1
    fi
}

stop() {
    local dir=$1 sig=${2:-TERM} pid i
    [ -f "$dir/broker.pid" ] || return 0
    pid=$(cat "$dir/broker.pid")
    kill -"$sig" "$pid" 2>/dev/null || { rm -f "$dir/broker.pid"; return 0; }
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    rm -f "$dir/broker.pid"
}

case ${1:-} in
fetch) fetch ;;
start) start "$2" "$3" ;;
stop) stop "$2" ;;
kill) stop "$2" KILL ;;
*) echo "usage: $0 fetch | start DIR PORT | stop DIR | kill DIR" >&2; exit 2 ;;
esac
