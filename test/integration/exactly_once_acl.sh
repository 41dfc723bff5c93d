#!/usr/bin/env bash
# Exactly-once against a broker that authorizes every request by ACLs (test/env/kafka.sh
# acl: SASL_PLAINTEXT with PLAIN, StandardAuthorizer, nothing allowed without an ACL), the
# relay logged in as `relay`. Each missing ACL, granted one at a time, stops the relay with a
# message that names what to grant, and nothing is published meanwhile:
# - none at all: WRITE and DESCRIBE on the TransactionalId (the fence);
# - then the progress topic (READ, WRITE, DESCRIBE, and CREATE: the relay makes it);
# - then the event topic: WRITE and DESCRIBE.
# With all of them every row is published once (read_committed), and the next relay warns
# that the progress topic has one replica and min.insync.replicas 1. Then a broker whose
# transaction state log cannot be made (transaction.state.log.replication.factor 3 on one
# broker: a cluster without transactions) is named as such.
. "$(dirname "$0")/lib.sh"
setup_db
secrets=$WORK/secrets
mkdir -p "$secrets"
printf 'relay-%s\n' "$RANDOM$RANDOM" >"$secrets/kafka-password"
chmod 600 "$secrets/kafka-password"
kport=$(free_port)
while port_open $((kport + 2)) || port_open $((kport + 3)); do
    kport=$(free_port)
done
bash "$RELAYTEST_SRC/test/env/kafka.sh" acl "$WORK/kafka" "$kport" relay "$secrets/kafka-password" ||
    fail "the ACL broker did not start"
acl_cleanup() {
    TEST_RC=${TEST_RC:-$?}
    for d in "$WORK/kafka" "$WORK/kafka-notxn"; do
        [ ! -d "$d" ] || bash "$RELAYTEST_SRC/test/env/kafka.sh" kill "$d" || true
    done
    cleanup
}
trap acl_cleanup EXIT
BOOTSTRAP=127.0.0.1:$((kport + 2)) # the superuser's listener: the checker and kafka-admin
allow() { bash "$RELAYTEST_SRC/test/env/kafka.sh" allow "$WORK/kafka" "$@" || fail "kafka.sh allow $*"; }
"$RELAYTEST_ADMIN_BIN" --bootstrap "$BOOTSTRAP" create-topic "$TOPIC_PREFIX.order" 6 >/dev/null ||
    fail "creating the event topic"
psqlc "INSERT INTO outbox ($OUTBOX_COLS) SELECT 'order', 'k' || (g % 20), 'E', '{}' FROM generate_series(1, 300) g"

RELAY_ENV=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX"
    OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$kport"
    OUTBOX_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT OUTBOX_KAFKA_SASL_MECHANISM=PLAIN
    OUTBOX_KAFKA_SASL_USERNAME=relay OUTBOX_KAFKA_SASL_PASSWORD_FILE="$secrets/kafka-password")
start_relay r1 >/dev/null
said() { grep -qF -- "$1" "$WORK/relay-r1.log"; }
none_sent() {
    [ "$(count_status SENT)" = 0 ] || fail "rows were recorded as published while an ACL was missing"
}
wait_until 60 "the relay to name the TransactionalId ACL" said "needs WRITE and DESCRIBE on TransactionalId"
log "no ACL: $(grep -m1 -o 'fatal producer error.*on TransactionalId [^ ]*' "$WORK/relay-r1.log" | cut -c1-240)"
none_sent
allow transactional-id "$TOPIC_PREFIX" prefixed User:relay Write,Describe
wait_until 60 "the relay to name the progress topic's ACLs" said "READ, WRITE and DESCRIBE on the progress topic"
log "TransactionalId granted: $(grep -m1 -o 'exactly-once: the progress topic.*on the progress topic [^ ,]*' "$WORK/relay-r1.log" | cut -c1-220)"
none_sent
allow topic "$TOPIC_PREFIX.progress" literal User:relay Describe,Read,Write,Create,DescribeConfigs
# the event topic's refusal: a line about its authorization after the table was taken
refused_topic_lines() {
    sed -n '/older producers fenced and the progress record read/,$p' "$WORK/relay-r1.log" |
        grep -F "$TOPIC_PREFIX.order" | grep -i 'authoriz'
}
refused_topic() { [ -n "$(refused_topic_lines)" ]; }
wait_until 60 "the relay to take the table and claim" said "older producers fenced and the progress record read"
wait_until 60 "the relay to name the event topic's refusal" refused_topic

log "progress topic granted: $(refused_topic_lines | head -1 | cut -c1-220)"
none_sent
allow topic "$TOPIC_PREFIX.order" literal User:relay Write,Describe
wait_until 90 "all 300 rows SENT once the event topic is granted" all_sent
stop_relay r1 || fail "relay r1 exited $? on SIGTERM"
check "$TOPIC_PREFIX.order" --exact --transactional || fail "with every ACL: a row lost or delivered twice"
# the next relay to take the table checks the progress topic r1 made: one replica and
# min.insync.replicas 1 on this single broker, warned about
start_relay r1b >/dev/null
wait_until 60 "relay r1b to take the table" grep -qF "older producers fenced" "$WORK/relay-r1b.log"
grep -qF "has 1 replica and min.insync.replicas 1" "$WORK/relay-r1b.log" ||
    fail "no warning about the progress topic's replication: $(grep -i replica "$WORK/relay-r1b.log")"
stop_relay r1b || fail "relay r1b exited $? on SIGTERM"
bash "$RELAYTEST_SRC/test/env/kafka.sh" kill "$WORK/kafka" || true

# a broker without transactions: its transaction state log needs 3 brokers and it is one
nport=$(free_port)
while port_open $((nport + 1)); do
    nport=$(free_port)
done
KAFKA_TXN_LOG_RF=3 bash "$RELAYTEST_SRC/test/env/kafka.sh" start "$WORK/kafka-notxn" "$nport" ||
    fail "the broker without transactions did not start"
RELAY_ENV=(OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX="$TOPIC_PREFIX.n"
    OUTBOX_PROGRESS_TOPIC="$TOPIC_PREFIX.progress" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:$nport")
psqlc "INSERT INTO outbox ($OUTBOX_COLS) VALUES ('order', 'k1', 'E', '{}')"
start_relay r2 >/dev/null
wait_until 60 "the relay to say no transaction coordinator answered" \
    grep -qF "no transaction coordinator answered" "$WORK/relay-r2.log"
log "no transactions: $(grep -m1 -o 'fencing older producers.*coordinator answered' "$WORK/relay-r2.log" | cut -c1-220)"
[ "$(count_status PENDING)" = 1 ] || fail "a row was published without a transaction coordinator"
stop_relay r2 || fail "relay r2 exited $? on SIGTERM"
log "ok: each missing ACL named, nothing published until granted, then every row once; a cluster without transactions named"
