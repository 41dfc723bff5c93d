-- The Debezium layout (OUTBOX_LAYOUT=debezium), in one step at schema version 6: Debezium's
-- outbox table - id, aggregatetype, aggregateid, type, payload, and any columns of the
-- user's own - gets what the relay needs, and no column writers use changes. The native
-- migrations 001-006 never run on it; later migrations run on both layouts.
-- Placeholders: as for schema/001_outbox.sql. Every step is safe to run again (a migrate
-- stopped half-way is run again).
--
-- What is added (all names start with relay_, so they cannot meet a user's column):
-- * relay_seq: insertion order, for per-key order (the uuid id is random). An identity
--   column: ADDING IT REWRITES THE TABLE ONCE, under an ACCESS EXCLUSIVE lock that holds
--   writers back for the whole rewrite. Measured on 1M rows (338 MB, 200-byte payloads):
--   migrate took 7.9 s, a writer inserting alongside waited at most 4.8 s (the rewrite;
--   the indexes after it are built while writers go on), none failed (README, "Coming
--   from Debezium").
--   Rows already in the table get their order from their place in it, which is insertion
--   order unless the table reused the space of deleted rows; Debezium users' tables are
--   usually empty (rows are deleted right after insert, or soon).
-- * relay_status, relay_attempts, relay_error, relay_created_at, relay_sent_at: the state
--   the native table has as status, attempts, last_error, created_at and sent_at.
-- * relay_partition: the lease partition, derived from aggregateid as the native table's
--   lease_partition is from aggregate_id (the same partitions).
-- All are added by one ALTER TABLE, so the table is rewritten once; its indexes are built
-- after, CONCURRENTLY (writers go on).
-- * <table>_relay_rows: a view with the native table's column names over the table,
--   through which the relay reads, marks and deletes rows (a simple view: PostgreSQL
--   updates the table through it). Its headers column is NULL; its source_row column is the
--   whole table row, from which OUTBOX_ADDITIONAL_PLACEMENT takes its headers.
-- * The doorbell, the bell, the relay state and the lease log, as the native migrations
--   leave them at version 6. There is no writers' function (<table>_enqueue): Debezium's
--   writers insert rows themselves.
-- If the table does not exist, it is created in Debezium's documented shape (id uuid,
-- aggregatetype, aggregateid and type varchar(255), payload of OUTBOX_PAYLOAD_TYPE).
SET LOCAL lock_timeout = '5s';

CREATE TABLE IF NOT EXISTS @TABLE@ (
    id            uuid NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       @PAYLOAD_TYPE@
);

DO $$
DECLARE
    missing text;
BEGIN
    SELECT string_agg(c, ', ') INTO missing
    FROM unnest(ARRAY['id', 'aggregatetype', 'aggregateid', 'type', 'payload']) c
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                      WHERE attrelid = '@TABLE@'::regclass AND attname = c AND NOT attisdropped);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'table @TABLE@ is not a Debezium outbox table: it has no column %', missing
            USING HINT = 'OUTBOX_LAYOUT=debezium expects the columns id, aggregatetype, aggregateid, type and payload';
    END IF;
END
$$;

ALTER TABLE @TABLE@
    ADD COLUMN IF NOT EXISTS relay_seq        bigint GENERATED ALWAYS AS IDENTITY (CACHE 1),
    ADD COLUMN IF NOT EXISTS relay_status     text NOT NULL DEFAULT 'PENDING'
        CONSTRAINT "@NAME@_relay_status_check" CHECK (relay_status IN ('PENDING', 'SENT', 'FAILED')),
    ADD COLUMN IF NOT EXISTS relay_attempts   integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS relay_error      text,
    ADD COLUMN IF NOT EXISTS relay_created_at timestamptz NOT NULL DEFAULT clock_timestamp()
        CONSTRAINT "@NAME@_relay_created_at_finite" CHECK (isfinite(relay_created_at)),
    ADD COLUMN IF NOT EXISTS relay_sent_at    timestamptz,
    ADD COLUMN IF NOT EXISTS relay_partition  smallint NOT NULL
        GENERATED ALWAYS AS (((hashtext(aggregateid::text) & 2147483647) % 64)::smallint) STORED;

ALTER TABLE @TABLE@ SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

CREATE OR REPLACE VIEW @SCHEMA@."@NAME@_relay_rows" AS
SELECT o.relay_seq AS id, o.id::text AS event_id, o.aggregatetype::text AS aggregate_type,
       o.aggregateid::text AS aggregate_id, o.type::text AS event_type, NULL::text AS topic,
       o.payload, NULL::jsonb AS headers, o.relay_status AS status, o.relay_attempts AS attempts,
       o.relay_error AS last_error, o.relay_created_at AS created_at, o.relay_sent_at AS sent_at,
       o.relay_partition AS lease_partition, o AS source_row
FROM @TABLE@ o;

CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_doorbell" (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    armed    boolean NOT NULL DEFAULT false,
    channel  text NOT NULL DEFAULT 'outbox',
    requeued bigint NOT NULL DEFAULT 0
);
INSERT INTO @SCHEMA@."@NAME@_doorbell" DEFAULT VALUES ON CONFLICT DO NOTHING;

CREATE SEQUENCE IF NOT EXISTS @SCHEMA@."@NAME@_bell";
GRANT SELECT ON SEQUENCE @SCHEMA@."@NAME@_bell" TO PUBLIC;

CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_ring_bell"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_sequence_last_value('@SCHEMA@."@NAME@_bell"'::regclass) IS NOT NULL THEN
        PERFORM setval('@SCHEMA@."@NAME@_bell"'::regclass, 1, false);
        PERFORM pg_notify((SELECT channel FROM @SCHEMA@."@NAME@_doorbell"), '');
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_ring_bell"() FROM PUBLIC;

DROP TRIGGER IF EXISTS "@NAME@_doorbell" ON @TABLE@;
CREATE TRIGGER "@NAME@_doorbell" AFTER INSERT ON @TABLE@
    FOR EACH STATEMENT
    WHEN (pg_sequence_last_value('@SCHEMA@."@NAME@_bell"'::regclass) IS NOT NULL)
    EXECUTE FUNCTION @SCHEMA@."@NAME@_ring_bell"();

CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_relay_state" (
    relay        text PRIMARY KEY,
    claimed_high bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_lease_log" (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lease_partition smallint NOT NULL,
    relay         text NOT NULL,
    event         text NOT NULL CHECK (event IN ('acquired', 'released', 'lost')),
    at            timestamptz NOT NULL,
    publish_from  timestamptz,
    publish_until timestamptz
);
CREATE INDEX IF NOT EXISTS "@NAME@_lease_log_partition_idx" ON @SCHEMA@."@NAME@_lease_log" (lease_partition, id);

-- The indexes, built without stopping writers (each step is safe to run again).
-- @outside-transaction
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "@NAME@_relay_seq_key" ON @TABLE@ (relay_seq);
-- @outside-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS "@NAME@_pending_idx" ON @TABLE@ (relay_partition, relay_seq)
    WHERE relay_status = 'PENDING';
-- @outside-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS "@NAME@_failed_idx" ON @TABLE@ ((aggregateid::text))
    WHERE relay_status = 'FAILED';
