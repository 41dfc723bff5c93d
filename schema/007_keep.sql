-- 007: OUTBOX_ON_SENT=keep, where the relay never writes to a row it published: its progress
-- is a watermark per lease partition, recorded once per mark, not per row.
-- @layout native (the Debezium layout stays at version 6: keep mode is the native layout's)
-- Online: three new tables and a view; the outbox table itself is not touched.
--
-- * <table>_watermark: per lease partition, w: every row of the partition with id <= w was
--   acknowledged by Kafka or parked. It only moves up, by the session that holds the
--   partition's lease, and only over rows found to be exactly those acknowledged or parked
--   (the statement that moves it checks the table).
-- * <table>_published: rows acknowledged above the watermark (while something below them is
--   still in flight, held back or late), one record per partition per mark (its ids, lowest
--   and highest). Records stay below the watermark as what the audit compares the rows
--   with (a row at or below W that no record names was never published), and go once
--   retention has deleted every row they name. No index on the
--   ids themselves: an index entry per id would cost the WAL keep mode saves; a lookup
--   walks the partition's records whose range holds the id (normally none or one). A relay that restarts republishes none of
--   them: only what was in flight and not yet recorded.
-- * <table>_parked: rows that failed (attempts, last error) and rows parked for good
--   (failed = true), which mark and delete modes record in the row itself.
-- * <table>_kept: the table as keep mode sees it, with the status, attempts, last_error and
--   sent_at the other modes store in the row (status, replay, audit and the tests read it).
CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_watermark" (
    lease_partition smallint PRIMARY KEY,
    w               bigint NOT NULL,
    relay           text NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (fillfactor = 50);

CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_published" (
    lease_partition smallint NOT NULL,
    low             bigint NOT NULL,
    top             bigint NOT NULL,
    ids             bigint[] NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS "@NAME@_published_top_idx" ON @SCHEMA@."@NAME@_published" (lease_partition, top);
-- the record that names a row, whatever its age (the view's sent_at): the records' ranges
CREATE INDEX IF NOT EXISTS "@NAME@_published_range_idx" ON @SCHEMA@."@NAME@_published"
    USING gist (int8range(low, top, '[]'));

CREATE TABLE IF NOT EXISTS @SCHEMA@."@NAME@_parked" (
    id              bigint PRIMARY KEY,
    lease_partition smallint NOT NULL,
    aggregate_id    text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text,
    failed          boolean NOT NULL DEFAULT false,
    at              timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS "@NAME@_parked_key_idx" ON @SCHEMA@."@NAME@_parked" (aggregate_id) WHERE failed;
CREATE INDEX IF NOT EXISTS "@NAME@_parked_part_idx" ON @SCHEMA@."@NAME@_parked" (lease_partition);

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
                           WHERE int8range(p.low, p.top, '[]') @> o.id
                             AND p.lease_partition = o.lease_partition AND o.id = ANY(p.ids)),
                          CASE WHEN o.id <= coalesce(wm.w, 0) THEN wm.updated_at END) END AS sent_at,
       o.lease_partition
FROM @TABLE@ o
LEFT JOIN @SCHEMA@."@NAME@_watermark" wm ON wm.lease_partition = o.lease_partition
LEFT JOIN @SCHEMA@."@NAME@_parked" k ON k.id = o.id;
