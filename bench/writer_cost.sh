#!/usr/bin/env bash
# What each part of the outbox table costs its writers: the same pgbench writers (8 clients,
# one event per transaction, the aggregate row locked first, as bench/bench.sh's) on tables
# that differ by one part each, with nothing reading them, in alternating rounds.
#   bench/writer_cost.sh [--seconds S] [--rounds R] [--out DIR] [--variants "plain relay ..."]
#   (defaults: 10 s, 3 rounds, every variant)
# Starts its own throwaway PostgreSQL (durable) like bench/bench.sh. Prints one line per
# variant (median tx/s over the rounds, and against the Debezium-layout table), then
#   RESULT writer_cost plain=.. relay=.. <variant>=.. ...
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
seconds=10 rounds=3 out="" only=""
. scripts/common.sh
common_flags "[--seconds S] [--rounds R] [--out DIR] [--variants LIST]" "--seconds=seconds --rounds=rounds --out=out --variants=only" "$@"
common_bench_out writer-cost

common_setup
relay_bin=$src/build/outbox-relay
export PG_DURABLE=1
trap servers_stop EXIT
servers_start
dsn=$(common_db writers)
psqlc() { "$PG_BIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$dsn" -c "$1"; }
psqlc "CREATE TABLE aggregate (id int PRIMARY KEY, version int NOT NULL DEFAULT 0);
       INSERT INTO aggregate SELECT g FROM generate_series(1, 10000) g"

# Every variant is the migrated table (all migrations) with one change.
variant() { # NAME SQL-after-migrate (the table is public.NAME)
    OUTBOX_PG_DSN=$dsn OUTBOX_TABLE="public.$1" "$relay_bin" migrate >>"$out/migrate.log" 2>&1
    [ -z "$2" ] || psqlc "$2"
}
variant relay ""
variant no_doorbell "DROP TRIGGER no_doorbell_doorbell ON no_doorbell"
variant no_event_id_index "ALTER TABLE no_event_id_index DROP CONSTRAINT no_event_id_index_event_id_key"
variant no_pending_index "DROP INDEX no_pending_index_pending_idx"
variant no_generated "ALTER TABLE no_generated ALTER COLUMN lease_partition DROP EXPRESSION;
                      ALTER TABLE no_generated ALTER COLUMN lease_partition SET DEFAULT 0"
variant fillfactor_90 "ALTER TABLE fillfactor_90 SET (fillfactor = 90)"
variant no_check "ALTER TABLE no_check DROP CONSTRAINT no_check_status_check;
                  ALTER TABLE no_check DROP CONSTRAINT no_check_created_at_finite"
variant bare "DROP TRIGGER bare_doorbell ON bare;
              ALTER TABLE bare DROP CONSTRAINT bare_event_id_key;
              ALTER TABLE bare DROP CONSTRAINT bare_status_check;
              ALTER TABLE bare DROP CONSTRAINT bare_created_at_finite"
# keep mode's partitions by id (migrate --partition; 20 partitions of 100,000 ids, about
# what a day's retention in hourly partitions keeps): a plain INSERT, and <table>_enqueue
# with the writer's own event_id (the advisory lock and the lookup over every partition's
# index), beside enqueue with an event_id on the table as migrate makes it
variant enqueue_id ""
for n in partitioned partitioned_enqueue_id; do
    variant "$n" ""
    OUTBOX_PG_DSN=$dsn OUTBOX_TABLE="public.$n" OUTBOX_ON_SENT=keep "$relay_bin" migrate --partition 100000 \
        >>"$out/migrate.log" 2>&1
    psqlc "SELECT created FROM ${n}_partitions(NULL, 20)" >/dev/null
done
# Debezium's outbox layout (what bench/bench.sh's writer_vs_plain compares with)
psqlc "CREATE TABLE plain (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
         aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL,
         tracingspancontext text, payload jsonb)"
# The same table in the Debezium layout (OUTBOX_LAYOUT=debezium: the relay's columns added
# by migrate, its bell trigger), and the alternative that layout did not take: Debezium's
# table untouched, the relay's state in a companion table filled by a row trigger.
psqlc "CREATE TABLE debezium (LIKE plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES)"
OUTBOX_PG_DSN=$dsn OUTBOX_TABLE=public.debezium OUTBOX_LAYOUT=debezium "$relay_bin" migrate >>"$out/migrate.log" 2>&1
psqlc "CREATE TABLE companion (LIKE plain INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES);
       CREATE TABLE companion_state (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id uuid NOT NULL,
         status text NOT NULL DEFAULT 'PENDING', attempts int NOT NULL DEFAULT 0, last_error text,
         created_at timestamptz NOT NULL DEFAULT clock_timestamp(), lease_partition smallint NOT NULL);
       CREATE INDEX ON companion_state (lease_partition, seq) WHERE status = 'PENDING';
       CREATE FUNCTION companion_track() RETURNS trigger LANGUAGE plpgsql AS \$\$
       BEGIN
         INSERT INTO companion_state (event_id, lease_partition)
           VALUES (NEW.id, ((hashtext(NEW.aggregateid) & 2147483647) % 64)::smallint);
         RETURN NULL;
       END \$\$;
       CREATE TRIGGER companion_track AFTER INSERT ON companion FOR EACH ROW EXECUTE FUNCTION companion_track()"
names="plain relay no_doorbell no_event_id_index no_pending_index no_generated fillfactor_90 no_check bare debezium companion enqueue_id partitioned partitioned_enqueue_id"
[ -z "$only" ] || names=$only
for n in $names; do
    cols="aggregate_type, aggregate_id, event_type, payload"
    case $n in plain | debezium | companion) cols="aggregatetype, aggregateid, type, payload" ;; esac
    write="INSERT INTO $n ($cols)
  VALUES ('bench', 'k' || :k, 'Updated', jsonb_build_object('k', :k, 'pad', repeat('x', 1000)));"
    case $n in *enqueue_id) write="SELECT ${n}_enqueue('bench', 'k' || :k, 'Updated',
  jsonb_build_object('k', :k, 'pad', repeat('x', 1000)), event_id => gen_random_uuid());" ;; esac
    cat >"$out/$n.sql" <<SQL
\\set k random(1, 10000)
BEGIN;
SET LOCAL synchronous_commit = off;
UPDATE aggregate SET version = version + 1 WHERE id = :k;
$write
COMMIT;
SQL
done
for r in $(seq 1 "$rounds"); do
    order=$names
    [ $((r % 2)) = 0 ] && order=$(tr ' ' '\n' <<<"$names" | tac | tr '\n' ' ')
    for n in $order; do
        psqlc "TRUNCATE $n"
        [ "$n" = companion ] && psqlc "TRUNCATE companion_state"
        psqlc "VACUUM aggregate"
        tps=$("$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$RELAYTEST_PG_PORT" -U postgres -c 8 -j 2 -T "$seconds" \
            -f "$out/$n.sql" writers 2>&1 | awk '/^tps/ { printf "%.0f", $3; exit }')
        echo "$tps" >>"$out/$n.txt"
        say "round $r: $n $tps tx/s"
    done
done
plain=$(median <"$out/plain.txt")
line="RESULT writer_cost"
for n in $names; do
    m=$(median <"$out/$n.txt")
    printf '%-18s %7.0f tx/s  %.3f of plain\n' "$n" "$m" "$(awk -v a="$m" -v b="$plain" 'BEGIN { print a / b }')"
    line="$line $n=$m"
done
echo "$line"
