-- 010: the view <table>_kept shows a requeued row as PENDING until it is published again.
-- @layout native (the Debezium layout stays at version 6: keep mode is the native layout's)
-- Why: `outbox-relay requeue` turns a row's entry in <table>_parked back (failed = false); the
-- row lies at or below its partition's watermark (W passed it while it was parked for good),
-- and the view called every row at or below W that was not parked for good SENT, though the
-- relay had not published it yet. Now a row at or below W with an entry in <table>_parked
-- that is not failed (requeued, or found by the audit) is SENT only once a record names it
-- (a mark removes the entry when it records the row); rows without an entry read as before.
-- Online: the view is replaced with the same columns (it takes ACCESS EXCLUSIVE on the view
-- alone for a moment: `status`, `replay` and `audit` read it; at most 5 s of waiting, then
-- this migration fails and is simply run again). The outbox table itself is not touched.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE VIEW @SCHEMA@."@NAME@_kept" AS
SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.topic, o.payload, o.headers,
       CASE WHEN k.failed THEN 'FAILED'
            WHEN o.id <= coalesce(wm.w, 0) AND k.id IS NULL THEN 'SENT'
            WHEN EXISTS (SELECT 1 FROM @SCHEMA@."@NAME@_published" p
                         WHERE p.lease_partition = o.lease_partition AND p.top >= o.id AND p.low <= o.id
                           AND o.id = ANY(p.ids)) THEN 'SENT'
            ELSE 'PENDING' END AS status,
       coalesce(k.attempts, o.attempts) AS attempts,
       coalesce(k.last_error, o.last_error) AS last_error,
       o.created_at,
       CASE WHEN k.failed THEN NULL
            ELSE coalesce((SELECT min(p.at) FROM @SCHEMA@."@NAME@_published" p
                           WHERE p.low <= o.id AND p.top >= o.id AND o.id = ANY(p.ids)),
                          CASE WHEN o.id <= coalesce(wm.w, 0) AND k.id IS NULL THEN wm.updated_at END) END AS sent_at,
       o.lease_partition
FROM @TABLE@ o
LEFT JOIN @SCHEMA@."@NAME@_watermark" wm ON wm.lease_partition = o.lease_partition
LEFT JOIN @SCHEMA@."@NAME@_parked" k ON k.id = o.id;
