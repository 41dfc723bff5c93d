-- 001: the outbox table, its indexes and the optional doorbell.
-- @layout native (the Debezium layout reaches version 6 by schema/debezium/006_layout.sql)
-- Placeholders (filled by `outbox-relay migrate`, never by string input from writers):
--   @SCHEMA@  quoted schema, @TABLE@  quoted schema.table, @NAME@  bare table name,
--   @PAYLOAD_TYPE@  the payload column's type (OUTBOX_PAYLOAD_TYPE: jsonb, json, text, bytea).

CREATE TABLE @TABLE@ (
    id              bigint GENERATED ALWAYS AS IDENTITY (CACHE 1) PRIMARY KEY,
    event_id        uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    aggregate_type  text NOT NULL,
    aggregate_id    text NOT NULL,
    event_type      text NOT NULL,
    topic           text,
    payload         @PAYLOAD_TYPE@,
    headers         jsonb,
    status          text NOT NULL DEFAULT 'PENDING'
                    CONSTRAINT "@NAME@_status_check" CHECK (status IN ('PENDING', 'SENT', 'FAILED')),
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at         timestamptz,
    -- Lease partition (64 of them, fixed): many relays on one table split the partitions.
    -- Derived from the key, so one key always stays in one partition.
    lease_partition smallint NOT NULL
                    GENERATED ALWAYS AS (((hashtext(aggregate_id) & 2147483647) % 64)::smallint) STORED
);

-- The claim walks this index from the bottom of each held lease partition in id order (a
-- relay never walks over another relay's rows); marked rows leave it at vacuum.
CREATE INDEX "@NAME@_pending_idx" ON @TABLE@ (lease_partition, id) WHERE status = 'PENDING';
-- Parked rows, looked up by key so that later rows of a parked key wait.
CREATE INDEX "@NAME@_failed_idx" ON @TABLE@ (aggregate_id) WHERE status = 'FAILED';

-- A queue table: vacuum it often and without throttling, so the dead head of the
-- pending index stays short.
ALTER TABLE @TABLE@ SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Conditional doorbell. The relay arms it only when it is idle; the first writer that
-- finds it armed disarms it and sends one NOTIFY. A busy relay leaves it disarmed, so
-- writers then pay one read of a one-row table, not NOTIFY's cluster-wide commit lock.
CREATE TABLE @SCHEMA@."@NAME@_doorbell" (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    armed    boolean NOT NULL DEFAULT false,
    channel  text NOT NULL DEFAULT 'outbox'
);
INSERT INTO @SCHEMA@."@NAME@_doorbell" DEFAULT VALUES;

CREATE FUNCTION @SCHEMA@."@NAME@_ring_doorbell"() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ch text;
BEGIN
    IF (SELECT armed FROM @SCHEMA@."@NAME@_doorbell") THEN
        UPDATE @SCHEMA@."@NAME@_doorbell" SET armed = false WHERE armed RETURNING channel INTO ch;
        IF ch IS NOT NULL THEN
            PERFORM pg_notify(ch, '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER "@NAME@_doorbell" AFTER INSERT ON @TABLE@
    FOR EACH STATEMENT EXECUTE FUNCTION @SCHEMA@."@NAME@_ring_doorbell"();

-- Per relay: the highest id it has claimed. After a crash, PENDING rows at or below it
-- may already be in Kafka (acknowledged, not yet marked): the duplicates estimate.
CREATE TABLE @SCHEMA@."@NAME@_relay_state" (
    relay        text PRIMARY KEY,
    claimed_high bigint NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 50);

-- Lease log: every lease partition a relay acquires, releases or loses, with the relay's
-- own timestamps: it publishes partition p only within [publish_from, publish_until].
CREATE TABLE @SCHEMA@."@NAME@_lease_log" (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lease_partition smallint NOT NULL,
    relay         text NOT NULL,
    event         text NOT NULL CHECK (event IN ('acquired', 'released', 'lost')),
    at            timestamptz NOT NULL,
    publish_from  timestamptz,
    publish_until timestamptz
);
CREATE INDEX "@NAME@_lease_log_partition_idx" ON @SCHEMA@."@NAME@_lease_log" (lease_partition, id);
