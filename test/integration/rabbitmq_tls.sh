#!/usr/bin/env bash
# amqps:// end to end, against a RabbitMQ node of the test's own with a TLS listener
# (certificates made here with openssl): the relay publishes 500 rows over TLS verifying
# the broker's certificate and host name against OUTBOX_RABBITMQ_CA_FILE and presenting a
# client certificate, outbox-inbox applies them all over TLS, and --check-config refuses a
# broker whose certificate another CA signed (exit 1, naming the TLS failure) and a client
# certificate without its key (exit 2, naming both settings).
. "$(dirname "$0")/lib.sh"
[ "$SINK" = rabbitmq ] || fail "run with RELAYTEST_SINK=rabbitmq"
pki=$WORK/pki
mkdir -p "$pki"
cert() { # NAME CN CA: a key and a certificate for CN (localhost, 127.0.0.1) signed by CA
    openssl req -newkey rsa:2048 -nodes -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "/CN=$2" >/dev/null 2>&1 &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$pki/san.ext" &&
        openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$3.crt" -CAkey "$pki/$3.key" -CAcreateserial -days 2 \
            -extfile "$pki/san.ext" -out "$pki/$1.crt" >/dev/null 2>&1 || fail "openssl: $1"
}
for ca in ca other-ca; do
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/$ca.key" -out "$pki/$ca.crt" -days 2 \
        -subj "/CN=outbox-relay test $ca" >/dev/null 2>&1 || fail "openssl: $ca"
done
cert server localhost ca
cert client outbox-relay ca
chmod 644 "$pki"/*

node=$WORK/rabbitmq
port=$(free_ports 4)
tls_port=$((port + 3))
stop_node() { bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" stop "$node" >/dev/null 2>&1 || true; }
trap 'TEST_RC=${TEST_RC:-$?}; stop_node; cleanup' EXIT
RABBITMQ_TLS_PKI=$pki bash "$RELAYTEST_SRC/test/env/rabbitmq.sh" start "$node" "$port" || fail "the TLS node did not start"
plain=amqp://guest:guest@127.0.0.1:$port
tls=amqps://guest:guest@localhost:$tls_port
exchange=$TOPIC_PREFIX.tls queue=$TOPIC_PREFIX.tls.queue
"$RELAYTEST_AMQP_BIN" bind "$plain" "$exchange" "$queue" "$TOPIC_PREFIX.#" || fail "bind on the TLS node failed"

setup_db
setup_inbox_db
psqlc "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
       SELECT 'order', 'k' || (g % 10), 'Placed', jsonb_build_object('n', g) FROM generate_series(1, 500) g"
tls_env=(OUTBOX_RABBITMQ_URL="$tls" OUTBOX_RABBITMQ_EXCHANGE="$exchange" OUTBOX_RABBITMQ_CA_FILE="$pki/ca.crt"
    OUTBOX_RABBITMQ_CERT_FILE="$pki/client.crt" OUTBOX_RABBITMQ_KEY_FILE="$pki/client.key")
relay_env
env "${RELAY_BASE_ENV[@]}" "${tls_env[@]}" "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/conf.log" 2>&1 ||
    fail "--check-config over TLS exited $?: $(cat "$WORK/conf.log")"
RELAY_ENV=("${tls_env[@]}")
start_relay main >/dev/null
wait_until 60 "500 rows SENT over TLS" all_sent
grep -q "rabbitmq: connected\|lease: acquired" "$WORK/relay-main.log" || fail "the relay did not start"
INBOX_RABBITMQ_CA_FILE=$pki/ca.crt
start_inbox inbox INBOX_RABBITMQ_URL="$tls" INBOX_RABBITMQ_QUEUES="$queue" INBOX_RABBITMQ_CA_FILE="$pki/ca.crt" \
    INBOX_RABBITMQ_CERT_FILE="$pki/client.crt" INBOX_RABBITMQ_KEY_FILE="$pki/client.key"
wait_until 60 "500 events applied by outbox-inbox over TLS" eval '[ "$(cpsql "SELECT count(*) FROM applied")" = 500 ]'
[ "$(cpsql "SELECT max(times) FROM applied")" = 1 ] || fail "an event was applied twice"
stop_relay inbox || fail "outbox-inbox exited $? on SIGTERM"
stop_relay main || fail "relay exited $? on SIGTERM"
log "500 rows published and applied over TLS (CA verified, client certificate presented)"

rc=0
env "${RELAY_BASE_ENV[@]}" "${tls_env[@]}" OUTBOX_RABBITMQ_CA_FILE="$pki/other-ca.crt" "$RELAYTEST_RELAY_BIN" --check-config \
    >"$WORK/conf.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "rabbitmq: cannot connect to localhost:$tls_port (TLS)" "$WORK/conf.log" ||
    fail "--check-config against a certificate of another CA exited $rc: $(cat "$WORK/conf.log")"
log "another CA: $(grep -o 'rabbitmq: .*' "$WORK/conf.log" | head -1)"
rc=0
env "${RELAY_BASE_ENV[@]}" "${tls_env[@]}" OUTBOX_RABBITMQ_KEY_FILE= "$RELAYTEST_RELAY_BIN" --check-config \
    >"$WORK/conf.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "OUTBOX_RABBITMQ_CERT_FILE and OUTBOX_RABBITMQ_KEY_FILE: give both or neither" "$WORK/conf.log" ||
    fail "a certificate without its key: exit $rc: $(cat "$WORK/conf.log")"
log "ok"
