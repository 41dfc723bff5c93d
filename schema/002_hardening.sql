-- 002: rows and roles users really have. Online: no table rewrite, no long lock.
-- @layout native (the Debezium layout reaches version 6 by schema/debezium/006_layout.sql)
-- * created_at must be finite: a CHECK added NOT VALID (a short ACCESS EXCLUSIVE lock, no
--   scan); then, outside the transaction, old rows with an infinite created_at (which no
--   relay could publish before the relay's expressions stopped throwing) get the time of
--   the migration, since a CHECK also holds for their updates (the mark); then the
--   constraint is validated (a scan under SHARE UPDATE EXCLUSIVE: writers go on).
-- * The doorbell trigger runs with its owner's rights and a pinned search_path, so a
--   writer needs INSERT on the outbox table and nothing else.
-- Every step is safe to run again (a migrate stopped half-way is run again).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                   WHERE conrelid = '@TABLE@'::regclass AND conname = '@NAME@_created_at_finite') THEN
        ALTER TABLE @TABLE@ ADD CONSTRAINT "@NAME@_created_at_finite"
            CHECK (isfinite(created_at)) NOT VALID;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_ring_doorbell"() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_ring_doorbell"() FROM PUBLIC;

-- @outside-transaction
UPDATE @TABLE@ SET created_at = clock_timestamp() WHERE NOT isfinite(created_at);
-- @outside-transaction
ALTER TABLE @TABLE@ VALIDATE CONSTRAINT "@NAME@_created_at_finite";
