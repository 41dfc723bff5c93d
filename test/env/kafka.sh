#!/usr/bin/env bash
# Throwaway single-node Apache Kafka (KRaft) from Maven Central jars, for tests, demo and bench.
#   kafka.sh fetch              download the broker jars (cached in ~/.m2 and $KAFKA_JARS)
#   kafka.sh start DIR PORT     format DIR, start a broker on 127.0.0.1:PORT, wait until it serves
#   kafka.sh stop DIR           SIGTERM, then SIGKILL after 20 s
#   kafka.sh kill DIR           SIGKILL at once
#   kafka.sh cluster DIR PORT   three nodes (broker and controller each) on PORT, PORT+2 and
#                               PORT+4 (controllers on +1), replication factor 3,
#                               min.insync.replicas 2; node i lives in DIR/iN. Stop, kill and
#                               start again one node with stop/kill/restart DIR/iN.
#   kafka.sh proxied DIR PORT PROXY_PORT
#                               one node whose client listener on 127.0.0.1:PORT+2 advertises
#                               127.0.0.1:PROXY_PORT, where a proxy (test/tools/fault_proxy.c)
#                               forwards to it: every client connection, after bootstrap too,
#                               goes through the proxy; brokers talk PLAINTEXT on PORT
#   kafka.sh restart DIR        starts a stopped node again with its existing data
#   kafka.sh secure DIR PORT PEM USER PASSWORD_FILE
#                               one node whose client listener on 127.0.0.1:PORT is SASL_SSL
#                               (SCRAM-SHA-512; USER created at format time with the
#                               password in PASSWORD_FILE; PEM holds the server's PKCS#8
#                               key and certificate chain); brokers talk PLAINTEXT on PORT+2
#   kafka.sh acl DIR PORT USER PASSWORD_FILE
#                               one node that authorizes every request by ACLs
#                               (StandardAuthorizer, nothing allowed without one): its client
#                               listener on 127.0.0.1:PORT is SASL_PLAINTEXT with PLAIN, where
#                               USER logs in with the password in PASSWORD_FILE; its PLAINTEXT
#                               listener on PORT+2 (a superuser: brokers, tests, ACLs) is open
#   kafka.sh allow DIR RESOURCE NAME literal|prefixed PRINCIPAL OPERATION[,OPERATION...]
#                               ACLs on an acl node (through its PLAINTEXT listener, with
#                               Kafka's AclCommand): PRINCIPAL (User:name) may each OPERATION
#                               (Read, Write, Describe, Create, DescribeConfigs) on RESOURCE
#                               (topic, transactional-id) NAME
#   kafka.sh fetch-tools        download Kafka's command-line tools (for allow)
#   kafka.sh producers DIR TOPIC
#                               the producers (id:epoch, one per line) whose record batches are
#                               in TOPIC's log segments on the node in DIR, read from the files
#                               with Kafka's DumpLogSegments: what wrote the topic, from the
#                               broker's side (a client that made its producer anew shows a
#                               new id or epoch)
#   kafka.sh scram DIR USER PASSWORD_FILE
#                               sets USER's SCRAM-SHA-512 password on a secure node to the one
#                               in PASSWORD_FILE (through its PLAINTEXT listener); connections
#                               already logged in stay so until they reconnect
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# KAFKA_TXN_LOG_RF sets a new node's transaction.state.log.replication.factor (above the
# brokers' count: a cluster without transactions, whose coordinator never comes).
# KAFKA_VERSION picks another broker release (its jars cached apart); the default is the
# one kafka-pom.xml names.
default_version=$(sed -n 's|.*<artifactId>kafka_2.13</artifactId><version>\(.*\)</version>.*|\1|p' "$here/kafka-pom.xml")
version=${KAFKA_VERSION:-$default_version}
if [ "$version" = "$default_version" ]; then
    jars=${KAFKA_JARS:-$HOME/.cache/outbox-relay/kafka-jars}
else
    jars=$HOME/.cache/outbox-relay/kafka-jars-$version
fi

# mvn_copy POM DIR: POM's runtime dependencies into DIR, marked complete
mvn_copy() {
    mvn -B -q -f "$1" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$2" >&2
    touch "$2/.complete"
}

fetch() {
    if [ -f "$jars/.complete" ]; then return 0; fi
    mkdir -p "$jars"
    local pom=$here/kafka-pom.xml
    if [ "$version" != "$default_version" ]; then
        pom=$jars/pom.xml
        sed "s|<artifactId>kafka_2.13</artifactId><version>$default_version</version>|<artifactId>kafka_2.13</artifactId><version>$version</version>|" \
            "$here/kafka-pom.xml" >"$pom"
    fi
    mvn_copy "$pom" "$jars"
    rm -f "$jars/pom.xml"
}

tools=$HOME/.cache/outbox-relay/kafka-tools-jars-$version
fetch_tools() {
    if [ -f "$tools/.complete" ]; then return 0; fi
    mkdir -p "$tools"
    mvn_copy "$here/kafka-tools-pom.xml" "$tools"
}

allow() {
    local dir=$1 resource=$2 name=$3 pattern=$4 principal=$5 port op ops=()
    port=$(cat "$dir/port")
    for op in ${6//,/ }; do ops+=(--operation "$op"); done
    fetch_tools
    java -cp "$tools/*" -Dlog4j2.configurationFile="$here/log4j2-warn.properties" org.apache.kafka.tools.AclCommand \
        --bootstrap-server "127.0.0.1:$((port + 2))" --add --allow-principal "$principal" "${ops[@]}" \
        "--$resource" "$name" --resource-pattern-type "$pattern" >"$dir/acl.log" 2>&1 ||
        { cat "$dir/acl.log" >&2; return 1; }
}

wait_port() { # port seconds
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    return 1
}

# node DIR PORT ID VOTERS CLUSTER_ID RF [FORMAT_ARGS...]: writes the node's settings and formats
# it (with the storage tool's extra arguments), once.
node() {
    local dir=$1 port=$2 id=$3 voters=$4 cluster=$5 rf=$6 cport=$(($2 + 1)) isr=1
    [ "$rf" -gt 1 ] && isr=2
    mkdir -p "$dir"
    [ -f "$dir/server.properties" ] && return 0
    cat >"$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=6
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=true
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=${KAFKA_TXN_LOG_RF:-$rf}
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.dedupe.buffer.size=8388608
PROPS
    cp "$here/log4j2-warn.properties" "$dir/log4j2.properties" # warnings to stderr
    echo "$port" >"$dir/port"
    java -cp "$jars/*" kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" "${@:7}" \
        >"$dir/format.log" 2>&1 || { echo "kafka.sh: formatting $dir failed:" >&2; cat "$dir/format.log" >&2; return 1; }
}

# launch DIR: runs the node in the background (its own session: no terminal signal reaches it)
launch() {
    local dir=$1
    KAFKA_HEAP=${KAFKA_HEAP:--Xms128m -Xmx512m}
    # shellcheck disable=SC2086
    setsid java $KAFKA_HEAP -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$dir/log4j2.properties" \
        -cp "$jars/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 </dev/null &
    echo $! >"$dir/broker.pid"
}

wait_node() {
    local dir=$1
    if ! wait_port "$(cat "$dir/port")" 90; then
        echo "kafka.sh: broker in $dir did not come up; log: $dir/broker.log" >&2
        tail -20 "$dir/broker.log" >&2
        return 1
    fi
}

# A random cluster id (16 bytes, base64url). It never starts with '-', which the storage
# tool's command line would take for an option.
cluster_id() { echo "A$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c2-22)"; }

start() {
    local dir=$1 port=$2
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    node "$dir" "$port" 1 "1@127.0.0.1:$((port + 1))" "$(cluster_id)" 1
    launch "$dir"
    wait_node "$dir"
}

cluster() {
    local dir=$1 port=$2 i voters="" id
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    id=$(cluster_id)
    for i in 1 2 3; do voters+="${voters:+,}$i@127.0.0.1:$((port + 2 * (i - 1) + 1))"; done
    for i in 1 2 3; do node "$dir/n$i" $((port + 2 * (i - 1))) "$i" "$voters" "$id" 3; done
    for i in 1 2 3; do launch "$dir/n$i"; done
    for i in 1 2 3; do wait_node "$dir/n$i" || return 1; done
}

secure() {
    local dir=$1 port=$2 pem=$3 user=$4 password
    password=$(cat "$5")
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    node "$dir" "$((port + 2))" 1 "1@127.0.0.1:$((port + 3))" "$(cluster_id)" 1 \
        "--add-scram=SCRAM-SHA-512=[name=$user,password=$password]"
    # the client listener: SASL_SSL with SCRAM, the server's certificate from a PEM file
    cat >>"$dir/server.properties" <<PROPS
listeners=SASL_SSL://127.0.0.1:$port,PLAINTEXT://127.0.0.1:$((port + 2)),CONTROLLER://127.0.0.1:$((port + 3))
advertised.listeners=SASL_SSL://localhost:$port,PLAINTEXT://127.0.0.1:$((port + 2)),CONTROLLER://127.0.0.1:$((port + 3))
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$pem
PROPS
    echo "$port" >"$dir/port"
    launch "$dir"
    wait_node "$dir"
}

acl() {
    local dir=$1 port=$2 user=$3 password
    password=$(cat "$4")
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    node "$dir" "$((port + 2))" 1 "1@127.0.0.1:$((port + 3))" "$(cluster_id)" 1
    cat >>"$dir/server.properties" <<PROPS
listeners=SASL_PLAINTEXT://127.0.0.1:$port,PLAINTEXT://127.0.0.1:$((port + 2)),CONTROLLER://127.0.0.1:$((port + 3))
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port,PLAINTEXT://127.0.0.1:$((port + 2)),CONTROLLER://127.0.0.1:$((port + 3))
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$user="$password";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
PROPS
    echo "$port" >"$dir/port"
    launch "$dir"
    wait_node "$dir" && wait_port $((port + 2)) 30
}

scram() {
    local dir=$1 user=$2 password port
    password=$(cat "$3")
    port=$(cat "$dir/port")
    java -cp "$jars/*" kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$((port + 2))" --alter \
        --add-config "SCRAM-SHA-512=[iterations=8192,password=$password]" --entity-type users \
        --entity-name "$user" >"$dir/scram.log" 2>&1 || { cat "$dir/scram.log" >&2; return 1; }
}

proxied() {
    local dir=$1 port=$2 proxy=$3
    fetch
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    node "$dir" "$port" 1 "1@127.0.0.1:$((port + 1))" "$(cluster_id)" 1
    cat >>"$dir/server.properties" <<PROPS
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1)),PROXIED://127.0.0.1:$((port + 2))
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$((port + 1)),PROXIED://127.0.0.1:$proxy
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT
PROPS
    launch "$dir"
    wait_node "$dir" && wait_port $((port + 2)) 30
}

restart() {
    launch "$1"
    wait_node "$1"
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

producers() { # DIR TOPIC
    local d files=
    for d in "$1/data/$2"-*; do # the topic's partition folders: TOPIC-N exactly
        [[ ${d#"$1/data/$2"-} =~ ^[0-9]+$ ]] || continue
        for f in "$d"/*.log; do [ -f "$f" ] && files+=${files:+,}$f; done
    done
    [ -n "$files" ] || { echo "kafka.sh producers: no log segment of $2 under $1/data" >&2; return 1; }
    java -cp "$jars/*" kafka.tools.DumpLogSegments --files "$files" |
        sed -n 's/.* producerId: \(-\{0,1\}[0-9]*\) producerEpoch: \(-\{0,1\}[0-9]*\) .*/\1:\2/p' | sort -u
}

case ${1:-} in
fetch) fetch ;;
producers) producers "$2" "$3" ;;
start) start "$2" "$3" ;;
stop) stop "$2" ;;
kill) stop "$2" KILL ;;
cluster) cluster "$2" "$3" ;;
restart) restart "$2" ;;
secure) secure "$2" "$3" "$4" "$5" "$6" ;;
acl) acl "$2" "$3" "$4" "$5" ;;
allow) allow "$2" "$3" "$4" "$5" "$6" "$7" ;;
fetch-tools) fetch_tools ;;
scram) scram "$2" "$3" "$4" ;;
proxied) proxied "$2" "$3" "$4" ;;
*) echo "usage: $0 fetch | start DIR PORT | stop DIR | kill DIR | cluster DIR PORT | restart DIR" >&2; exit 2 ;;
esac
