-- 009: keep mode's id-range partitions (stage 2): the function that keeps partitions ahead of
-- the identity and drops those retention is done with. Inert on a table that is not
-- partitioned (every table until `outbox-relay migrate --partition IDS` makes it one).
-- @layout native (the Debezium layout stays at version 6: keep mode is the native layout's)
-- Online: one new function, nothing else changes.
--
-- <schema>.<table>_partitions(retention_seconds, ahead, width) runs as the table's owner (the relay's
-- role owns nothing; deploy/roles.sql grants it EXECUTE), one caller at a time, and every
-- lock it takes it waits for at most 100 ms (then it gives up for this call, says which
-- step was busy, and the next call tries again):
-- * ahead: it keeps `ahead` partitions wholly above the identity's last value, each as wide
--   as the highest one (or `width` ids, when given: migrate --partition IDS), made as a plain table and then ATTACHed (SHARE UPDATE EXCLUSIVE on
--   the outbox: writers go on; CREATE TABLE ... PARTITION OF would take ACCESS EXCLUSIVE).
--   A writer whose id finds no partition fails its transaction ("no partition of relation
--   ... found for row"): the relay calls this every 10 s and alerts while fewer than two
--   partitions are ahead (outbox_partitions_ahead).
-- * drop (retention_seconds NULL: never): a partition the identity has passed, whose newest
--   row is older than the retention, with no row above its lease partition's watermark, no
--   row in <table>_parked and no FAILED row left from mark mode. Such partitions are found
--   without a lock; then the outbox is locked ACCESS EXCLUSIVE (DROP needs it; writers
--   queued behind the lock wait at most the 100 ms it may wait, then it gives up), which
--   also means no writer transaction is open: the checks run again and the partitions that
--   still pass are dropped (their files unlinked, no row by row delete, no dead tuple), at
--   most 4 per call, so that writers wait for the lock a bounded time (bench/partitions.sh).
-- * lost: <table>_id_ranges records every partition's range (made by `migrate --partition`
--   or here, dropped here). A range whose partition is gone without this function dropping
--   it was dropped by hand: reported once (lost). Its rows that were not yet published are
--   gone (the watermarks pass ids that no row holds, so nothing stalls).
-- Returns one row: partitioned, created, dropped, dropped_rows (rows in the dropped
-- partitions, by their statistics), ahead (partitions wholly above the identity), busy (the
-- step that met a lock held too long, else NULL), lost (the ranges found dropped by hand,
-- else NULL).
CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_id_ranges" (
    low        bigint,
    high       bigint PRIMARY KEY,
    made_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    dropped_at timestamptz,
    by_hand    boolean NOT NULL DEFAULT false
);
REVOKE ALL ON @SCHEMA@."@NAME@_id_ranges" FROM PUBLIC;

CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_partitions"(retention_seconds integer, ahead integer DEFAULT 2,
                                                        width bigint DEFAULT NULL)
RETURNS TABLE (partitioned boolean, created integer, dropped integer, dropped_rows bigint,
               ahead_now integer, busy text, lost text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
DECLARE
    parent   regclass := '@TABLE@'::regclass;
    last     bigint;
    top      bigint;
    top_low  bigint;
    part     text;
    r        record;
    cand     regclass[] := '{}';
    unpub    boolean;
    newest   timestamptz;
BEGIN
    partitioned := (SELECT c.relkind = 'p' FROM pg_class c WHERE c.oid = parent);
    created := 0;
    dropped := 0;
    dropped_rows := 0;
    IF NOT partitioned THEN
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('@SCHEMA@.@NAME@ partitions')) THEN
        busy := 'another caller';
        RETURN NEXT;
        RETURN;
    END IF;
    last := coalesce(pg_sequence_last_value(pg_get_serial_sequence('@TABLE@', 'id')::regclass), 0);
    -- ranges whose partition is gone, not dropped here: dropped by hand (reported once)
    SELECT string_agg(format('[%s, %s)', coalesce(g.low::text, 'MINVALUE'), g.high), ', ' ORDER BY g.high)
        INTO lost
        FROM @SCHEMA@."@NAME@_id_ranges" g
        WHERE g.dropped_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM @SCHEMA@."@NAME@_id_partitions"() p WHERE p.high = g.high);
    IF lost IS NOT NULL THEN
        UPDATE @SCHEMA@."@NAME@_id_ranges" g SET dropped_at = clock_timestamp(), by_hand = true
            WHERE g.dropped_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM @SCHEMA@."@NAME@_id_partitions"() p WHERE p.high = g.high);
    END IF;
    -- partitions made some other way are recorded as they are (only those not recorded live:
    -- ON CONFLICT would lock, and so write, every recorded row on every call)
    INSERT INTO @SCHEMA@."@NAME@_id_ranges" (low, high)
        SELECT p.low, p.high FROM @SCHEMA@."@NAME@_id_partitions"() p WHERE p.high IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM @SCHEMA@."@NAME@_id_ranges" g WHERE g.high = p.high AND g.dropped_at IS NULL)
        ON CONFLICT (high) DO UPDATE SET low = excluded.low, made_at = clock_timestamp(), dropped_at = NULL,
            by_hand = false
        WHERE "@NAME@_id_ranges".dropped_at IS NOT NULL;
    -- ahead of the identity
    LOOP
        SELECT max(p.high), count(*) FILTER (WHERE p.low > last)::int INTO top, ahead_now
            FROM @SCHEMA@."@NAME@_id_partitions"() p;
        EXIT WHEN ahead_now >= ahead;
        SELECT p.low INTO top_low FROM @SCHEMA@."@NAME@_id_partitions"() p WHERE p.high = top;
        IF width IS NOT NULL THEN -- migrate --partition IDS: that width from now on
            top_low := top - width;
        END IF;
        IF top IS NULL OR top_low IS NULL THEN
            RAISE EXCEPTION 'the highest partition of @TABLE@ has no lower bound, so no width to repeat: run outbox-relay migrate --partition IDS again';
        END IF;
        part := '@SCHEMA@.' || quote_ident('@NAME@_p' || top);
        BEGIN
            EXECUTE format('CREATE TABLE %s (LIKE @TABLE@ INCLUDING DEFAULTS INCLUDING GENERATED'
                           ' INCLUDING CONSTRAINTS INCLUDING STORAGE) WITH (fillfactor = 100,'
                           ' autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000,'
                           ' autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)', part);
            EXECUTE format('ALTER TABLE @TABLE@ ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)',
                           part, top, top + (top - top_low));
            INSERT INTO @SCHEMA@."@NAME@_id_ranges" (low, high) VALUES (top, top + (top - top_low))
                ON CONFLICT (high) DO UPDATE SET low = excluded.low, made_at = clock_timestamp(),
                    dropped_at = NULL, by_hand = false;
            created := created + 1;
        EXCEPTION WHEN lock_not_available THEN
            busy := 'attach';
            EXIT;
        END;
    END LOOP;
    -- retention: candidates without a lock ...
    IF retention_seconds IS NOT NULL THEN
        FOR r IN SELECT p.rel FROM @SCHEMA@."@NAME@_id_partitions"() p
                 WHERE p.high IS NOT NULL AND p.high - 1 <= last ORDER BY p.high LOOP
            EXECUTE format('SELECT created_at FROM %s ORDER BY id DESC LIMIT 1', r.rel) INTO newest;
            CONTINUE WHEN newest >= clock_timestamp() - make_interval(secs => retention_seconds);
            IF @SCHEMA@."@NAME@_partition_held"(r.rel) THEN
                CONTINUE;
            END IF;
            cand := cand || r.rel;
            EXIT WHEN cardinality(cand) >= 4; -- the lock is held while they go: a few per call
        END LOOP;
        -- ... then under the lock, with no writer open, checked again and dropped
        IF cardinality(cand) > 0 THEN
            BEGIN
                LOCK TABLE @TABLE@ IN ACCESS EXCLUSIVE MODE;
                FOREACH part IN ARRAY cand::text[] LOOP
                    CONTINUE WHEN @SCHEMA@."@NAME@_partition_held"(part::regclass);
                    dropped_rows := dropped_rows + greatest(0, (SELECT c.reltuples::bigint FROM pg_class c
                                                               WHERE c.oid = part::regclass));
                    UPDATE @SCHEMA@."@NAME@_id_ranges" g SET dropped_at = clock_timestamp()
                        FROM @SCHEMA@."@NAME@_id_partitions"() p WHERE p.rel = part::regclass AND g.high = p.high;
                    EXECUTE format('DROP TABLE %s', part);
                    dropped := dropped + 1;
                END LOOP;
            EXCEPTION WHEN lock_not_available THEN
                busy := 'drop';
                dropped := 0;
                dropped_rows := 0;
            END;
        END IF;
    END IF;
    SELECT count(*) FILTER (WHERE p.low > last)::int INTO ahead_now FROM @SCHEMA@."@NAME@_id_partitions"() p;
    RETURN NEXT;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_partitions"(integer, integer, bigint) FROM PUBLIC;

-- The outbox's partitions and their id bounds (low NULL: from MINVALUE).
CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_id_partitions"()
RETURNS TABLE (rel regclass, low bigint, high bigint)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.oid::regclass, nullif(b[1], 'MINVALUE')::bigint, nullif(b[2], 'MAXVALUE')::bigint
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
         regexp_match(pg_get_expr(c.relpartbound, c.oid),
                      'FROM \(''?(MINVALUE|-?[0-9]+)''?\) TO \(''?(MAXVALUE|-?[0-9]+)''?\)') b
    WHERE i.inhparent = '@TABLE@'::regclass
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_id_partitions"() FROM PUBLIC;

-- Whether a partition still holds something retention must keep: a row above its lease
-- partition's watermark (unpublished, or published above W), a row in <table>_parked, or a
-- FAILED row left from mark mode.
CREATE OR REPLACE FUNCTION @SCHEMA@."@NAME@_partition_held"(part regclass)
RETURNS boolean
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    held boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM generate_series(0, 63) g CROSS JOIN LATERAL'
                   ' (SELECT 1 FROM %1$s o WHERE o.status = ''PENDING'' AND o.lease_partition = g'
                   '  AND o.id > coalesce((SELECT w FROM @SCHEMA@."@NAME@_watermark" wm'
                   '   WHERE wm.lease_partition = g), 0) LIMIT 1) x)'
                   ' OR EXISTS (SELECT 1 FROM %1$s o WHERE o.status = ''FAILED'')'
                   ' OR EXISTS (SELECT 1 FROM @SCHEMA@."@NAME@_parked" k, (SELECT min(id) AS lo, max(id) AS hi FROM %1$s) b'
                   '  WHERE k.id >= b.lo AND k.id <= b.hi)', part) INTO held;
    RETURN held;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_partition_held"(regclass) FROM PUBLIC;
