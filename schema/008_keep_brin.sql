-- 008: the records that name a row (the view's sent_at, migrate --leave-keep) are found by a
-- BRIN index over the records' lowest and highest ids instead of a GiST index of their ranges.
-- @layout native (the Debezium layout stays at version 6: keep mode is the native layout's)
-- Why: a record is written per lease partition per mark, and the GiST index's insert and
-- page splits were 28% of the WAL keep mode makes (bench/wal.sh, 100,000 rows: 28.4 B of
-- WAL per event, 0.0203 x the insert, of which the GiST index 7.9 B). Records are written in
-- id order, so their ids are ordered like the heap: a BRIN index with a few pages per range
-- finds them (0.06 ms per row looked up over 12,800 records, the GiST index 0.05 ms), and an
-- insert into a range not yet summarized writes no index WAL at all (vacuum summarizes new
-- ranges). The view's lookup names no lease partition (the id is in one partition's records
-- only): by its partition the planner would walk every later record of it (the btree on
-- (lease_partition, top)), 0.18 ms per old row.
-- Lock: one transaction, with at most 5 s of waiting for each lock (then this migration
-- fails and is simply run again). The index is built in it, not CONCURRENTLY (the rule for
-- the outbox table's indexes): a build CONCURRENTLY waits for every older snapshot, among
-- them those of the other `migrate`s queued on migrate's lock, which wait for this one (a
-- deadlock, seen with five at once in migrate_online). It is the relay's own table, never
-- the writers': the build holds SHARE on <table>_published for one scan of it (the records,
-- one per lease partition per mark, that retention has not yet removed: 0.4 s for 1.4
-- million here), during which keep-mode relays' marks wait; the drop takes ACCESS EXCLUSIVE on
-- it for a moment. The outbox table itself is not touched.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE VIEW @SCHEMA@."@NAME@_kept" AS
SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.topic, o.payload, o.headers,
       CASE WHEN k.failed THEN 'FAILED'
            WHEN o.id <= coalesce(wm.w, 0) THEN 'SENT'
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
                          CASE WHEN o.id <= coalesce(wm.w, 0) THEN wm.updated_at END) END AS sent_at,
       o.lease_partition
FROM @TABLE@ o
LEFT JOIN @SCHEMA@."@NAME@_watermark" wm ON wm.lease_partition = o.lease_partition
LEFT JOIN @SCHEMA@."@NAME@_parked" k ON k.id = o.id;

CREATE INDEX IF NOT EXISTS "@NAME@_published_brin" ON @SCHEMA@."@NAME@_published"
    USING brin (low, top) WITH (pages_per_range = 4);
DROP INDEX IF EXISTS @SCHEMA@."@NAME@_published_range_idx";
