#!/usr/bin/env bash
# Kafka Connect in standalone mode with Debezium's PostgreSQL connector, from Maven Central
# jars (test/env/connect-pom.xml), for the side-by-side test against Debezium.
#   connect.sh fetch                        download the jars (cached in ~/.m2 and $CONNECT_JARS)
#   connect.sh start DIR BOOTSTRAP CONNECTOR_PROPERTIES
#                                           a worker (String converters, offsets in DIR) running
#                                           the connector; waits until its REST port answers
#                                           (CONNECT_EXACTLY_ONCE=1: a distributed worker of a
#                                           group of its own with exactly.once.source.support=
#                                           enabled, its config, offsets and status topics new
#                                           at each start, and the connector submitted over REST
#                                           with exactly.once.support=required: KIP-618)
#   connect.sh stop DIR                     SIGTERM, then SIGKILL after 20 s
#   connect.sh outbox-connector NAME PG_PORT DB ROUTE [PLACEMENT]
#                                           prints the properties of a PostgreSQL connector
#                                           (pgoutput, a filtered publication and a slot named
#                                           NAME with '-' as '_', no snapshot) on public.outbox
#                                           with the outbox event router: topics ROUTE (with
#                                           ${routedByValue}), headers PLACEMENT
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

. "$here/../../scripts/servers.sh" # free_ports

start() {
    local dir=$1 bootstrap=$2 connector=$3 port i
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    port=$(free_ports 1)
    cat >"$dir/worker.properties" <<PROPS
bootstrap.servers=$bootstrap
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
offset.storage.file.filename=$dir/offsets
offset.flush.interval.ms=1000
listeners=http://127.0.0.1:$port
PROPS
    # the Java servers' logging: warnings to stderr (test/env/log4j2-warn.properties), and
    # Debezium's own lines at info
    { cat "$here/log4j2-warn.properties"; printf 'logger.dbz.name = io.debezium\nlogger.dbz.level = info\n'; } \
        >"$dir/log4j2.properties"
    local main=org.apache.kafka.connect.cli.ConnectStandalone args=("$dir/worker.properties" "$connector")
    if [ -n "${CONNECT_EXACTLY_ONCE:-}" ]; then
        local group
        group=outbox-connect-$(date +%s%N)
        main=org.apache.kafka.connect.cli.ConnectDistributed args=("$dir/worker.properties")
        sed -i '/^offset.storage.file.filename=/d' "$dir/worker.properties"
        cat >>"$dir/worker.properties" <<PROPS
group.id=$group
config.storage.topic=$group-configs
offset.storage.topic=$group-offsets
status.storage.topic=$group-status
config.storage.replication.factor=1
offset.storage.replication.factor=1
status.storage.replication.factor=1
exactly.once.source.support=enabled
PROPS
    fi
    echo "$port" >"$dir/port"
    # CONNECT_JVM_OPTS: the JVM's options (the default starts fast for tests: a small heap,
    # the serial collector, C1 only; bench/debezium.sh gives it the JVM's defaults and 1 GB)
    # shellcheck disable=SC2086
    setsid java ${CONNECT_JVM_OPTS:--Xms128m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$jars/*" \
        "$main" "${args[@]}" >>"$dir/connect.log" 2>&1 </dev/null &
    echo $! >"$dir/connect.pid"
    for ((i = 0; i < 900; i++)); do
        if curl -sf "http://127.0.0.1:$port/connectors" >/dev/null 2>&1; then
            [ -n "${CONNECT_EXACTLY_ONCE:-}" ] || return 0
            python3 - "$connector" >"$dir/connector.json" <<'PY'
import json, sys
conf = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if line and not line.startswith('#'):
        k, v = line.split('=', 1)
        conf[k] = v
conf['exactly.once.support'] = 'required'
print(json.dumps({'name': conf.pop('name'), 'config': conf}))
PY
            local code
            code=$(curl -s -o "$dir/connector.answer" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
                --data @"$dir/connector.json" "http://127.0.0.1:$port/connectors")
            [ "$code" != 201 ] || return 0
            echo "connect.sh: the worker refused the connector ($code): $(cat "$dir/connector.answer")" >&2
            return 1
        fi
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

outbox_connector() {
    local name=$1 port=$2 db=$3 route=$4 placement=${5:-} slot=${1//-/_}
    cat <<PROPS
name=$name
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
database.hostname=127.0.0.1
database.port=$port
database.user=postgres
database.password=unused
database.dbname=$db
topic.prefix=${slot}_cdc
plugin.name=pgoutput
slot.name=$slot
publication.name=$slot
publication.autocreate.mode=filtered
table.include.list=public.outbox
snapshot.mode=no_data
tombstones.on.delete=false
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.topic.replacement=$route
PROPS
    [ -z "$placement" ] || echo "transforms.outbox.table.fields.additional.placement=$placement"
}

case "${1:-}" in
fetch) fetch ;;
outbox-connector) outbox_connector "$2" "$3" "$4" "$5" "${6:-}" ;;
start) start "$2" "$3" "$4" ;;
stop) stop "$2" ;;
*) echo "usage: $0 fetch | start DIR BOOTSTRAP CONNECTOR_PROPERTIES | stop DIR" >&2; exit 2 ;;
esac
