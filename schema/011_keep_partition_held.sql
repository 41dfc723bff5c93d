-- 011: keep mode's partition drops keep a partition that holds a row no record names.
-- @layout native (the Debezium layout stays at version 6: keep mode is the native layout's)
-- Why: retention drops a partition of an outbox partitioned by id (schema 9) once the
-- identity passed it, its newest row is older than the retention and nothing in it is above
-- its lease partition's watermark, parked or FAILED. A row at or below W that no record of
-- what was published names was never published (a row inserted below W with OVERRIDING
-- SYSTEM VALUE, a restore, a broken proof); until the audit reaches it, the drop took it
-- with the partition. Now such a partition is kept, and the audit publishes the row (the
-- relay's row retention does the same: lib/relay/keep.c).
-- The check reads the partition's ids at or below W and the ids of the records that overlap
-- its range, and compares them by one grouping (as the audit does): a whole partition, once
-- per call that finds it a candidate (a partition of 1,000,000 rows: about a second of the
-- owner's function, every 10 s while it is held for this reason; nothing when it is held for
-- another, checked first).
-- Rows left SENT from mark mode (a table moved into keep mode keeps them) are not looked for.
-- Under the outbox's ACCESS EXCLUSIVE lock (the drop's second look) the check is not run again:
-- it was run before the lock, and writers wait for the lock meanwhile.
-- Online: the function is replaced with the same signature; nothing else changes.
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
                   '  WHERE k.id >= b.lo AND k.id <= b.hi)'
                   ' OR (NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = ''relation'''
                   '  AND l.relation = ''@TABLE@''::regclass AND l.pid = pg_backend_pid()'
                   '  AND l.mode = ''AccessExclusiveLock'' AND l.granted)'
                   '  AND EXISTS (SELECT 1 FROM (SELECT o.id, true AS row FROM %1$s o WHERE o.status = ''PENDING'''
                   '   UNION ALL SELECT i, false FROM @SCHEMA@."@NAME@_published" pb, unnest(pb.ids) i,'
                   '    (SELECT min(id) AS lo, max(id) AS hi FROM %1$s) b'
                   '   WHERE pb.top >= b.lo AND pb.low <= b.hi AND i >= b.lo AND i <= b.hi) u'
                   '  GROUP BY u.id HAVING bool_and(u.row)))', part) INTO held;
    RETURN held;
END
$$;
REVOKE ALL ON FUNCTION @SCHEMA@."@NAME@_partition_held"(regclass) FROM PUBLIC;
