/* Exactly-once: rows recorded in PostgreSQL stay in the progress record until their records
 * are on the primary's disk and on every standby (OUTBOX_EXACTLY_ONCE). The worker session
 * commits asynchronously, so a crash of the primary may lose its last records; after an
 * asynchronous failover the promoted standby may lack them. Either way those rows are
 * PENDING again, and a takeover that did not find them in the progress record would publish
 * them again.
 *
 * A row whose record committed joins the tail with the current generation. While rows wait,
 * every TAIL_CHECK_MS (slowing down to TAIL_CHECK_MAX_MS while no row can go), the worker
 * session asks the server for its WAL insert and flush positions and for the lowest
 * position a standby has flushed: pg_stat_replication's physical walsenders (not a logical
 * one, nor a base backup's) and every physical replication slot, so that a standby cut off
 * from the primary still counts. The insert position, read after the rows' records
 * committed, bounds their commit records: it seals their generation. A generation leaves the
 * tail (sink_txn_release: the next progress record no longer lists its rows) once the
 * primary's flush position and every standby's are at or past its bound. On an idle server
 * the WAL writer flushes the asynchronous commits but may leave later records (a claim's
 * page pruning, say) in a partial page, below the bound: when the oldest bound waits longer
 * than 3 x wal_writer_delay (and TAIL_FLUSH_MARGIN_MS) with every standby caught up with the
 * primary's flush position, the next statement is a nudge, one transaction committed
 * synchronously (an xid and a flush of everything before it), and the next check sees the
 * flush past the bound.
 *
 * The tail holds at most EOS_TAIL_MAX_ROWS rows: beyond that (a standby that lags, or a slot
 * that nobody uses) the oldest leave the record anyway, counted and logged with the
 * standby's name, since a progress record must stay small. The rows belong to their
 * transaction group's producer session (sink_txn_epoch) whose record lists them, and to the
 * worker session whose statements recorded them: another producer session starts the
 * group's ring anew, another worker session the whole tail; one check serves every group. Each row is let go by the
 * version of its entry in the record, so that a later row given the same id (a sequence set
 * back by a failover) stays listed. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

#define TAIL_CHECK_MS 50
#define TAIL_CHECK_MAX_MS 1000 /* while checks let no row go (a stale slot), they slow down to this */
#define TAIL_FLUSH_MARGIN_MS 200
#define TAIL_FAIL_MAX_MS 10000

/* One statement: the insert position, the lowest standby position (NULL: none known), how
 * many standbys and slots count, how many walsenders the role may not see (without
 * pg_read_all_stats every column but pid is NULL; one that streams through a physical slot
 * counts through the slot), how many report no position yet, the one furthest behind, the
 * flush position and wal_writer_delay (ms). */
static const char tail_sql[] =
    "WITH w AS (SELECT pid, state, flush_lsn, application_name FROM pg_stat_replication "
    "WHERE state IS DISTINCT FROM 'backup' AND pid NOT IN (SELECT active_pid FROM pg_replication_slots "
    "WHERE active_pid IS NOT NULL AND (slot_type = 'logical' OR (state IS NULL AND restart_lsn IS NOT NULL "
    "AND wal_status IS DISTINCT FROM 'lost')))), "
    "s AS (SELECT 'standby ' || coalesce(nullif(application_name, ''), 'pid ' || pid) AS who, "
    "flush_lsn AS lsn, state IS NULL AS hidden FROM w "
    "UNION ALL SELECT 'physical replication slot ' || slot_name, restart_lsn, false FROM pg_replication_slots "
    "WHERE slot_type = 'physical' AND restart_lsn IS NOT NULL AND wal_status IS DISTINCT FROM 'lost') "
    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text, "
    "(SELECT (min(lsn) - '0/0'::pg_lsn)::text FROM s), (SELECT count(*) FROM s), "
    "(SELECT count(*) FROM s WHERE hidden), (SELECT count(*) FROM s WHERE lsn IS NULL AND NOT hidden), "
    "(SELECT who FROM s ORDER BY lsn NULLS FIRST LIMIT 1), "
    "(pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::text, (SELECT setting FROM pg_settings WHERE name = 'wal_writer_delay')";

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_want_kick(w->data);
}

static int interval(const struct eos_tail *t)
{
    return t->interval_ms ? t->interval_ms : TAIL_CHECK_MS;
}

static void arm(struct relay *r, int ms)
{
    struct eos_tail *t = &r->eos_tail;
    if (!t->timer_init) {
        ev_timer_init(&t->timer, timer_cb, 0.0, 0.0);
        t->timer.data = r;
        t->timer_init = 1;
    }
    if (!ev_is_active(&t->timer)) {
        ev_timer_set(&t->timer, (double)ms / 1000.0, 0.0);
        ev_timer_start(r->loop, &t->timer);
    }
}

/* The group's count of kept rows, for its record's cap, and the metric. */
static void count(struct relay *r, int g)
{
    r->m.eos_tail_rows = (int64_t)r->eos_tail.n;
    sink_txn_kept(r->sink, g, r->eos_tail.ring[g].n);
}

/* Lets the group's oldest row go: it leaves the progress records from the next one on. */
static void pop(struct relay *r, int g)
{
    struct eos_tail *t = &r->eos_tail;
    struct eos_ring *q = &t->ring[g];
    sink_txn_release(r->sink, g, q->id[q->head], q->ver[q->head]);
    q->head = (q->head + 1) % EOS_TAIL_MAX_ROWS;
    q->n--;
    t->n--;
}

/* Rows of generation gen or older leave. */
static void release_to(struct relay *r, uint64_t gen)
{
    struct eos_tail *t = &r->eos_tail;
    for (int g = 0; g < eos_groups(r->cfg); g++) {
        struct eos_ring *q = &t->ring[g];
        size_t before = q->n;
        while (q->n && q->gen_of[q->head] <= gen)
            pop(r, g);
        if (q->n != before)
            count(r, g);
    }
}

/* Takes the tail over for the worker session now: another one starts it empty (its rows
 * stay in the records, which a takeover reads). */
static void worker_session(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (r->m.pg_reconnects_total == t->worker)
        return;
    for (int g = 0; g < eos_groups(r->cfg); g++) {
        t->ring[g].head = t->ring[g].n = 0;
        t->ring[g].epoch = 0;
        count(r, g);
    }
    t->n = t->n_seal = 0;
    t->worker = r->m.pg_reconnects_total;
    t->checked = 0;
    t->in_flight = 0;
    t->fails = 0;
    t->interval_ms = TAIL_CHECK_MS;
    r->m.eos_tail_rows = 0;
}

/* The group's ring, taken over for its producer session now (another one starts it empty).
 * 0: the group has no producer session. */
static uint64_t session(struct relay *r, int g)
{
    struct eos_tail *t = &r->eos_tail;
    struct eos_ring *q = &t->ring[g];
    worker_session(r);
    uint64_t epoch = sink_txn_epoch(r->sink, g);
    if (epoch != q->epoch) {
        t->n -= q->n;
        q->head = q->n = 0;
        q->epoch = epoch;
        t->checked = 0; /* a new session's first check goes before its claims */
        count(r, g);
    }
    return epoch;
}

void eos_tail_recorded(struct relay *r, int g, int64_t id)
{
    struct eos_tail *t = &r->eos_tail;
    struct eos_ring *q = &t->ring[g];
    if (!session(r, g))
        return; /* not in a record */
    uint64_t ver = sink_txn_version(r->sink, g, id);
    if (!ver)
        return;
    if (!q->id) {
        q->id = xmalloc(EOS_TAIL_MAX_ROWS * sizeof(*q->id));
        q->ver = xmalloc(EOS_TAIL_MAX_ROWS * sizeof(*q->ver));
        q->gen_of = xmalloc(EOS_TAIL_MAX_ROWS * sizeof(*q->gen_of));
    }
    if (q->n == EOS_TAIL_MAX_ROWS) {
        pop(r, g);
        r->m.eos_tail_unconfirmed_total++;
        long held;
        if (log_limit_due(&t->full_log, 30000, &held))
            log_warn("exactly-once: %d rows recorded in PostgreSQL wait for %s to have their "
                     "records (%" PRIu64 " bytes of WAL behind at the last check); the oldest leave "
                     "the progress record now (%ld more since the last message): a failover to it "
                     "would publish them again (outbox_progress_unconfirmed_total)",
                     EOS_TAIL_MAX_ROWS, t->who[0] ? t->who : "the primary's WAL flush", t->lag, held);
    }
    size_t at = (q->head + q->n) % EOS_TAIL_MAX_ROWS;
    q->id[at] = id;
    q->ver[at] = ver;
    q->gen_of[at] = t->gen;
    q->n++;
    t->n++;
    count(r, g);
    arm(r, interval(t));
}

int eos_tail_due(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (!r->cfg->exactly_once || t->in_flight)
        return 0;
    int any = 0;
    for (int g = 0; g < eos_groups(r->cfg); g++)
        any |= session(r, g) != 0;
    if (!any)
        return 0;
    int64_t now = mono_ms();
    if (now < t->retry_ms)
        return 0;
    if (!t->checked || t->nudge) /* the session's first (before its claims), or a nudge */
        return 1;
    return t->n && now - t->sent_ms >= interval(t);
}

static void seal(struct eos_tail *t, uint64_t gen, uint64_t lsn, int64_t at_ms)
{
    if (t->n_seal == EOS_TAIL_SEALS) /* the next seal bounds the oldest's rows too (later, higher) */
        memmove(&t->seal[0], &t->seal[1], --t->n_seal * sizeof(t->seal[0]));
    t->seal[t->n_seal].gen = gen;
    t->seal[t->n_seal].lsn = lsn;
    t->seal[t->n_seal].at_ms = at_ms;
    t->n_seal++;
}

/* The primary's flush position and every standby's are at or past low: the sealed
 * generations below it go. */
static void release_below(struct relay *r, uint64_t low)
{
    struct eos_tail *t = &r->eos_tail;
    size_t k = 0;
    while (k < t->n_seal && t->seal[k].lsn <= low)
        k++;
    if (!k)
        return;
    release_to(r, t->seal[k - 1].gen);
    t->n_seal -= k;
    memmove(&t->seal[0], &t->seal[k], t->n_seal * sizeof(t->seal[0]));
}

static void check_ok(struct relay *r, PGresult *res)
{
    struct eos_tail *t = &r->eos_tail;
    t->in_flight = 0;
    t->fails = 0;
    worker_session(r);
    if (t->sent_worker != t->worker || PQntuples(res) != 1) {
        if (t->n)
            arm(r, interval(t));
        return; /* another session's rows, or no answer: asked again */
    }
    t->checked = 1;
    uint64_t at = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    int known = !PQgetisnull(res, 0, 1);
    uint64_t low = known ? strtoull(PQgetvalue(res, 0, 1), NULL, 10) : 0;
    long standbys = atol(PQgetvalue(res, 0, 2)), hidden = atol(PQgetvalue(res, 0, 3));
    long unknown = atol(PQgetvalue(res, 0, 4));
    snprintf(t->who, sizeof(t->who), "%s", PQgetisnull(res, 0, 5) ? "" : PQgetvalue(res, 0, 5));
    uint64_t flush = strtoull(PQgetvalue(res, 0, 6), NULL, 10);
    long delay_ms = PQgetisnull(res, 0, 7) ? 0 : atol(PQgetvalue(res, 0, 7)); /* (pg_settings: in ms) */
    size_t before = t->n;
    seal(t, t->sent_gen, at, t->sent_ms);
    long held;
    if (standbys && (hidden || unknown)) { /* (min() passes over them: nothing goes) */
        t->lag = 0;
        if (log_limit_due(&t->hidden_log, 60000, &held))
            log_warn("exactly-once: the WAL position of %s is %s: recorded rows stay in the "
                     "progress record until it is known, up to %d of them", t->who,
                     hidden ? "not visible to the relay's role (grant it pg_read_all_stats, as "
                              "deploy/roles.sql does)" : "not reported yet",
                     EOS_TAIL_MAX_ROWS);
    } else {
        if (!standbys || low > flush)
            low = flush; /* (a standby is never past the primary's flush) */
        int caught_up = low >= flush;
        t->lag = t->n_seal && t->seal[0].lsn > low ? t->seal[0].lsn - low : 0;
        release_below(r, low);
        /* (the oldest seal was sent at seal[0].at_ms, after its rows' commits) */
        if (caught_up && t->n_seal && t->seal[0].lsn > flush &&
            t->seal[0].at_ms <= t->sent_ms - 3 * (delay_ms > 0 ? delay_ms : 200) - TAIL_FLUSH_MARGIN_MS)
            t->nudge = 1;
    }
    if (t->n < before || !before)
        t->interval_ms = TAIL_CHECK_MS;
    else
        t->interval_ms = interval(t) * 2 > TAIL_CHECK_MAX_MS ? TAIL_CHECK_MAX_MS : interval(t) * 2;
    if (t->n)
        arm(r, interval(t));
}

/* The check failed (the statement's error is logged by worker.c): asked again after 1 s,
 * then twice as long each time up to 10 s, so that claims go meanwhile; nothing leaves. */
static void check_fail(struct relay *r, PGresult *res)
{
    (void)res;
    struct eos_tail *t = &r->eos_tail;
    t->in_flight = 0;
    int wait = 1000 << (t->fails < 4 ? t->fails : 4);
    t->fails++;
    t->retry_ms = mono_ms() + (wait < TAIL_FAIL_MAX_MS ? wait : TAIL_FAIL_MAX_MS);
    t->checked = 1; /* claims go */
    long held;
    if (res && log_limit_due(&t->fail_log, 60000, &held)) /* (not a lost connection: a new session) */
        log_warn("exactly-once: the standbys' WAL positions could not be read (%d times in a row); "
                 "recorded rows stay in the progress record meanwhile, up to %d of them",
                 t->fails, EOS_TAIL_MAX_ROWS);
    arm(r, wait);
}

static const struct worker_stmt check_stmt = {
    .what = "reading the standbys' WAL positions", .on_ok = check_ok, .on_fail = check_fail};

/* The nudge: one transaction with an xid, committed synchronously on the primary (its flush
 * covers every record before it); the next check follows at once. */
static const char nudge_sql[] = "SELECT set_config('synchronous_commit', 'local', true), pg_current_xact_id()";

static void nudge_done(struct relay *r, PGresult *res)
{
    (void)res;
    r->eos_tail.in_flight = 0;
    r->eos_tail.sent_ms = 0; /* the check is due */
    relay_want_kick(r);
}

static const struct worker_stmt nudge_stmt = {
    .what = "flushing the WAL for the recorded rows", .on_ok = nudge_done, .on_fail = nudge_done};

void eos_tail_send(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (t->nudge) {
        t->nudge = 0;
        t->in_flight = 1;
        r->m.eos_tail_nudges_total++;
        if (worker_send(r, &nudge_stmt, nudge_sql, 0, NULL) != 0)
            t->in_flight = 0;
        return;
    }
    t->sent_ms = mono_ms();
    worker_session(r);
    t->sent_worker = t->worker;
    t->sent_gen = t->gen++; /* rows recorded from now on wait for the next check */
    t->in_flight = 1;
    if (worker_send(r, &check_stmt, tail_sql, 0, NULL) != 0)
        t->in_flight = 0;
}

void eos_tail_destroy(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (t->timer_init)
        ev_timer_stop(r->loop, &t->timer);
    for (int g = 0; g < OUTBOX_LEASE_PARTITIONS; g++) {
        struct eos_ring *q = &t->ring[g];
        free(q->id);
        free(q->ver);
        free(q->gen_of);
        q->id = NULL;
        q->ver = NULL;
        q->gen_of = NULL;
        q->n = 0;
    }
    t->n = 0;
}
