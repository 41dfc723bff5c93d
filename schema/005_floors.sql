-- 005: for claims above proven floors (lib/relay/floor.h), and a doorbell that never makes
-- @layout native (the Debezium layout reaches version 6 by schema/debezium/006_layout.sql)
-- a writer wait for another. Online: a column with a constant default on the one-row
-- doorbell table (the outbox table is not touched) and a replaced trigger function.
-- * requeued: a count of requeues, read by every claim. Relays claim above a proven floor
--   per lease partition instead of walking every dead index entry of the rows they marked.
--   A parked row that `outbox-relay requeue` sets back to PENDING lies below those floors:
--   the command adds one to this count in the same transaction, and a relay whose claim
--   sees the count change (in the same snapshot as the rows) drops that claim and claims
--   from the bottom, so the requeued row still goes before the later rows of its key.
-- * The doorbell: the first writer that found it armed disarmed it with an UPDATE, and
--   every other writer that found it armed meanwhile waited for that row lock, that is
--   for the first writer's whole transaction to end: one writer that rang the bell and
--   stayed open (more work after the insert, idle in transaction) stalled every writer of
--   the table. Now a writer disarms it only if nobody else is doing so (SKIP LOCKED) and
--   rings either way; a REPEATABLE READ writer whose snapshot is older than the disarm
--   leaves it (a serialization failure caught in a subtransaction, only while armed).
ALTER TABLE @SCHEMA@."@NAME@_doorbell" ADD COLUMN IF NOT EXISTS requeued bigint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_ring_doorbell"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ch text;
BEGIN
    IF (SELECT armed FROM @SCHEMA@."@NAME@_doorbell") THEN
        SELECT channel INTO ch FROM @SCHEMA@."@NAME@_doorbell";
        BEGIN
            UPDATE @SCHEMA@."@NAME@_doorbell" SET armed = false
            WHERE only_row IN (SELECT only_row FROM @SCHEMA@."@NAME@_doorbell"
                               WHERE armed FOR UPDATE SKIP LOCKED);
        EXCEPTION WHEN serialization_failure THEN
            NULL; -- disarmed by a transaction this snapshot cannot see: it rang
        END;
        PERFORM pg_notify(ch, '');
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_ring_doorbell"() FROM PUBLIC;
