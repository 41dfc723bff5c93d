-- 006: a doorbell writers do not pay for while the relay is busy.
-- @layout native (the Debezium layout reaches version 6 by schema/debezium/006_layout.sql)
-- Until 005 every INSERT statement ran the doorbell's PL/pgSQL trigger, which read the
-- one-row doorbell table, armed or not: with 8 writers that call alone cost 15-25% of their
-- transactions (bench/writer_cost.sh; an empty PL/pgSQL trigger costs nearly as much).
-- Now the bell is a sequence: the relay arms it when idle (setval(bell, 1, true)), and the
-- trigger's WHEN condition - evaluated in C once per INSERT statement, no PL/pgSQL, no
-- table read - is true only while it is armed (pg_sequence_last_value is NULL until a
-- setval(..., true)). The first writer that finds it armed disarms it (setval(bell, 1,
-- false): immediate, not transactional, no row lock, so no writer ever waits for another)
-- and sends one NOTIFY at its commit; writers racing on the same armed bell may each send
-- one. A writer whose transaction rolls back after disarming sends nothing: the relay then
-- finds its next rows by its poll (OUTBOX_POLL_INTERVAL_MS).
-- Writers need SELECT on the sequence for the WHEN condition: granted to PUBLIC (it tells
-- only whether the relay is idle). The relay needs UPDATE on it (deploy/roles.sql).
-- Lock: replacing the trigger takes a brief SHARE ROW EXCLUSIVE lock on the table, which
-- waits for open writer transactions and holds new writers behind it while it waits: at
-- most 5 s here, then this migration fails and is simply run again. No rewrite, no scan.
-- A relay of schema 5 still arms the old doorbell column, which no trigger reads any more:
-- until it is replaced it is woken by its poll only (at most OUTBOX_POLL_INTERVAL_MS).
SET LOCAL lock_timeout = '5s';

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
DROP FUNCTION IF EXISTS @SCHEMA@."@NAME@_ring_doorbell"();
