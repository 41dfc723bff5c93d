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
 * a row no record names was never published, and goes now (counted, logged).
 *
 * This file is the loop's half: the checks, the advance and the audit sent on the worker
 * connection, and what the relay recorded; the statements are keep_sql.c's. */
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
    return r->cfg->keep && r->keep.session_checked && !r->keep.blocked && claim_floors_proven(r) > 0 &&
           (r->keep.dirty || claim_floors_proven(r) != r->keep.proof_sent || save_now(r)) &&
           (mono_ms() >= r->keep.advance_due_ms || (r->mode == MODE_DRAINING && keep_unsaved(r)));
}

void keep_advance_send(struct relay *r)
{
    struct keep_state *k = &r->keep;
    char key[16], proof[24];
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    snprintf(proof, sizeof(proof), "%lld", (long long)claim_floors_proven(r));
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
    k->proof_sent = claim_floors_proven(r);
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
    size_t n = 0;
    for (size_t i = 0; i < k->pub_n; i++)
        if (claim_floor(r, k->pub_part[i]) == 0 || k->pub_id[i] > claim_floor(r, k->pub_part[i])) {
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

/* The ids one audit turn looks at, at least: about 1,250 rows of a partition when keys
 * spread evenly over the 64 (keep_audit in keep_sql_watermark); KEEP_AUDIT_TURNS turns per
 * held partition per OUTBOX_WATERMARK_AUDIT_MS, 320,000 ids in all. A turn holds the worker
 * session, so the work goes in small steps, four times a period. */
#define KEEP_AUDIT_TURNS 4
#define KEEP_AUDIT_SPAN (320000 / KEEP_AUDIT_TURNS)
/* ... and at most: about 50,000 of a partition's rows, 50-75 ms a turn. The retained ids are
 * W less the lowest row, which a row parked for good (never deleted) holds down for as long
 * as it stays: uncapped, one such row a month old would make turns of 27 million ids at
 * 10,000 events/s. The cap still lets a pass end within a quarter of 24 h of retention up
 * to about 35,000 events/s. */
#define KEEP_AUDIT_SPAN_MAX 3200000

/* A turn's span: KEEP_AUDIT_SPAN, or more when a partition's retained rows span so many ids
 * that a pass at that pace would not end within a quarter of OUTBOX_RETENTION. The span
 * covers the retained ids in a sixth of the retention; as W moves on meanwhile (at a steady
 * rate, by the retained ids in the whole retention), a pass closes on W at five sixths of
 * that speed and ends in a fifth (test_audit_pace). 24 h at 10,000 events/s retains 864
 * million ids: 960 turns in 4 h, 900,001 ids (about 14,000 of the partition's rows) each. */
int64_t keep_audit_span(int64_t retained_ids, int retention_s, int period_ms)
{
    if (retention_s <= 0 || retained_ids <= KEEP_AUDIT_SPAN || period_ms <= 0)
        return KEEP_AUDIT_SPAN;
    double turns = (double)retention_s * 1000.0 / 6.0 / period_ms * KEEP_AUDIT_TURNS;
    if (turns < 1)
        turns = 1;
    double span = (double)retained_ids / turns + 1;
    return span > KEEP_AUDIT_SPAN_MAX ? KEEP_AUDIT_SPAN_MAX : span > KEEP_AUDIT_SPAN ? (int64_t)span : KEEP_AUDIT_SPAN;
}

/* The span of partition p's next turn (and of its turn in flight: audit_ids changes only
 * when that turn's answer comes) */
static int64_t audit_span_of(const struct relay *r, int p)
{
    return keep_audit_span(r->keep.audit_ids[p], r->cfg->retention_seconds, r->cfg->watermark_audit_ms);
}

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
        claim_want(r);
    }
    /* the partition's next turn goes on from here (never below its lowest row), or from the
     * bottom once a pass reached W */
    int64_t w = pg_int(PQgetvalue(res, 0, KEEP_AUDIT_W)), low = pg_int(PQgetvalue(res, 0, KEEP_AUDIT_LOW));
    int64_t to = r->keep.audit_from[p] + audit_span_of(r, p);
    r->keep.audit_ids[p] = w - low + 1;
    if (to >= w) { /* a whole pass: from the partition's lowest row to W */
        r->m.keep_audit_passes_total++;
        if (r->keep.audit_began_ms[p] > 0) /* (not a pass the session changed under) */
            r->keep.audit_pass_ms[p] = mono_ms() - r->keep.audit_began_ms[p];
        int64_t longest = 0;
        for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++)
            if (lease_state(r, i) != LEASE_FREE && r->keep.audit_pass_ms[i] > longest)
                longest = r->keep.audit_pass_ms[i];
        r->m.keep_audit_pass_seconds = (double)longest / 1000.0;
        r->keep.audit_began_ms[p] = 0;
        r->keep.audit_from[p] = 0;
    } else {
        r->keep.audit_from[p] = to;
    }
    if (r->keep.audit_from[p] < low - 1)
        r->keep.audit_from[p] = low - 1;
    r->m.keep_audited_total++;
}

static const struct worker_stmt audit_stmt = {.what = "auditing the watermark", .on_ok = audit_ok};

int keep_audit_due(const struct relay *r)
{
    return r->cfg->keep && r->keep.session_checked && mono_ms() >= r->keep.audit_due_ms &&
           lease_held(r) > 0;
}

void keep_audit_send(struct relay *r)
{
    /* one held partition per turn, so that a round gives each KEEP_AUDIT_TURNS turns per
     * period: relays that share the table share the work (with four relays each turning
     * every 1/256 of the period, the table was audited four times as often as the pace
     * asks, each turn at the full span) */
    int held = lease_held(r);
    r->keep.audit_due_ms = mono_ms() + r->cfg->watermark_audit_ms / ((held > 0 ? held : 1) * KEEP_AUDIT_TURNS);
    int p = r->keep.audit_next;
    for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++, p = (p + 1) % OUTBOX_LEASE_PARTITIONS)
        if (lease_state(r, p) != LEASE_FREE)
            break;
    r->keep.audit_next = (p + 1) % OUTBOX_LEASE_PARTITIONS;
    r->keep.audit_part = p;
    char key[16], part[8], from[24], to[24];
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    snprintf(part, sizeof(part), "%d", p);
    snprintf(from, sizeof(from), "%lld", (long long)r->keep.audit_from[p]);
    if (r->keep.audit_began_ms[p] == 0)
        r->keep.audit_began_ms[p] = mono_ms();
    snprintf(to, sizeof(to), "%lld", (long long)(r->keep.audit_from[p] + audit_span_of(r, p)));
    const char *params[5] = {key, part, "at or below the watermark but never recorded as published (the audit)",
                             from, to};
    worker_send(r, &audit_stmt, r->sql.keep_audit, 5, params);
}

long long keep_mark_result(struct relay *r, const PGresult *res)
{
    if (PQntuples(res) != 1)
        return 0;
    long long refused = pg_int(PQgetvalue(res, 0, KEEP_MARK_REFUSED));
    r->keep.dirty = 1;
    if (refused > 0) {
        keep_forget_published(r); /* which rows were refused is not said: none is listed */
        r->m.keep_refused_total += (uint64_t)refused;
        log_warn("keep: %lld acknowledged rows not recorded: this session no longer holds their lease "
                 "partitions (their new holder publishes them again)", refused);
    }
    return refused;
}

void keep_session_new(struct relay *r)
{
    r->keep.session_checked = 0;
    /* the leases were lost with the old session: a pass under way did not run all along */
    for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++)
        if (r->keep.audit_began_ms[i] > 0)
            r->keep.audit_began_ms[i] = -1;
    keep_forget_published(r);
    r->keep.check_due_ms = 0;
}

void keep_check_now(struct relay *r)
{
    r->keep.check_due_ms = 0;
}

void keep_destroy(struct relay *r)
{
    free(r->keep.pub_id);
    free(r->keep.pub_part);
    r->keep.pub_id = NULL;
    r->keep.pub_part = NULL;
}

int keep_blocked(const struct relay *r)
{
    return r->keep.blocked;
}

int keep_w_known(const struct relay *r, int partition, int64_t *w)
{
    if (!(r->keep.known >> partition & 1))
        return 0;
    *w = r->keep.w[partition];
    return 1;
}
