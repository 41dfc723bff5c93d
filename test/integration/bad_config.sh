#!/usr/bin/env bash
# Invalid settings stop start-up with exit 2 and a message naming the setting; an
# unmigrated table stops it with exit 1 and says to migrate; --check-config exits 1 when
# PostgreSQL or Kafka cannot be reached.
. "$(dirname "$0")/lib.sh"
cases=(
    "OUTBOX_BATCH_SIZE=abc|OUTBOX_BATCH_SIZE"
    "OUTBOX_BATCH_SIZE=0|OUTBOX_BATCH_SIZE"
    "OUTBOX_POLL_INTERVAL_MS=soon|OUTBOX_POLL_INTERVAL_MS"
    "OUTBOX_MAX_INFLIGHT=-1|OUTBOX_MAX_INFLIGHT"
    "OUTBOX_SHUTDOWN_TIMEOUT_MS=1e3|OUTBOX_SHUTDOWN_TIMEOUT_MS"
    "OUTBOX_STATEMENT_TIMEOUT_MS=99999999999|OUTBOX_STATEMENT_TIMEOUT_MS"
    "OUTBOX_RECONNECT_MAX_MS=1|OUTBOX_RECONNECT_MAX_MS"
    "OUTBOX_TABLE=1bad|OUTBOX_TABLE"
    "OUTBOX_TABLE=a.b.c|OUTBOX_TABLE"
    "OUTBOX_TOPIC_TEMPLATE=x.{unknown}|OUTBOX_TOPIC_TEMPLATE"
    "OUTBOX_TOPIC_TEMPLATE=with space|OUTBOX_TOPIC_TEMPLATE"
    "OUTBOX_NOTIFY_CHANNEL=no-dash|OUTBOX_NOTIFY_CHANNEL"
    "OUTBOX_LOG_LEVEL=verbose|OUTBOX_LOG_LEVEL"
    "OUTBOX_LOG_FORMAT=yaml|OUTBOX_LOG_FORMAT"
    "OUTBOX_PG_DSN=host=h port|OUTBOX_PG_DSN"
    "OUTBOX_PG_DSN=postgres://h/db?bogus=1|OUTBOX_PG_DSN"
    "OUTBOX_PG_DSN_FILE=/nonexistent/dsn|OUTBOX_PG_DSN_FILE"
    "OUTBOX_KAFKA_NOT_A_PROPERTY=1|OUTBOX_KAFKA_NOT_A_PROPERTY"
    "OUTBOX_KAFKA_ACKS=sometimes|OUTBOX_KAFKA_ACKS"
    "OUTBOX_KAFKA_LINGER_MS=-3|OUTBOX_KAFKA_LINGER_MS"
    "--batch-size=many|--batch-size"
    "--no-such-flag=1|--no-such-flag"
    "--kafka=no.such.prop=1|no.such.prop"
    "--kafka=compression.codec=zip|compression.codec"
    "--max-inflight=10|OUTBOX_MAX_INFLIGHT"
    "--table|--table"
    "OUTBOX_CLOUDEVENTS_SOURCE=/orders service|OUTBOX_CLOUDEVENTS_SOURCE"
    "OUTBOX_CLOUDEVENTS_SOURCE=9x:orders|OUTBOX_CLOUDEVENTS_SOURCE"
    "--cloudevents-content-type=json|--cloudevents-content-type"
    "OUTBOX_EXACTLY_ONCE=1|OUTBOX_TRANSACTIONAL_ID_PREFIX"
    "OUTBOX_EXACTLY_ONCE=yes|OUTBOX_EXACTLY_ONCE"
    "OUTBOX_TRANSACTIONAL_ID_PREFIX=has space|OUTBOX_TRANSACTIONAL_ID_PREFIX"
    "OUTBOX_TRANSACTION_GROUPS=4|OUTBOX_TRANSACTION_GROUPS: applies only with OUTBOX_EXACTLY_ONCE=1"
    "OUTBOX_TRANSACTION_GROUPS=128|OUTBOX_TRANSACTION_GROUPS"
)
n=0
for c in "${cases[@]}"; do
    setting=${c%%|*}
    want=${c##*|}
    if [[ $setting == --* ]]; then
        out=$("$RELAYTEST_RELAY_BIN" "$setting" 2>&1) && rc=0 || rc=$?
    else
        out=$(env "$setting" "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
    fi
    [ "$rc" = 2 ] || fail "$setting: expected exit 2, got $rc ($out)"
    grep -qF -- "$want" <<<"$out" || fail "$setting: message does not name $want: $out"
    n=$((n + 1))
done
# exactly-once where it does not apply: refused, naming the setting and why (keep mode and
# the Debezium layout were refused too until they were built: exactly_once_keep,
# exactly_once_debezium)
for other in "OUTBOX_SINK=rabbitmq OUTBOX_RABBITMQ_URL=amqp://u:p@127.0.0.1:1/"; do
    # shellcheck disable=SC2086
    out=$(env OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX=svc $other "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
    [ "$rc" = 2 ] && grep -qF OUTBOX_EXACTLY_ONCE <<<"$out" ||
        fail "OUTBOX_EXACTLY_ONCE=1 with $other: expected exit 2 naming OUTBOX_EXACTLY_ONCE, got $rc ($out)"
    n=$((n + 1))
done
# transaction groups that do not divide the 64 lease partitions evenly
out=$(env OUTBOX_EXACTLY_ONCE=1 OUTBOX_TRANSACTIONAL_ID_PREFIX=svc OUTBOX_TRANSACTION_GROUPS=3 "$RELAYTEST_RELAY_BIN" 2>&1) &&
    rc=0 || rc=$?
[ "$rc" = 2 ] && grep -qF "OUTBOX_TRANSACTION_GROUPS: expected 1, 2, 4, 8, 16, 32 or 64" <<<"$out" ||
    fail "OUTBOX_TRANSACTION_GROUPS=3: expected exit 2 naming the setting, got $rc ($out)"
n=$((n + 1))
log "$n invalid settings rejected with exit 2 and a message naming the setting"

# A bad DSN never prints its password: malformed ones (exit 2), from the environment and
# through OUTBOX_PG_DSN_FILE.
secret=hunter2XYZ
secret_dsns=(
    "postgresql+psycopg://app:$secret@db/app"
    "postgresql://app:hun%zz$secret@db/app"
    "postgresql://app:$secret@[::1/app"
    "postgresql://app:$secret@db/app?nosuchoption=1"
    "postgresql://app@db/app?password=$secret%zz"
    "host=db password=$secret port"
    "host=db password='$secret"
    "host=db password = $secret nosuch=1"
    "host=db sslpassword=$secret port"
    "postgres://:$secret@db/app?port=x&y"
)
for d in "${secret_dsns[@]}"; do
    out=$(env OUTBOX_PG_DSN="$d" "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
    [ "$rc" = 2 ] && grep -q OUTBOX_PG_DSN <<<"$out" || fail "malformed DSN not refused naming OUTBOX_PG_DSN: $out"
    ! grep -q "$secret" <<<"$out" || fail "the password is printed: $out"
    printf '%s\n' "$d" >"$WORK/dsn"
    out=$(env OUTBOX_PG_DSN_FILE="$WORK/dsn" "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
    [ "$rc" = 2 ] || fail "malformed DSN file not refused: $out"
    ! grep -q "$secret" <<<"$out" || fail "the password read through OUTBOX_PG_DSN_FILE is printed: $out"
done
log "${#secret_dsns[@]} malformed DSNs with a password refused without printing it (environment and _FILE)"
# A well-formed DSN with a password and an unreachable server: the relay runs and retries;
# its log and /status never show the password.
RELAY_ENV=(OUTBOX_PG_DSN="postgresql://app:$secret@127.0.0.1:1/app?connect_timeout=2")
start_relay wrongpw >/dev/null
wait_until 20 "/status answering" curl -sf "http://127.0.0.1:$(http_port wrongpw)/status" -o "$WORK/status.json"
sleep 2
stop_relay wrongpw || fail "relay wrongpw exited with $? on SIGTERM (want 0)"
RELAY_ENV=()
grep -q "pg worker: connection lost" "$WORK/relay-wrongpw.log" || fail "no connection error logged"
! grep -q "$secret" "$WORK/relay-wrongpw.log" "$WORK/status.json" || fail "the password appears in the log or /status"
log "an unreachable server: connection errors logged, the password in neither the log nor /status"

out=$(env OUTBOX_PG_DSN="host=127.0.0.1 port=1 connect_timeout=2" OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1 \
    "$RELAYTEST_RELAY_BIN" --check-config 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "--check-config with unreachable hosts: expected exit 1, got $rc"
grep -q "postgres: cannot connect" <<<"$out" || fail "--check-config did not name PostgreSQL: $out"
grep -q "kafka unreachable" <<<"$out" || fail "--check-config did not name Kafka: $out"

"$PG_BIN/psql" -X -q "host=127.0.0.1 port=$RELAYTEST_PG_PORT user=postgres dbname=postgres" \
    -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
out=$(env OUTBOX_PG_DSN="$DSN" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" timeout 30 "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "unmigrated table: expected exit 1, got $rc"
grep -q "run \`outbox-relay migrate\`" <<<"$out" || fail "unmigrated table: message does not say to migrate: $out"
psqlc "SELECT 1" >/dev/null
OUTBOX_PG_DSN="$DSN" "$RELAYTEST_RELAY_BIN" migrate >/dev/null 2>&1
psqlc "DELETE FROM outbox_relay_schema; INSERT INTO outbox_relay_schema (table_name, version) VALUES ('public.outbox', 99)"
out=$(env OUTBOX_PG_DSN="$DSN" OUTBOX_KAFKA_BOOTSTRAP_SERVERS="$BOOTSTRAP" timeout 30 "$RELAYTEST_RELAY_BIN" 2>&1) && rc=0 || rc=$?
[ "$rc" = 1 ] && grep -q "schema version 99" <<<"$out" || fail "schema version mismatch not refused: rc=$rc $out"
log "ok"
