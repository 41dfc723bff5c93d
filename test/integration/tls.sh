#!/usr/bin/env bash
# Secure connections end to end: PostgreSQL with ssl=on, reached only over TLS with a
# password (sslmode=verify-full against the test's own CA), and a Kafka listener on
# SASL_SSL with a SCRAM-SHA-512 user (certificates made here with openssl). Every secret
# comes from a _FILE variable; --check-config, the relay (500 rows published), the audit
# (over the same settings: all delivered), and outbox-inbox (applied them all) work, and no
# secret appears in any log, /status, /metrics or command output. A wrong Kafka password is
# refused by --check-config, naming the failure but not the password. Then every secret is
# rotated under the running relay and inbox (below): both go on with the new ones, without
# a restart. RELAYTEST_IMAGE=1 (tls_image) runs the image's programs, on Kafka 4.1.1.
. "$(dirname "$0")/lib.sh"
pki=$WORK/pki secrets=$WORK/secrets
mkdir -p "$pki" "$secrets"
chmod 755 "$WORK"
# a CA, and a server certificate for localhost / 127.0.0.1 signed by it (PKCS#8 key)
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 2 \
    -subj "/CN=outbox-relay test CA" >/dev/null 2>&1 || fail "openssl: CA"
openssl req -newkey rsa:2048 -nodes -keyout "$pki/server.key" -out "$pki/server.csr" -subj "/CN=localhost" \
    >/dev/null 2>&1 || fail "openssl: server key"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$pki/san.ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
    -extfile "$pki/san.ext" -out "$pki/server.crt" >/dev/null 2>&1 || fail "openssl: server certificate"
cat "$pki/server.key" "$pki/server.crt" >"$pki/server.pem"
chmod 644 "$pki"/*.crt "$pki/server.pem"

pg_secret="pg-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
kafka_secret="kafka-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"

# PostgreSQL of its own: TLS only, passwords (scram-sha-256); the owner keeps the socket
pg_port=$(free_port)
pg_env start "$WORK/pg" "$pg_port"
install -o postgres -m 600 "$pki/server.key" "$WORK/pg/data/server.key"
install -o postgres -m 644 "$pki/server.crt" "$WORK/pg/data/server.crt"
printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\npassword_encryption = 'scram-sha-256'\n" \
    >>"$WORK/pg/data/postgresql.conf"
printf 'local all postgres trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhost all all 127.0.0.1/32 reject\n' \
    >"$WORK/pg/data/pg_hba.conf"
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/server.log" -w -t 60 restart >/dev/null ||
    fail "PostgreSQL with ssl=on did not restart: $(tail -5 "$WORK/pg/server.log")"
pg_stop_own() { runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m immediate -w stop >/dev/null 2>&1 || true; }
owner="host=$WORK/pg port=$pg_port user=postgres dbname=outbox"
"$PG_BIN/psql" -X -q "$owner" -c "CREATE ROLE tls_relay LOGIN PASSWORD '$pg_secret'" \
    -c "CREATE ROLE tls_inbox LOGIN PASSWORD '$pg_secret'" -c "CREATE DATABASE billing OWNER tls_inbox" || fail "roles"
OUTBOX_PG_DSN=$owner "$RELAYTEST_RELAY_BIN" migrate >"$WORK/migrate.log" 2>&1 || fail "migrate: $(cat "$WORK/migrate.log")"
PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q "$owner" -v schema=public -v table=outbox \
    -v relay=tls_relay -v writer=postgres -f "$RELAYTEST_SRC/deploy/roles.sql" >/dev/null || fail "deploy/roles.sql"
"$PG_BIN/psql" -X -q "host=localhost port=$pg_port user=tls_relay dbname=outbox sslmode=disable password=$pg_secret" \
    -c "SELECT 1" >/dev/null 2>&1 && fail "PostgreSQL accepted a connection without TLS"

# Kafka: SASL_SSL client listener, on Kafka 4.1.1 when the programs' librdkafka can log in
# to it with SCRAM (2.6.1 and later: the image's, RELAYTEST_IMAGE=1), else on Kafka 3.9.1:
# Debian 12's librdkafka (2.0.2, the host build) sends the SCRAM client nonce twice, which
# Kafka 4.x refuses (fixed in librdkafka 2.6.1; docs/DEPLOYING.md, "Secure connections") — the relay's
# start-up warning and its message for a refused login say so.
old_scram() { [ "$(printf '%s\n2.6.1\n' "$1" | sort -V | head -1)" != 2.6.1 ]; }
rdk=$("$RELAYTEST_RELAY_BIN" --version | sed -n 's/.*(librdkafka \([0-9.]*\),.*/\1/p')
[ -n "$rdk" ] || fail "cannot read the relay's librdkafka version"
if old_scram "$rdk"; then kafka_version=3.9.1; else kafka_version=4.1.1; fi
[ -z "${RELAYTEST_IMAGE:-}" ] || [ "$kafka_version" = 4.1.1 ] ||
    fail "the image's librdkafka $rdk cannot log in with SCRAM to Kafka 4.x"
# (all four reserved: a port only checked free could be handed to a test beside this one
# before this broker binds it)
kport=$(free_ports 4)
printf '%s\n' "$kafka_secret" >"$secrets/kafka-password"
KAFKA_VERSION=$kafka_version bash "$RELAYTEST_SRC/test/env/kafka.sh" secure "$WORK/kafka" "$kport" "$pki/server.pem" relay "$secrets/kafka-password" ||
    fail "the SASL_SSL broker did not start"
log "SASL_SSL broker: Kafka $kafka_version (the programs' librdkafka: $rdk)"
tls_cleanup() { TEST_RC=${TEST_RC:-$?}; bash "$RELAYTEST_SRC/test/env/kafka.sh" kill "$WORK/kafka" || true; pg_stop_own; cleanup; }
trap tls_cleanup EXIT

printf 'host=localhost port=%s dbname=outbox user=tls_relay password=%s sslmode=verify-full sslrootcert=%s\n' \
    "$pg_port" "$pg_secret" "$pki/ca.crt" >"$secrets/pg-dsn"
printf 'host=localhost port=%s dbname=billing user=tls_inbox password=%s sslmode=verify-full sslrootcert=%s\n' \
    "$pg_port" "$pg_secret" "$pki/ca.crt" >"$secrets/inbox-pg-dsn"
chmod 600 "$secrets"/*
# the image's programs run as its user 10001, who owns the secrets mounted for it (as a
# pod's fsGroup or a secret's defaultMode and owner arrange)
[ -z "${RELAYTEST_IMAGE:-}" ] || chown -R 10001:10001 "$secrets"
http=$(free_port)
relay_tls_env=(OUTBOX_PG_DSN_FILE="$secrets/pg-dsn" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="localhost:$kport"
    OUTBOX_KAFKA_SECURITY_PROTOCOL=SASL_SSL OUTBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
    OUTBOX_KAFKA_SASL_USERNAME=relay OUTBOX_KAFKA_SASL_PASSWORD_FILE="$secrets/kafka-password"
    OUTBOX_KAFKA_SSL_CA_LOCATION="$pki/ca.crt" OUTBOX_HTTP_ADDR="127.0.0.1:$http"
    OUTBOX_TOPIC_TEMPLATE="$TOPIC_PREFIX.{aggregate_type}" OUTBOX_POLL_INTERVAL_MS=100)

env "${relay_tls_env[@]}" "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/relay-check.log" 2>&1 ||
    fail "--check-config over TLS: $(cat "$WORK/relay-check.log")"
rc=0
printf 'not-the-password\n' >"$secrets/wrong-password"
env "${relay_tls_env[@]}" OUTBOX_KAFKA_SASL_PASSWORD_FILE="$secrets/wrong-password" \
    "$RELAYTEST_RELAY_BIN" --check-config >"$WORK/relay-badpw.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "--check-config with a wrong Kafka password exited $rc (want 1): $(cat "$WORK/relay-badpw.log")"
grep -q "kafka refused the login: .*Authentication failed" "$WORK/relay-badpw.log" ||
    fail "the wrong password's failure does not say the login was refused: $(cat "$WORK/relay-badpw.log")"
grep -q "not-the-password" "$WORK/relay-badpw.log" && fail "--check-config printed the Kafka password"
log "wrong Kafka password: $(grep "refused the login" "$WORK/relay-badpw.log" | cut -c1-200)"

env "${relay_tls_env[@]}" "$RELAYTEST_RELAY_BIN" >"$WORK/relay-tls.log" 2>&1 &
pid=$!
RELAY_PIDS+=("$pid")
"$PG_BIN/psql" -X -q "$owner" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'order', 'k' || (g % 20), 'Placed', jsonb_build_object('n', g) FROM generate_series(1, 500) g"
sent() { [ "$("$PG_BIN/psql" -X -At "$owner" -c "SELECT count(*) FROM outbox WHERE status = 'SENT'")" = 500 ]; }
wait_until 60 "500 rows published over SASL_SSL" sent
# librdkafka before 2.6.1 (the host build's 2.0.2) says once that Kafka 4.x would refuse
# this SCRAM login; a newer one says nothing
scram_warned=$(grep -c "in a way Kafka 4.x brokers refuse (fixed in librdkafka 2.6.1)" "$WORK/relay-tls.log" || true)
if old_scram "$rdk"; then want=1; else want=0; fi
[ "$scram_warned" = "$want" ] || fail "librdkafka $rdk with SCRAM: the Kafka 4.x warning logged $scram_warned times, want $want"
curl -sf "http://127.0.0.1:$http/status" >"$WORK/status.json" || fail "/status"
curl -sf "http://127.0.0.1:$http/metrics" >"$WORK/metrics.txt" || fail "/metrics"
env "${relay_tls_env[@]}" "$RELAYTEST_RELAY_BIN" audit --json >"$WORK/audit.json" 2>"$WORK/audit.log" ||
    fail "audit over SASL_SSL exited $?: $(cat "$WORK/audit.log")"
[ "$(jq '.delivered' "$WORK/audit.json")" = 500 ] && [ "$(jq '.lost' "$WORK/audit.json")" = 0 ] ||
    fail "audit over SASL_SSL: $(cat "$WORK/audit.json")"

# outbox-inbox over the same TLS: its own database, the same SCRAM user
INBOX_PG_DSN_FILE=$secrets/inbox-pg-dsn "$RELAYTEST_INBOX_BIN" migrate >"$WORK/inbox-migrate.log" 2>&1 ||
    fail "outbox-inbox migrate over TLS: $(cat "$WORK/inbox-migrate.log")"
"$PG_BIN/psql" -X -q "host=$WORK/pg port=$pg_port user=postgres dbname=billing" -c "SET ROLE tls_inbox;
    CREATE TABLE booked (event_id uuid PRIMARY KEY);
    CREATE FUNCTION book(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)
    RETURNS void LANGUAGE sql AS 'INSERT INTO booked VALUES (event_id)'" || fail "the inbox handler"
ihttp=$(free_port)
env INBOX_PG_DSN_FILE="$secrets/inbox-pg-dsn" INBOX_TOPICS="$TOPIC_PREFIX.order" INBOX_HANDLER=book \
    INBOX_KAFKA_BOOTSTRAP_SERVERS="localhost:$kport" INBOX_KAFKA_SECURITY_PROTOCOL=SASL_SSL \
    INBOX_KAFKA_SASL_MECHANISM=SCRAM-SHA-512 INBOX_KAFKA_SASL_USERNAME=relay \
    INBOX_KAFKA_SASL_PASSWORD_FILE="$secrets/kafka-password" INBOX_KAFKA_SSL_CA_LOCATION="$pki/ca.crt" \
    INBOX_HTTP_ADDR="127.0.0.1:$ihttp" INBOX_KAFKA_GROUP_ID="$TOPIC_PREFIX.tls" INBOX_KAFKA_SESSION_TIMEOUT_MS=6000 \
    "$RELAYTEST_INBOX_BIN" >"$WORK/inbox-tls.log" 2>&1 &
RELAY_PIDS+=("$!")
booked() { [ "$("$PG_BIN/psql" -X -At "host=$WORK/pg port=$pg_port user=postgres dbname=billing" -c "SELECT count(*) FROM booked")" = 500 ]; }
wait_until 60 "outbox-inbox to apply 500 events over SASL_SSL and TLS" booked
curl -sf "http://127.0.0.1:$ihttp/status" >"$WORK/inbox-status.json" || fail "inbox /status"
curl -sf "http://127.0.0.1:$ihttp/metrics" >"$WORK/inbox-metrics.txt" || fail "inbox /metrics"

# Secrets rotated under the running relay and inbox, as an operator rotates them: new
# passwords for both PostgreSQL roles and for the SCRAM user, written to the files the
# programs read (replaced by a rename, as a Kubernetes secret volume swaps them); then their
# PostgreSQL sessions are terminated and the broker restarts, so that every connection
# logs in again — the old passwords no longer work. Both go on with what the files hold
# now: DSN files are read at each reconnect; a Kafka password file, when a login fails
# after it changed, by a client made anew.
pg_secret2="pg2-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
kafka_secret2="kafka2-$(head -c 12 /dev/urandom | base64 | tr -d '/+=')"
printf '%s\n' "$kafka_secret2" >"$secrets/kafka-password.new"
KAFKA_VERSION=$kafka_version bash "$RELAYTEST_SRC/test/env/kafka.sh" scram "$WORK/kafka" relay "$secrets/kafka-password.new" ||
    fail "cannot set the new SCRAM password"
"$PG_BIN/psql" -X -q "$owner" -c "ALTER ROLE tls_relay PASSWORD '$pg_secret2'" \
    -c "ALTER ROLE tls_inbox PASSWORD '$pg_secret2'" || fail "cannot set the new PostgreSQL passwords"
for f in pg-dsn inbox-pg-dsn; do
    sed "s/password=$pg_secret /password=$pg_secret2 /" "$secrets/$f" >"$secrets/$f.new"
done
chmod 600 "$secrets"/*.new
[ -z "${RELAYTEST_IMAGE:-}" ] || chown 10001:10001 "$secrets"/*.new
for f in pg-dsn inbox-pg-dsn kafka-password; do mv "$secrets/$f.new" "$secrets/$f"; done
grep -q "$pg_secret2" "$secrets/pg-dsn" || fail "the rotated DSN file does not hold the new password"
"$PG_BIN/psql" -X -q -At "$owner" -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
    WHERE usename IN ('tls_relay', 'tls_inbox')" >"$WORK/terminated.txt" || fail "cannot terminate the sessions"
bash "$RELAYTEST_SRC/test/env/kafka.sh" stop "$WORK/kafka" &&
    KAFKA_VERSION=$kafka_version bash "$RELAYTEST_SRC/test/env/kafka.sh" restart "$WORK/kafka" ||
    fail "the SASL_SSL broker did not restart"
log "secrets rotated: $(cat "$WORK/terminated.txt") PostgreSQL sessions terminated, the broker restarted"
"$PG_BIN/psql" -X -q "$owner" -c "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
    SELECT 'order', 'k' || (g % 20), 'Placed', jsonb_build_object('n', g) FROM generate_series(501, 700) g"
sent() { [ "$("$PG_BIN/psql" -X -At "$owner" -c "SELECT count(*) FROM outbox WHERE status = 'SENT'")" = 700 ]; }
wait_until 120 "200 more rows published after the rotation" sent
booked() { [ "$("$PG_BIN/psql" -X -At "host=$WORK/pg port=$pg_port user=postgres dbname=billing" -c "SELECT count(*) FROM booked")" = 700 ]; }
wait_until 120 "outbox-inbox to apply them after the rotation" booked
for want in "pg worker: OUTBOX_PG_DSN_FILE changed: connecting with its new content" \
    "recreating the producer with it" "kafka: producer recreated"; do
    grep -qF "$want" "$WORK/relay-tls.log" || fail "the relay's log does not say: $want"
done
grep -qF "making the consumer again with it" "$WORK/inbox-tls.log" ||
    fail "outbox-inbox's log does not say it made its consumer again with the new Kafka password"
log "after the rotation: 700 rows published and applied; relay: $(grep -c 'changed: connecting with its new content' "$WORK/relay-tls.log") connections with the new DSN, the producer recreated; inbox: the consumer made again"

kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 0 ] || fail "the relay exited with $rc on SIGTERM"
for f in "$WORK"/*.log "$WORK"/*.json "$WORK"/*.txt; do
    for s in "$pg_secret" "$kafka_secret" "$pg_secret2" "$kafka_secret2"; do
        grep -qF "$s" "$f" && fail "a secret appears in $(basename "$f")"
    done
done
log "ok: 500 rows over verify-full TLS to PostgreSQL and SASL_SSL/SCRAM-SHA-512 to Kafka, audited and applied; no secret in $(ls "$WORK"/*.log "$WORK"/*.json "$WORK"/*.txt | wc -l) logs and outputs"
