/* OUTBOX_ON_SENT=keep (schema/007_keep.sql): the relay never writes to a row it published.
 * A mark records the acknowledged ids of each lease partition in one <table>_published row;
 * the advance moves each held partition's watermark W up over the rows that are exactly
 * those published or parked, up to the floors' proof (no id at or below it can still
 * commit). Parks, failed attempts and requeues live in <table>_parked. Every write checks in SQL that this session holds the partition's
 * lease (its advisory lock): a relay that lost its session cannot move anything. Claims start
 * above W and skip what is published above it, so a restart republishes at most what was in
 * flight and not yet recorded.
 *
 * What the proof rests on, checked at start-up and every KEEP_CHECK_MS: the id is an identity
 * GENERATED ALWAYS with CACHE 1 (ids are drawn in time order), and its sequence has not been
 * rewound below the table's rows or a watermark (a restore, setval); a new worker session
 * (perhaps another server) proves and checks again before W moves. A writer that inserts
 * with OVERRIDING SYSTEM VALUE cannot be seen coming: the writer rule forbids it. What the
 * proof cannot see, the audit finds: the records stay below W, and every
 * OUTBOX_WATERMARK_AUDIT_MS each held partition's rows at or below W are compared with them;
 * a row no record names was never published, and goes now (counted, logged). */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* A watermark row is updated by every write of its W; while a long transaction holds the
 * xmin horizon back, none of its versions can be pruned and each read of the row walks them
 * all (16,000 dead versions on 64 rows after 90 s at one write per 100 ms, bench/longtx.sh in
 * keep mode; the relay fell behind for good). So the relay keeps the W of the partitions it
 * holds: its advances move it every KEEP_ADVANCE_MS and it is written every KEEP_SAVE_MS
 * (and before a shutdown ends); claims start at it, and the table is read only for a
 * partition just leased. A W not yet written costs nothing if the relay dies: rows between
 * the written W and it are recorded as published, and the next relay skips them. */
#define KEEP_ADVANCE_MS 500
#define KEEP_SAVE_MS 2000
#define KEEP_CHECK_MS 10000

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
static void keep_sql_rows(struct outbox_sql *sql, const struct keep_names *k)
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
static void keep_sql_watermark(struct outbox_sql *sql, const struct keep_names *k)
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
     * record of the partition: a bitmap scan cannot stop at the first match.) The rows and the
     * recorded ids are compared by one grouping, not an anti-join: the planner cannot know how
     * many rows the span holds (W is read in the statement) and chose a nested loop over the
     * records for each row — 3.5 million comparisons and 0.5-1.3 s per turn on the worker
     * session once a turn spanned 2,600-5,000 rows (bench/longtx.sh in keep mode, where those
     * turns were the backlog's spikes). Records go once
     * every row they name is gone (retention): below the lowest row left, and never above W.
     * Returns: held, gaps, their first ids, records dropped, W, the partition's lowest row. */
    free(sql->keep_audit);
    sql->keep_audit = xasprintf(
        "WITH cur AS (SELECT coalesce((SELECT w FROM %s WHERE lease_partition = $2::int2), 0) AS w"
        "  WHERE " HOLDS_LEASE("$1", "$2") "),"
        " span AS (SELECT o.id, o.aggregate_id FROM %s o, cur WHERE o.status = 'PENDING'"
        "  AND o.lease_partition = $2::int2 AND o.id > $4::int8 AND o.id <= least($5::int8, cur.w)),"
        " rec AS (SELECT i FROM %s pb, unnest(pb.ids) i WHERE pb.lease_partition = $2::int2"
        "  AND pb.low <= $5::int8 AND pb.top > $4::int8 AND i > $4::int8 AND i <= $5::int8),"
        " gap AS (SELECT u.id, min(u.aggregate_id) AS aggregate_id FROM (SELECT id, aggregate_id, true AS row FROM span"
        "   UNION ALL SELECT i, NULL, false FROM rec) u GROUP BY u.id HAVING bool_and(u.row)),"
        " ins AS (INSERT INTO %s (id, lease_partition, aggregate_id, attempts, last_error, failed)"
        "  SELECT g.id, $2::int2, g.aggregate_id, 0, $3, false FROM gap g"
        "  WHERE NOT EXISTS (SELECT 1 FROM %s k WHERE k.id = g.id) ON CONFLICT (id) DO NOTHING RETURNING id),"
        " low AS (SELECT least(cur.w + 1, (SELECT min(o.id) FROM %s o WHERE o.status = 'PENDING'"
        "  AND o.lease_partition = $2::int2)) AS id FROM cur),"
        " old AS (DELETE FROM %s pb USING low WHERE pb.lease_partition = $2::int2 AND pb.top < low.id RETURNING 1)"
        " SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM ins),"
        "  (SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM ins ORDER BY id LIMIT 20) x),"
        "  (SELECT count(*) FROM old), (SELECT w FROM cur), (SELECT id FROM low)",
        k->wm, k->table_q, k->pub, k->parked, k->parked, k->table_q, k->pub);
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
static void keep_sql_monitor(struct outbox_sql *sql, const struct keep_names *k)
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
     * under the lease (this session holds none). */
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
        " (SELECT count(*) FROM w) - (SELECT count(*) FROM old WHERE rec), (SELECT count(*) FROM kept),"
        " (SELECT string_agg(id::text, ',' ORDER BY id) FROM (SELECT id FROM kept ORDER BY id LIMIT 20) x),"
        " (SELECT coalesce(max(id), 0) FROM kept)",
        k->table_q, rec_w, k->wm, k->parked, k->table_q);
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

void outbox_sql_keep(struct outbox_sql *sql, const char *schema_q, const char *table_q, const char *name)
{
    struct keep_names k = {0};
    keep_names_init(&k, schema_q, table_q, name);
    keep_sql_rows(sql, &k);
    keep_sql_watermark(sql, &k);
    keep_sql_monitor(sql, &k);
}

/* The claim's parts in keep mode: where each partition starts (its floor, never below W),
 * whether anything published or parked lies in it, the rows to skip (published above W,
 * parked), and the source of requeued rows (parked, no longer failed, at or below the start:
 * W passed them while they were parked), which go again before the later rows of their key. */
void outbox_keep_claim_parts(const char *schema_q, const char *name, struct strbuf *from, struct strbuf *skip,
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

/* ---- the relay's side ------------------------------------------------------------- */

/* What the proof rests on, from keep_check's row: "" when it holds, else why not. */
static void check_verdict(const PGresult *res, char *why, size_t len)
{
    why[0] = '\0';
    if (PQntuples(res) != 1) {
        snprintf(why, len, "the table has no id column");
        return;
    }
    const char *identity = PQgetvalue(res, 0, KEEP_CHECK_IDENTITY);
    const char *seq = PQgetvalue(res, 0, KEEP_CHECK_SEQUENCE);
    long long cache = pg_int(PQgetvalue(res, 0, KEEP_CHECK_CACHE));
    long long max_id = pg_int(PQgetvalue(res, 0, KEEP_CHECK_MAX_ID));
    long long max_w = pg_int(PQgetvalue(res, 0, KEEP_CHECK_MAX_W));
    if (strcmp(identity, "a") != 0)
        snprintf(why, len, "the id column is not an identity GENERATED ALWAYS (writers could choose ids)");
    else if (cache != 1)
        snprintf(why, len, "the id's sequence %s has CACHE %lld: sessions draw ids out of time order "
                 "(ALTER SEQUENCE %s CACHE 1)", seq, cache, seq);
    else if (PQgetisnull(res, 0, KEEP_CHECK_LAST_VALUE))
        snprintf(why, len, "this role cannot read the id's sequence %s (GRANT SELECT ON SEQUENCE %s; "
                 "deploy/roles.sql does)", seq, seq);
    else if (pg_int(PQgetvalue(res, 0, KEEP_CHECK_LAST_VALUE)) < max_id)
        snprintf(why, len, "the id's sequence %s is at %s, below the table's highest id %lld: it was "
                 "rewound (a restore or setval), or a row was inserted with an id beyond it (OVERRIDING "
                 "SYSTEM VALUE), and new rows would get ids already passed",
                 seq, PQgetvalue(res, 0, KEEP_CHECK_LAST_VALUE), max_id);
    else if (pg_int(PQgetvalue(res, 0, KEEP_CHECK_LAST_VALUE)) < max_w)
        snprintf(why, len, "the id's sequence %s is at %s, below a watermark (%lld): it was rewound, "
                 "and new rows would lie below the watermark, never claimed",
                 seq, PQgetvalue(res, 0, KEEP_CHECK_LAST_VALUE), max_w);
}

static void check_ok(struct relay *r, PGresult *res)
{
    char why[512];
    check_verdict(res, why, sizeof(why));
    struct keep_state *k = &r->keep;
    /* a partitioned outbox whose partitions this role cannot keep: writers would fail once the
     * partitions ahead are used up, so start-up refuses (later, the monitor's log says it) */
    if (!k->checked && !why[0] && PQntuples(res) == 1 &&
        strcmp(PQgetvalue(res, 0, KEEP_CHECK_PARTITIONS_DENIED), "t") == 0)
        snprintf(why, sizeof(why), "%s is partitioned by id and this role cannot run the function that "
                 "makes its partitions ahead and drops them (GRANT EXECUTE ON FUNCTION %s_partitions; "
                 "deploy/roles.sql does)", r->cfg->table, r->cfg->table);
    if (!k->checked && why[0]) {
        log_error("keep: OUTBOX_ON_SENT=keep cannot prove its watermark on %s: %s", r->cfg->table, why);
        relay_finish(r, OUTBOX_EXIT_FAILED);
        return;
    }
    if (why[0] && !k->blocked)
        log_error("keep: the watermark stops: %s", why);
    else if (!why[0] && k->blocked)
        log_info("keep: the watermark's proof holds again; it moves on");
    k->blocked = why[0] != '\0';
    snprintf(k->why, sizeof(k->why), "%s", why);
    k->checked = 1;
    k->session_checked = 1;
    r->m.keep_blocked = k->blocked;
}

static void check_fail(struct relay *r, PGresult *res)
{
    (void)res;
    r->keep.check_due_ms = mono_ms() + 1000;
}

static const struct worker_stmt check_stmt = {
    .what = "keep mode's check", .on_ok = check_ok, .on_fail = check_fail};

int keep_check_due(const struct relay *r)
{
    return r->cfg->keep && r->schema_ok && mono_ms() >= r->keep.check_due_ms;
}

void keep_check_send(struct relay *r)
{
    r->keep.check_due_ms = mono_ms() + KEEP_CHECK_MS;
    worker_send(r, &check_stmt, r->sql.keep_check, 0, NULL);
}

static void advance_ok(struct relay *r, PGresult *res)
{
    struct keep_state *k = &r->keep;
    long long records = 0;
    double lag = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        int p = (int)pg_int(PQgetvalue(res, i, KEEP_ADVANCE_PART));
        if (p < 0 || p >= OUTBOX_LEASE_PARTITIONS)
            continue;
        int64_t w = pg_int(PQgetvalue(res, i, KEEP_ADVANCE_W));
        uint64_t bit = UINT64_C(1) << p;
        if ((k->known & bit) && w > k->w[p])
            r->m.keep_advances_total++;
        k->w[p] = w;
        k->saved[p] = pg_int(PQgetvalue(res, i, KEEP_ADVANCE_SAVED));
        k->known |= bit;
        records += pg_int(PQgetvalue(res, i, KEEP_ADVANCE_RECORDS));
        double age = atof(PQgetvalue(res, i, KEEP_ADVANCE_OLDEST_AGE));
        if (age > lag)
            lag = age;
    }
    r->m.keep_published_records = records;
    r->m.keep_lag_seconds = lag;
}

static const struct worker_stmt advance_stmt = {.what = "advancing the watermark", .on_ok = advance_ok};

/* A partition held whose W moved since it was last written. */
int keep_unsaved(const struct relay *r)
{
    const struct keep_state *k = &r->keep;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if ((k->known & (UINT64_C(1) << p)) && k->w[p] > k->saved[p])
            return 1;
    return 0;
}

/* Whether the next advance writes W: every KEEP_SAVE_MS, and at once while shutting down. */
static int save_now(const struct relay *r)
{
    return keep_unsaved(r) && (r->mode == MODE_DRAINING || mono_ms() >= r->keep.save_due_ms);
}

int keep_advance_due(const struct relay *r)
{
    return r->cfg->keep && r->keep.session_checked && !r->keep.blocked && r->claim.floors.proven > 0 &&
           (r->keep.dirty || r->claim.floors.proven != r->keep.proof_sent || save_now(r)) &&
           (mono_ms() >= r->keep.advance_due_ms || (r->mode == MODE_DRAINING && keep_unsaved(r)));
}

void keep_advance_send(struct relay *r)
{
    struct keep_state *k = &r->keep;
    char key[16], proof[24];
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    snprintf(proof, sizeof(proof), "%lld", (long long)r->claim.floors.proven);
    struct strbuf parts, ws, saved;
    strbuf_init(&parts);
    strbuf_init(&ws);
    strbuf_init(&saved);
    pgarray_open(&parts);
    pgarray_open(&ws);
    pgarray_open(&saved);
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (k->known & (UINT64_C(1) << p)) {
            pgarray_int(&parts, p);
            pgarray_int(&ws, k->w[p]);
            pgarray_int(&saved, k->saved[p]);
        }
    pgarray_close(&parts);
    pgarray_close(&ws);
    pgarray_close(&saved);
    int save = save_now(r);
    const char *params[7] = {key, proof, r->cfg->relay_name, parts.buf, ws.buf, saved.buf, save ? "true" : "false"};
    k->advance_due_ms = mono_ms() + KEEP_ADVANCE_MS;
    if (save)
        k->save_due_ms = mono_ms() + KEEP_SAVE_MS;
    /* again after the next mark, or once the proof has moved */
    k->dirty = 0;
    k->proof_sent = r->claim.floors.proven;
    if (worker_send(r, &advance_stmt, r->sql.keep_advance, 7, params) != 0)
        k->dirty = 1;
    strbuf_destroy(&parts);
    strbuf_destroy(&ws);
    strbuf_destroy(&saved);
}

/* The claim's $10: W of each partition of the claim (aligned with its $4), -1 when the relay
 * does not know it (the claim reads it from the table). */
void keep_claim_w(const struct relay *r, const struct floor_claim *fc, struct strbuf *w)
{
    pgarray_open(w);
    for (int i = 0; i < fc->nparts; i++) {
        int p = fc->parts[i];
        pgarray_int(w, (r->keep.known & (UINT64_C(1) << p)) ? r->keep.w[p] : -1);
    }
    pgarray_close(w);
}

/* ---- what this relay recorded, for its claims ------------------------------------- */

#define KEEP_PUB_MAX 50000 /* ids; beyond, the oldest go (the records still answer for them) */

/* After a mark: the rows it recorded (none when it was refused any: which were refused is
 * not said). Entries at or below their partition's floor go: claims do not read there; every
 * lease change forgets the list. */
void keep_published(struct relay *r, const PGresult *res)
{
    struct keep_state *k = &r->keep;
    if (PQntuples(res) != 1 || pg_int(PQgetvalue(res, 0, KEEP_MARK_REFUSED)) > 0)
        return;
    const int64_t *at = r->claim.floors.at;
    size_t n = 0;
    for (size_t i = 0; i < k->pub_n; i++)
        if (at[k->pub_part[i]] == 0 || k->pub_id[i] > at[k->pub_part[i]]) {
            k->pub_id[n] = k->pub_id[i];
            k->pub_part[n++] = k->pub_part[i];
        }
    k->pub_n = n;
    size_t add = window_count(&r->win, ROW_MASK(ROW_MARKING));
    if (k->pub_n + add > KEEP_PUB_MAX) {
        size_t drop = k->pub_n + add - KEEP_PUB_MAX;
        drop = drop > k->pub_n ? k->pub_n : drop;
        memmove(k->pub_id, k->pub_id + drop, (k->pub_n - drop) * sizeof(*k->pub_id));
        memmove(k->pub_part, k->pub_part + drop, (k->pub_n - drop) * sizeof(*k->pub_part));
        k->pub_n -= drop;
    }
    if (k->pub_n + add > k->pub_cap) {
        k->pub_cap = (k->pub_n + add) * 2;
        k->pub_id = xrealloc(k->pub_id, k->pub_cap * sizeof(*k->pub_id));
        k->pub_part = xrealloc(k->pub_part, k->pub_cap * sizeof(*k->pub_part));
    }
    for (size_t i = 0; i < r->win.n && k->pub_n < k->pub_cap; i++)
        if (r->win.rows[i].state == ROW_MARKING) {
            k->pub_id[k->pub_n] = r->win.rows[i].id;
            k->pub_part[k->pub_n++] = r->win.rows[i].partition;
        }
}

/* Every lease change and every new session: the list goes, and so does every W the relay
 * knew (the next advance and claims read the table's). */
void keep_forget_published(struct relay *r)
{
    r->keep.pub_n = 0;
    r->keep.known = 0;
}

/* The claim's $1: the rows in flight, and in keep mode those recorded above the floors. */
void keep_claim_skip(const struct relay *r, struct strbuf *ids)
{
    window_ids_literal(&r->win, ~0u, 0, ids);
    if (!r->cfg->keep || r->keep.pub_n == 0)
        return;
    ids->buf[--ids->len] = '\0'; /* reopen the array */
    for (size_t i = 0; i < r->keep.pub_n; i++)
        pgarray_int(ids, r->keep.pub_id[i]);
    pgarray_close(ids);
}

/* ---- the audit: rows at or below W that were never published ---------------------- */

/* The ids one audit turn looks at: about 1,250 rows of a partition when keys spread evenly
 * over the 64 (keep_audit in keep_sql_watermark); KEEP_AUDIT_TURNS turns per held partition
 * per OUTBOX_WATERMARK_AUDIT_MS, 320,000 ids in all. A turn holds the worker session: one of
 * 320,000 ids took 150-360 ms beside writers at 3,000 events/s (bench/longtx.sh in keep
 * mode), each a step in the backlog; a quarter of it, four times as often, is the same work
 * in smaller steps. */
#define KEEP_AUDIT_TURNS 4
#define KEEP_AUDIT_SPAN (320000 / KEEP_AUDIT_TURNS)
static void audit_ok(struct relay *r, PGresult *res)
{
    if (PQntuples(res) != 1 || pg_int(PQgetvalue(res, 0, KEEP_AUDIT_HELD)) == 0)
        return;
    int p = r->keep.audit_part;
    long long gaps = pg_int(PQgetvalue(res, 0, KEEP_AUDIT_GAPS));
    if (gaps > 0) {
        r->m.keep_gaps_total += (uint64_t)gaps;
        log_error("keep: %lld rows of lease partition %d lie at or below its watermark but were never "
                  "recorded as published (ids %s%s): publishing them now. A row inserted with an id "
                  "below the watermark (OVERRIDING SYSTEM VALUE, a restore, a rewound sequence) or a "
                  "broken proof; see docs/OUTBOX-TABLE.md, Keep", gaps, p,
                  PQgetvalue(res, 0, KEEP_AUDIT_IDS), gaps > 20 ? ", ..." : "");
        r->claim.wanted = 1;
    }
    /* the partition's next turn goes on from here (never below its lowest row), or from the
     * bottom once a pass reached W */
    int64_t to = r->keep.audit_from[p] + KEEP_AUDIT_SPAN, low = pg_int(PQgetvalue(res, 0, KEEP_AUDIT_LOW));
    r->keep.audit_from[p] = to >= pg_int(PQgetvalue(res, 0, KEEP_AUDIT_W)) ? 0 : to;
    if (r->keep.audit_from[p] < low - 1)
        r->keep.audit_from[p] = low - 1;
    r->m.keep_audited_total++;
}

static const struct worker_stmt audit_stmt = {.what = "auditing the watermark", .on_ok = audit_ok};

int keep_audit_due(const struct relay *r)
{
    return r->cfg->keep && r->keep.session_checked && mono_ms() >= r->keep.audit_due_ms &&
           lease_count_held(r->lease.part) > 0;
}

void keep_audit_send(struct relay *r)
{
    /* one held partition per turn, so that a round gives each KEEP_AUDIT_TURNS turns per period */
    r->keep.audit_due_ms = mono_ms() + r->cfg->watermark_audit_ms / (OUTBOX_LEASE_PARTITIONS * KEEP_AUDIT_TURNS);
    int p = r->keep.audit_next;
    for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++, p = (p + 1) % OUTBOX_LEASE_PARTITIONS)
        if (r->lease.part[p].state != LEASE_FREE)
            break;
    r->keep.audit_next = (p + 1) % OUTBOX_LEASE_PARTITIONS;
    r->keep.audit_part = p;
    char key[16], part[8], from[24], to[24];
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    snprintf(part, sizeof(part), "%d", p);
    snprintf(from, sizeof(from), "%lld", (long long)r->keep.audit_from[p]);
    snprintf(to, sizeof(to), "%lld", (long long)r->keep.audit_from[p] + KEEP_AUDIT_SPAN);
    const char *params[5] = {key, part, "at or below the watermark but never recorded as published (the audit)",
                             from, to};
    worker_send(r, &audit_stmt, r->sql.keep_audit, 5, params);
}

void keep_mark_result(struct relay *r, const PGresult *res)
{
    if (PQntuples(res) != 1)
        return;
    long long refused = pg_int(PQgetvalue(res, 0, KEEP_MARK_REFUSED));
    r->keep.dirty = 1;
    if (refused > 0) {
        keep_forget_published(r); /* which rows were refused is not said: none is listed */
        r->m.keep_refused_total += (uint64_t)refused;
        log_warn("keep: %lld acknowledged rows not recorded: this session no longer holds their lease "
                 "partitions (their new holder publishes them again)", refused);
    }
}
