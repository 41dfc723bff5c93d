/* OUTBOX_ON_SENT=keep's SQL (keep_sql.h): the statements that replace mark mode's (records of
 * what was published, the parked table, the watermark's advance, the audit, the proof's
 * premises, the monitor's figures) and keep mode's parts of the claim. Every write checks in
 * SQL that its session holds the partition's lease (HOLDS_LEASE). The loop's half is keep.c. */
#include "relay/keep_sql.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/sql_parts.h"

/* This session holds lease partition `part` of the table whose lock key is `key`. */
#define HOLDS_LEASE(key, part)                                                                  \
    "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = (" key      \
    ")::int::oid AND l.objid = (" part ")::int::oid AND l.objsubid = 2 AND l.granted"          \
    " AND l.pid = pg_backend_pid())"

/* "row `id` of partition `part` is recorded as published": the partition's records whose
 * range holds the id (normally none or one), then the id among theirs. A scalar subquery,
 * not EXISTS: PostgreSQL may turn an EXISTS into a join that reads every record of the
 * partition once per row (an advance over 64 partitions with 95,000 records took 5.4 s
 * instead of 0.13 s: bench/longtx.sh in keep mode, where retention had deleted none); a
 * subquery with a LIMIT is run per row, from the index on (lease_partition, top). Caller
 * frees. */
static char *recorded(const struct keep_names *k, const char *part, const char *id)
{
    return xasprintf("((SELECT true FROM %s pb WHERE pb.lease_partition = %s AND pb.top >= %s"
                     " AND pb.low <= %s AND %s = ANY(pb.ids) LIMIT 1) IS NOT NULL)", k->pub, part, id, id, id);
}

/* "row `id` is parked for good". Caller frees. */
static char *parked(const struct keep_names *k, const char *id)
{
    return xasprintf("EXISTS (SELECT 1 FROM %s k WHERE k.id = %s AND k.failed)", k->parked, id);
}

/* An upsert into the parked table of the rows `from` selects (a table and its WHERE, or a
 * CTE): their id, partition and key with `values` (attempts, last_error, failed), or `set`
 * on the entry already there. Caller frees. */
static char *parked_upsert(const struct keep_names *k, const char *values, const char *from, const char *set)
{
    return xasprintf("INSERT INTO %s AS k (id, lease_partition, aggregate_id, attempts, last_error, failed)"
                     " SELECT id, lease_partition, aggregate_id, %s FROM %s ON CONFLICT (id) DO UPDATE SET %s",
                     k->parked, values, from, set);
}

/* What a mark, a park and a failed attempt write. */
static void keep_sql_rows(struct keep_statements *sql, const struct keep_names *k)
{
    free(sql->mark);
    /* $1 ids, $2 relay, $3 highest id claimed, $4 their partitions, $5 lease key. Parked rows
     * that were requeued leave the parked table when they are published again. */
    sql->mark = xasprintf(
        "WITH a AS (SELECT * FROM unnest($1::int8[], $4::int2[]) AS a(id, p)),"
        " mine AS (SELECT a.* FROM a WHERE " HOLDS_LEASE("$5", "a.p") "),"
        " ins AS (INSERT INTO %s (lease_partition, low, top, ids)"
        "  SELECT p, min(id), max(id), array_agg(id ORDER BY id) FROM mine GROUP BY p RETURNING 1),"
        " req AS (DELETE FROM %s k USING mine WHERE k.id = mine.id AND NOT k.failed RETURNING 1),"
        OUTBOX_RELAY_STATE_CTE " SELECT (SELECT count(*) FROM mine), (SELECT count(*) FROM a) - (SELECT count(*) FROM mine)",
        k->pub, k->parked, k->schema_q, k->name);
    /* Exactly-once: rows the progress record says were committed to Kafka ($1 ids, $2 their
     * event ids), recorded as marks record them if the row with that id is still the one
     * published (same event id), not recorded yet, and its lease partition is held by this
     * session. At or below W too: a row requeued, or one the audit found unpublished, is
     * claimed there and its mark records it there. The count of rows recorded. */
    char *rec = recorded(k, "o.lease_partition", "o.id");
    free(sql->recover);
    sql->recover = xasprintf(
        "WITH r AS (SELECT o.id, o.lease_partition AS p FROM unnest($1::int8[], $2::text[]) AS u(id, event_id)"
        "  JOIN %s o ON o.id = u.id AND o.event_id::text = u.event_id"
        "  WHERE o.status = 'PENDING' AND NOT %s AND " HOLDS_LEASE("%d", "o.lease_partition") "),"
        " ins AS (INSERT INTO %s (lease_partition, low, top, ids)"
        "  SELECT p, min(id), max(id), array_agg(id ORDER BY id) FROM r GROUP BY p RETURNING 1),"
        " req AS (DELETE FROM %s k USING r WHERE k.id = r.id AND NOT k.failed RETURNING 1)"
        " SELECT count(*) FROM r",
        k->table_q, rec, sql->lease_key, k->pub, k->parked);
    free(rec);
    /* Parks and failed attempts, like marks and advances, are written only while this
     * session holds the row's lease partition: a relay cut off and back must not write an
     * entry for a row its partition's new holder may have published since (the entry
     * would hold the row's key back, or publish the row again after later events of its
     * key). Refused, they write nothing (update_ok in poison.c says so). */
    /* $1 id, $2 reason: parked for good */
    free(sql->park);
    char *from = xasprintf("%s WHERE id = $1::int8 AND " HOLDS_LEASE("%d", "lease_partition"), k->table_q,
                           sql->lease_key);
    sql->park = parked_upsert(k, "1, $2, true", from,
                              "attempts = k.attempts + 1, last_error = excluded.last_error, failed = true,"
                              " at = clock_timestamp()");
    free(from);
    /* $1 ids, $2 reason: last_error only */
    free(sql->note_failed);
    from = xasprintf("%s WHERE id = ANY($1::int8[]) AND " HOLDS_LEASE("%d", "lease_partition"), k->table_q,
                     sql->lease_key);
    sql->note_failed = parked_upsert(k, "0, $2, false", from, "last_error = excluded.last_error WHERE NOT k.failed");
    free(from);
    /* $1 id, $2 reason, $3 max attempts */
    char *u = parked_upsert(k, "1, $2, 1 >= $3::int", "o",
                            "attempts = k.attempts + 1, last_error = excluded.last_error,"
                            " failed = k.attempts + 1 >= $3::int, at = clock_timestamp() WHERE NOT k.failed"
                            " RETURNING failed, attempts");
    free(sql->row_failed);
    sql->row_failed = xasprintf(
        "WITH o AS (SELECT id, lease_partition, aggregate_id, event_id, aggregate_type, event_type,"
        "  created_at FROM %s WHERE id = $1::int8 AND " HOLDS_LEASE("%d", "lease_partition") "), u AS (%s)"
        " SELECT CASE WHEN u.failed THEN 'FAILED' ELSE 'PENDING' END, u.attempts, o.event_id,"
        "  o.aggregate_id, o.aggregate_type, o.event_type, " OUTBOX_CREATED_MS("o.created_at")
        " FROM o, u",
        k->table_q, sql->lease_key, u);
    free(u);
}

/* The watermark: its advance and the check of what its proof rests on. */
static void keep_sql_watermark(struct keep_statements *sql, const struct keep_names *k)
{
    char *rec = recorded(k, "cur.p", "o.id"), *park = parked(k, "o.id");
    /* $1 lease key, $2 the floors' proof, $3 relay, $4 partitions whose W this relay knows
     * (it moved or read them while holding them), $5 their W, $6 their W as last written, $7
     * whether to write them. For every partition this session holds: the first row above W
     * that is neither published nor parked (or the proof) bounds W. W is read from the table
     * only for a partition the relay does not know (just leased): under a long transaction
     * every version of a watermark row stays, and each read walks them all (keep.c's top).
     * One row per partition held: its W, its W as written now (what the table holds: written,
     * or found at or above it), the records above it, the number of rows written, and the
     * age of its oldest record above W (how long a published row has waited for W). */
    free(sql->keep_advance);
    sql->keep_advance = xasprintf(
        "WITH parts AS (SELECT l.objid::int8::int2 AS p FROM pg_locks l WHERE l.locktype = 'advisory'"
        "  AND l.classid = $1::int::oid AND l.objsubid = 2 AND l.granted AND l.pid = pg_backend_pid()"
        "  AND l.objid < %d),"
        " known AS (SELECT parts.p, m.w, m.saved, CASE WHEN m.w IS NULL THEN (SELECT wm.w FROM %s wm"
        "   WHERE wm.lease_partition = parts.p) END AS dbw"
        "  FROM parts LEFT JOIN unnest($4::int2[], $5::int8[], $6::int8[]) AS m(p, w, saved) ON m.p = parts.p),"
        " cur AS (SELECT p, coalesce(w, dbw, 0) AS w, coalesce(saved, dbw, 0) AS saved FROM known),"
        " nw AS (SELECT cur.p, cur.w, cur.saved, greatest(cur.w, coalesce((SELECT o.id - 1 FROM %s o"
        "   WHERE o.status = 'PENDING' AND o.lease_partition = cur.p AND o.id > cur.w AND o.id <= $2::int8"
        "   AND NOT %s AND NOT %s ORDER BY o.id LIMIT 1), $2::int8)) AS w_new FROM cur),"
        " up AS (INSERT INTO %s AS wm (lease_partition, w, relay)"
        "  SELECT p, w_new, $3 FROM nw WHERE $7::bool AND w_new > saved"
        "  ON CONFLICT (lease_partition) DO UPDATE SET w = excluded.w, relay = excluded.relay,"
        "   updated_at = clock_timestamp() WHERE wm.w < excluded.w RETURNING lease_partition, w)"
        " SELECT nw.p, nw.w_new, CASE WHEN $7::bool THEN greatest(nw.w_new, nw.saved) ELSE nw.saved END,"
        "  r.n, (SELECT count(*) FROM up), r.age"
        " FROM nw CROSS JOIN LATERAL (SELECT count(*) AS n,"
        "  coalesce(extract(epoch FROM clock_timestamp() - min(pb.at)), 0) AS age FROM %s pb"
        "  WHERE pb.lease_partition = nw.p AND pb.top > nw.w_new) r",
        OUTBOX_LEASE_PARTITIONS, k->wm, k->table_q, rec, park, k->wm, k->pub);
    free(rec);
    free(park);
    /* The audit (the safety net under the proof): $1 lease key, $2 a partition this session
     * holds, $3 the reason, $4 and $5 the ids this turn looks at (above $4, up to $5). Every
     * row of the partition at or below W must be recorded as published or parked; one that is
     * neither (a row inserted below W with OVERRIDING SYSTEM VALUE, a restore, a broken proof)
     * gets a requeued entry in the parked table, which the claim publishes. A turn covers a
     * span of ids, not the partition: the rows in it, and the records that overlap it (found
     * by the BRIN index on their lowest and highest ids, or the btree on their highest, as the
     * planner sees fit with the bounds known), so that a table retaining millions of rows
     * costs each turn the same. (A per-row lookup of old rows in the records reads every later
     * record of the partition: a bitmap scan cannot stop at the first match.) The span's ids
     * come from the pending index alone (an index-only scan: rows never written again are
     * all-visible once vacuumed) and the recorded ids are taken from them by one EXCEPT (a
     * hashed set of ids); only the gaps' keys are read from the table. Not an anti-join: the
     * planner cannot know how many rows the span holds (W is read in the statement) and chose
     * a nested loop over the records for each row — 3.5 million comparisons and 0.5-1.3 s per
     * turn once a turn spanned 2,600-5,000 rows (bench/longtx.sh in keep mode). Nor a grouping
     * of rows with their keys: that read every row's heap page, 4-7 us a row against about 1
     * (27,552 rows of one partition, 3.2 million retained, by hand: 110-200 ms against 35-45).
     * Records go once
     * every row they name is gone (retention): below the lowest row left, and never above W.
     * Returns: held, gaps, their first ids, records dropped, W, the partition's lowest row. */
    free(sql->keep_audit);
    sql->keep_audit = xasprintf(
        "WITH cur AS (SELECT coalesce((SELECT w FROM %s WHERE lease_partition = $2::int2), 0) AS w"
        "  WHERE " HOLDS_LEASE("$1", "$2") "),"
        " gap AS (SELECT o.id FROM %s o, cur WHERE o.status = 'PENDING'"
        "  AND o.lease_partition = $2::int2 AND o.id > $4::int8 AND o.id <= least($5::int8, cur.w)"
        "  EXCEPT SELECT i FROM %s pb, unnest(pb.ids) i WHERE pb.lease_partition = $2::int2"
        "  AND pb.low <= $5::int8 AND pb.top > $4::int8 AND i > $4::int8 AND i <= $5::int8),"
        " ins AS (INSERT INTO %s (id, lease_partition, aggregate_id, attempts, last_error, failed)"
        "  SELECT g.id, $2::int2, o.aggregate_id, 0, $3, false FROM gap g JOIN %s o ON o.id = g.id"
        "  WHERE NOT EXISTS (SELECT 1 FROM %s k WHERE k.id = g.id) ON CONFLICT (id) DO NOTHING RETURNING id),"
        " low AS (SELECT least(cur.w + 1, (SELECT min(o.id) FROM %s o WHERE o.status = 'PENDING'"
        "  AND o.lease_partition = $2::int2)) AS id FROM cur),"
        " old AS (DELETE FROM %s pb USING low WHERE pb.lease_partition = $2::int2 AND pb.top < low.id RETURNING 1)"
        " SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM ins),"
        "  (SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM ins ORDER BY id LIMIT 20) x),"
        "  (SELECT count(*) FROM old), (SELECT w FROM cur), (SELECT id FROM low)",
        k->wm, k->table_q, k->pub, k->parked, k->table_q, k->parked, k->table_q, k->pub);
}

/* The proof's premises (keep.c's check): the id's identity kind, its sequence's cache and last
 * value, max(id), max(W), the sequence's name, and whether a partitioned table's function
 * may be run by this role. */
static void keep_sql_check(struct keep_statements *sql, const struct keep_names *k)
{
    const char *t = k->table_q;
    free(sql->keep_check);
    sql->keep_check = xasprintf(
        "SELECT a.attidentity::text, (SELECT seqcache FROM pg_sequence"
        "  WHERE seqrelid = pg_get_serial_sequence('%s', 'id')::regclass),"
        " CASE WHEN has_sequence_privilege(pg_get_serial_sequence('%s', 'id'), 'SELECT')"
        "  THEN coalesce(pg_sequence_last_value(pg_get_serial_sequence('%s', 'id')), 0) END,"
        " (SELECT max(id) FROM %s), (SELECT max(w) FROM %s), pg_get_serial_sequence('%s', 'id'),"
        /* partitioned (migrate --partition): can this role run the function that keeps them? */
        " (SELECT c.relkind = 'p' AND NOT coalesce(has_function_privilege(to_regprocedure("
        "   '%s.\"%s_partitions\"(integer, integer, bigint)'), 'EXECUTE'), false)"
        "  FROM pg_class c WHERE c.oid = '%s'::regclass)"
        " FROM pg_attribute a WHERE a.attrelid = '%s'::regclass AND a.attname = 'id' AND NOT a.attisdropped",
        t, t, t, t, k->wm, t, k->schema_q, k->name, t, t);
}

/* The monitor's: the backlog, retention below W, the duplicates estimate. */
static void keep_sql_monitor(struct keep_statements *sql, const struct keep_names *k)
{
    char *rec = recorded(k, "lp.p", "o.id"), *park = parked(k, "o.id"),
         *rec_any = recorded(k, "o.lease_partition", "o.id");
    /* the backlog: rows above W less those recorded as published (an index-only count, not a
     * lookup per row: an upper bound while parked rows lie above W; the records above W read
     * per partition from the index on (lease_partition, top), the OFFSET 0 keeping PostgreSQL
     * from making it a join that reads every record: 500,000, 0.66 s, after 300 s of
     * bench/longtx.sh in keep mode with no retention), and the first row above
     * W of each partition that is neither recorded nor parked, for the oldest's age ($1 the
     * count cap per partition) */
    free(sql->stats);
    sql->stats = xasprintf(
        "WITH lp AS (SELECT g::int2 AS p, coalesce((SELECT w FROM %s WHERE lease_partition = g), 0) AS w"
        "  FROM generate_series(0, %d) g),"
        " heads AS (SELECT x.id, x.created_at FROM lp CROSS JOIN LATERAL (SELECT o.id, o.created_at"
        "  FROM %s o WHERE o.status = 'PENDING' AND o.lease_partition = lp.p AND o.id > lp.w"
        "   AND NOT %s AND NOT %s ORDER BY o.id LIMIT 1) x)"
        " SELECT greatest(0, (SELECT count(*) FROM lp CROSS JOIN LATERAL (SELECT 1 FROM %s o"
        "   WHERE o.status = 'PENDING' AND o.lease_partition = lp.p AND o.id > lp.w LIMIT $1) x)"
        "  - (SELECT count(*) FROM lp CROSS JOIN LATERAL (SELECT pb.ids FROM %s pb"
        "   WHERE pb.lease_partition = lp.p AND pb.top > lp.w OFFSET 0) r CROSS JOIN LATERAL unnest(r.ids) i"
        "   WHERE i > lp.w)),"
        " (SELECT min(id) FROM heads), (SELECT " OUTBOX_OLDEST_AGE("created_at") " FROM heads),"
        " (SELECT max(id) FROM %s), (SELECT count(*) FROM %s WHERE failed),"
        " pg_notification_queue_usage()",
        k->wm, OUTBOX_LEASE_PARTITIONS - 1, k->table_q, rec, park, k->table_q, k->pub, k->table_q,
        k->parked);
    /* retention: rows at or below their partition's W, older than the retention, not parked,
     * and, if PENDING (rows a table kept from mark mode are SENT), named by a record of what
     * was published. A row W passed that no record names was never published (a row planted
     * below W, a restore, a broken proof): it is kept, and counted and named (the last three
     * columns: how many, their first ids, the highest) for the audit, which publishes it
     * under the lease (this session holds none). Columns as the other layouts' (deleted, the
     * highest id read, rows left, the first row left that is not parked: a row parked for
     * good may stay for months), then those three. */
    char *rec_w = recorded(k, "w.lease_partition", "w.id");
    free(sql->purge);
    sql->purge = xasprintf(
        "WITH w AS (SELECT id, lease_partition, status, created_at FROM %s WHERE id > $1::int8"
        "  ORDER BY id LIMIT $2),"
        " old AS (SELECT w.id, w.status <> 'PENDING' OR %s AS rec FROM w JOIN %s wm"
        "  ON wm.lease_partition = w.lease_partition"
        "  WHERE w.id <= wm.w AND w.created_at < clock_timestamp() - make_interval(secs => $3::int)"
        "   AND NOT EXISTS (SELECT 1 FROM %s k WHERE k.id = w.id)),"
        " kept AS (SELECT id FROM old WHERE NOT rec),"
        " d AS (DELETE FROM %s WHERE id IN (SELECT id FROM old WHERE rec) RETURNING 1)"
        " SELECT (SELECT count(*) FROM d), (SELECT max(id) FROM w),"
        " (SELECT count(*) FROM w) - (SELECT count(*) FROM old WHERE rec),"
        " (SELECT coalesce(min(w.id), 0) FROM w WHERE w.id NOT IN (SELECT id FROM old WHERE rec)"
        "  AND NOT EXISTS (SELECT 1 FROM %s k WHERE k.id = w.id)),"
        " (SELECT count(*) FROM kept),"
        " (SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM kept ORDER BY id LIMIT 20) x),"
        " (SELECT coalesce(max(id), 0) FROM kept)",
        k->table_q, rec_w, k->wm, k->parked, k->table_q, k->parked);
    free(rec_w);
    /* parked entries whose row is not in the table (deleted or dropped by hand; retention
     * never takes a parked row): nothing is left to publish, and they would count as parked
     * for ever (and hold their partition from retention) */
    free(sql->orphans);
    sql->orphans = xasprintf("WITH d AS (DELETE FROM %s k WHERE NOT EXISTS (SELECT 1 FROM %s o WHERE o.id = k.id)"
                             " RETURNING k.id) SELECT (SELECT count(*) FROM d),"
                             " (SELECT string_agg(id::text, ',') FROM (SELECT id FROM d ORDER BY id LIMIT 20) x)",
                             k->parked, k->table_q);
    /* id-range partitions (migrate --partition): kept ahead of the identity, dropped by
     * retention (the owner's function, schema 9) */
    free(sql->partitions);
    sql->partitions = xasprintf("SELECT partitioned, created, dropped, dropped_rows, ahead_now, busy, lost"
                                " FROM %s.\"%s_partitions\"($1::int)", k->schema_q, k->name);
    /* rows a previous relay may have published: above W, at or below its claim mark */
    free(sql->duplicates);
    sql->duplicates = xasprintf(
        "SELECT count(*) FROM %s o WHERE o.status = 'PENDING'"
        " AND o.id > coalesce((SELECT w FROM %s WHERE lease_partition = o.lease_partition), 0)"
        " AND o.id <= (SELECT coalesce(max(claimed_high), 0) FROM %s.\"%s_relay_state\") AND NOT %s",
        k->table_q, k->wm, k->schema_q, k->name, rec_any);
    free(rec);
    free(park);
    free(rec_any);
}

void keep_names_init(struct keep_names *k, const char *schema_q, const char *table_q, const char *name)
{
    snprintf(k->wm, sizeof(k->wm), "%s.\"%s_watermark\"", schema_q, name);
    snprintf(k->pub, sizeof(k->pub), "%s.\"%s_published\"", schema_q, name);
    snprintf(k->parked, sizeof(k->parked), "%s.\"%s_parked\"", schema_q, name);
    k->schema_q = schema_q;
    k->table_q = table_q;
    k->name = name;
}

void keep_sql_init(struct keep_statements *sql, const char *schema_q, const char *table_q, const char *name,
                   int lease_key)
{
    memset(sql, 0, sizeof(*sql));
    sql->lease_key = lease_key;
    struct keep_names k = {0};
    keep_names_init(&k, schema_q, table_q, name);
    keep_sql_rows(sql, &k);
    keep_sql_watermark(sql, &k);
    keep_sql_check(sql, &k);
    keep_sql_monitor(sql, &k);
}

/* The claim's parts in keep mode: where each partition starts (its floor, never below W),
 * whether anything published or parked lies in it, the rows to skip (published above W,
 * parked), and the source of requeued rows (parked, no longer failed, at or below the start:
 * W passed them while they were parked), which go again before the later rows of their key. */
void keep_sql_claim_parts(const char *schema_q, const char *name, struct strbuf *from, struct strbuf *skip,
                          struct strbuf *requeued)
{
    struct keep_names k = {0};
    keep_names_init(&k, schema_q, "", name);
    /* where each starts: its floor, never below W ($10: W as the relay knows it, -1: read) */
    strbuf_printf(from,
                  " FROM (SELECT lp0.part, greatest(lp0.floor, CASE WHEN lp0.w >= 0 THEN lp0.w"
                  "   ELSE coalesce((SELECT wm.w FROM %s wm WHERE wm.lease_partition = lp0.part), 0) END) AS floor,"
                  "  coalesce((SELECT max(top) FROM %s pb WHERE pb.lease_partition = lp0.part), 0) AS pubtop,"
                  "  EXISTS (SELECT 1 FROM %s k WHERE k.lease_partition = lp0.part) AS noted"
                  "  FROM unnest($4::int2[], $9::int8[], $10::int8[]) AS lp0(part, floor, w)) AS lp",
                  k.wm, k.pub, k.parked);
    char *rec = recorded(&k, "lp.part", "p.id"), *park = parked(&k, "p.id");
    strbuf_printf(skip, "   AND (p.id > lp.pubtop OR NOT %s)   AND (NOT lp.noted OR NOT %s)", rec, park);
    strbuf_printf(requeued, "%s k", k.parked);
    free(rec);
    free(park);
}

