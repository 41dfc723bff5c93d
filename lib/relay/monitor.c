/* Monitor connection: backlog gauges, long transactions, duplicates estimate, retention. */
#include "relay/monitor.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "pg/pgconn.h"
#include "core/util.h"

#define STATS_INTERVAL_S 5.0
/* The backlog statement reads the pending index of every partition: while a long
 * transaction keeps its dead head from vacuum a read from the bottom grows slow, so each
 * kind (from the bounds, from the bottom) runs at most once per STATS_COST_SHARE times its
 * last duration (the long-transaction checks after it keep their pace). */
#define STATS_COST_SHARE 10
/* The backlog statement reads each partition from a bound (monitor_heads_bounds), and from
 * the bottom once a minute at most (and after anything that may put a row below a bound:
 * the first statement of a session, a reset of the claim floors), for rows set back to
 * PENDING by hand. */
#define STATS_BOTTOM_MS 60000
#define PURGE_INTERVAL_S 10.0
#define PURGE_WINDOW 5000
/* A retention cycle reads the table in id order from where the last one stopped: the first
 * row it left (PENDING, too young, parked), below which it deleted every row it could see.
 * Every PURGE_BOTTOM_EVERY cycles (5 minutes) one starts from the bottom instead, for the
 * rows that committed below that point after a cycle passed it (late commits, sent later).
 * From the bottom every time, a cycle walked every index entry of the rows deleted since the
 * oldest snapshot: under a REPEATABLE READ reader open for minutes in delete mode, 7-8 s of
 * every 10 s on the monitor session (bench/longtx.sh --on-sent delete, log_min_duration). */
#define PURGE_BOTTOM_EVERY 30

enum monitor_step { STEP_IDLE, STEP_DUPLICATES, STEP_STATS, STEP_LONG_TX, STEP_XMIN_HOLDER, STEP_ORPHANS, STEP_PARTITIONS, STEP_PURGE };

struct monitor {
    struct ev_loop *loop;
    const struct config *cfg;
    const struct outbox_sql *sql;
    struct metrics *m;
    struct pgconn *conn;
    ev_timer stats_timer;
    ev_timer purge_timer;
    enum monitor_step step;
    int duplicates_done;
    int stats_due;
    int64_t stats_sent_ms, stats_next_ms; /* monotonic */
    /* the backlog statement's bounds (non-keep layouts): each partition's first pending row
     * at the last statement (0: none), whether they are known (a statement answered in this
     * session), the proof when the statement in flight was sent and when the last one
     * answered was, and when the next statement from the bottom may and must run (it is
     * owed while the floors' epoch differs from the last bottom's) */
    int64_t heads[OUTBOX_LEASE_PARTITIONS];
    int heads_known;
    int stats_bottom; /* the statement in flight reads from the bottom */
    int64_t stats_sent_proven, heads_proven;
    uint32_t stats_sent_epoch, bottom_epoch; /* the floors' epoch at its send, at the last bottom's */
    int64_t bottom_min_ms, bottom_due_ms; /* STATS_COST_SHARE and STATS_BOTTOM_MS after it */
    int stats_bottom_ms;                  /* STATS_BOTTOM_MS, or a test hook's */
    int64_t (*proof)(void *ctx, uint32_t *epoch);
    void *proof_ctx;
    int purge_due;
    int partitions_due; /* keep mode: the partitions' turn comes before the purge */
    int orphans_due;    /* keep mode: parked entries of rows that are gone, before the partitions */
    int partitioned;    /* keep mode: the outbox is partitioned by id (its last answer) */
    int ahead_warned;
    int partitions_failed_logged;
    long long purge_after_id;
    long long purge_cycle_deleted;
    long long purge_first_left; /* the first row the cycle in progress left, or 0 */
    long long purge_resume;     /* where the next cycle starts unless from the bottom */
    int purge_cycles;           /* cycles since the last one from the bottom */
    int purge_bottom_every;     /* PURGE_BOTTOM_EVERY, or a test hook's */
    long long purge_kept_high; /* keep mode: the highest unrecorded row retention kept and named */
    int long_tx_reported_pid;
    char long_tx_reported_xid[24];
    /* the oldest xmin holder seen (kind, name, xmin) and since when it holds that xmin */
    char holder[160];
    ev_tstamp holder_since;
    int holder_reported;
};

static void next(struct monitor *mon);
static void long_tx_done(void *ctx, PGresult *res);
static void xmin_holder_done(void *ctx, PGresult *res);

static void failed(struct monitor *mon, const char *what, PGresult *res)
{
    if (!res)
        return;
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    log_warn("pg monitor: %s failed: %s", what, line);
}

static double num(PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? 0 : strtod(PQgetvalue(res, 0, col), NULL);
}

static void duplicates_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    if (pgconn_result_ok(res)) {
        long long n = (long long)num(res, 0);
        mon->duplicates_done = 1;
        mon->m->possible_duplicates_total += (uint64_t)n;
        if (n > 0)
            log_info("monitor: %lld PENDING rows are at or below the highest id a relay had "
                     "claimed: they may be published a second time", n);
    } else {
        failed(mon, "duplicates estimate", res);
        mon->duplicates_done = 1;
    }
    PQclear(res);
    next(mon);
}

static void send_long_tx(struct monitor *mon)
{
    mon->step = STEP_LONG_TX;
    char secs[16];
    snprintf(secs, sizeof(secs), "%d", mon->cfg->long_tx_seconds);
    const char *params[1] = {secs};
    if (pgconn_query_prepared(mon->conn, mon->sql->long_tx, 1, params, long_tx_done, mon) != 0)
        mon->step = STEP_IDLE;
}

static void stats_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    int64_t now = mono_ms();
    int64_t paced = now + (now - mon->stats_sent_ms) * (STATS_COST_SHARE - 1);
    if (mon->stats_bottom) { /* its cost paces the next from the bottom, not the others */
        mon->bottom_min_ms = paced;
        mon->bottom_due_ms = paced > now + mon->stats_bottom_ms ? paced : now + mon->stats_bottom_ms;
    } else {
        mon->stats_next_ms = paced;
    }
    if (pgconn_result_ok(res) && PQntuples(res) == 1) {
        struct metrics *m = mon->m;
        long long capped = (long long)num(res, 0);
        long long min_pending = (long long)num(res, 1);
        long long max_id = (long long)num(res, 3);
        m->pending_rows_exact = capped < MONITOR_COUNT_CAP;
        m->pending_rows = m->pending_rows_exact ? capped : max_id - min_pending + 1;
        m->oldest_pending_age_seconds = num(res, 2);
        m->failed_rows = (int64_t)num(res, 4);
        m->notify_queue_usage = num(res, 5);
        /* the next statement's bounds; on a failure the last ones still hold */
        if (!mon->cfg->keep && PQnfields(res) > 6 && !PQgetisnull(res, 0, 6) &&
            monitor_parse_heads(PQgetvalue(res, 0, 6), mon->heads) == 0) {
            mon->heads_known = 1;
            mon->heads_proven = mon->stats_sent_proven;
            if (mon->stats_bottom)
                mon->bottom_epoch = mon->stats_sent_epoch;
        }
    } else {
        failed(mon, "backlog statistics", res);
    }
    PQclear(res);
    send_long_tx(mon);
}

/* The backlog statement. Other than in keep mode each partition is read from its bound
 * (monitor_heads_bounds), or from the bottom: the first in a session, then once a minute
 * at most, sooner once the claim floors' epoch moved (a reset, a new worker session's
 * proof; a requeue among the reasons, whose rows may lie below the bounds), never more
 * often than its cost share allows; while it waits for that, the bounds serve if they can. */
static void send_stats(struct monitor *mon)
{
    mon->stats_sent_ms = mono_ms();
    char cap[16];
    snprintf(cap, sizeof(cap), "%d", MONITOR_COUNT_CAP);
    struct strbuf bounds;
    strbuf_init(&bounds);
    if (!mon->cfg->keep) {
        int64_t now = mon->stats_sent_ms;
        uint32_t epoch = 0;
        mon->stats_sent_proven = mon->proof ? mon->proof(mon->proof_ctx, &epoch) : 0;
        mon->stats_sent_epoch = epoch;
        int bounded = mon->heads_known && mon->heads_proven > 0;
        mon->stats_bottom = !bounded || epoch != mon->bottom_epoch || now >= mon->bottom_due_ms;
        if (mon->stats_bottom && now < mon->bottom_min_ms) {
            if (!bounded) { /* nothing to bound a read with, and the bottom's turn not come */
                strbuf_destroy(&bounds);
                send_long_tx(mon);
                return;
            }
            mon->stats_bottom = 0;
        }
        int64_t b[OUTBOX_LEASE_PARTITIONS];
        monitor_heads_bounds(mon->heads, mon->heads_proven, mon->stats_bottom, b);
        pgarray_open(&bounds);
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
            pgarray_int(&bounds, b[p]);
        pgarray_close(&bounds);
    }
    const char *params[2] = {cap, bounds.buf};
    int n = mon->cfg->keep ? 1 : 2;
    if (pgconn_query_prepared(mon->conn, mon->sql->stats, n, params, stats_done, mon) == 0)
        mon->step = STEP_STATS;
    strbuf_destroy(&bounds);
}

static void long_tx_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    struct metrics *m = mon->m;
    mon->step = STEP_IDLE;
    if (pgconn_result_ok(res) && PQntuples(res) == 1) {
        m->long_tx_pid = atoi(PQgetvalue(res, 0, 0));
        snprintf(m->long_tx_xid, sizeof(m->long_tx_xid), "%s", PQgetvalue(res, 0, 1));
        m->long_tx_age_seconds = num(res, 2);
        snprintf(m->long_tx_application, sizeof(m->long_tx_application), "%s", PQgetvalue(res, 0, 3));
        snprintf(m->long_tx_user, sizeof(m->long_tx_user), "%s", PQgetvalue(res, 0, 4));
        if (m->long_tx_pid != mon->long_tx_reported_pid ||
            strcmp(m->long_tx_xid, mon->long_tx_reported_xid) != 0) {
            log_warn("long-running transaction: pid=%d xid=%s age=%.0fs application_name='%s' "
                     "user='%s' query_start=%s: it holds back vacuum (and the rows it "
                     "locks); find it with SELECT * FROM pg_stat_activity WHERE pid = %d",
                     m->long_tx_pid, m->long_tx_xid[0] ? m->long_tx_xid : "none",
                     m->long_tx_age_seconds, m->long_tx_application, m->long_tx_user,
                     PQgetvalue(res, 0, 5)[0] ? PQgetvalue(res, 0, 5) : "-", m->long_tx_pid);
            mon->long_tx_reported_pid = m->long_tx_pid;
            snprintf(mon->long_tx_reported_xid, sizeof(mon->long_tx_reported_xid), "%s", m->long_tx_xid);
        }
    } else if (pgconn_result_ok(res)) {
        if (mon->long_tx_reported_pid || mon->long_tx_reported_xid[0])
            log_info("long-running transaction pid=%d ended", mon->long_tx_reported_pid);
        m->long_tx_pid = 0;
        m->long_tx_xid[0] = m->long_tx_application[0] = m->long_tx_user[0] = '\0';
        m->long_tx_age_seconds = 0;
        mon->long_tx_reported_pid = 0;
        mon->long_tx_reported_xid[0] = '\0';
    } else {
        failed(mon, "long transaction check", res);
    }
    PQclear(res);
    mon->step = STEP_XMIN_HOLDER;
    if (pgconn_query_prepared(mon->conn, mon->sql->xmin_holder, 0, NULL, xmin_holder_done, mon) != 0)
        mon->step = STEP_IDLE;
}

static void holder_clear(struct monitor *mon)
{
    if (mon->holder_reported)
        log_info("the xmin horizon is no longer held back by %s", mon->holder);
    mon->holder[0] = '\0';
    mon->holder_reported = 0;
    mon->m->xmin_holder_seconds = 0;
    mon->m->xmin_holder_kind[0] = mon->m->xmin_holder_name[0] = '\0';
}

/* The same holder with the same xmin on every check since holder_since: reported once it
 * held it longer than the long-transaction threshold. */
static void xmin_holder_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    struct metrics *m = mon->m;
    mon->step = STEP_IDLE;
    if (pgconn_result_ok(res) && PQntuples(res) == 1) {
        char holder[160];
        snprintf(holder, sizeof(holder), "%s '%s' (xmin %s)", PQgetvalue(res, 0, 0),
                 PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
        ev_tstamp now = ev_now(mon->loop);
        if (strcmp(holder, mon->holder) != 0) {
            holder_clear(mon);
            snprintf(mon->holder, sizeof(mon->holder), "%s", holder);
            mon->holder_since = now;
        }
        if (now - mon->holder_since >= mon->cfg->long_tx_seconds) {
            m->xmin_holder_seconds = now - mon->holder_since;
            snprintf(m->xmin_holder_kind, sizeof(m->xmin_holder_kind), "%s", PQgetvalue(res, 0, 0));
            snprintf(m->xmin_holder_name, sizeof(m->xmin_holder_name), "%s", PQgetvalue(res, 0, 1));
            if (!mon->holder_reported)
                log_warn("the xmin horizon is held back by %s, pid=%s, for at least %.0fs and "
                         "%s transactions: it holds back vacuum as a long transaction would; "
                         "see pg_replication_slots and pg_stat_replication (hot_standby_feedback "
                         "with a long query on the standby, or a slot nobody uses)",
                         mon->holder, PQgetvalue(res, 0, 3), m->xmin_holder_seconds,
                         PQgetvalue(res, 0, 4));
            mon->holder_reported = 1;
        }
    } else if (pgconn_result_ok(res)) {
        holder_clear(mon);
    } else {
        failed(mon, "xmin horizon check", res);
    }
    PQclear(res);
    next(mon);
}

static void purge_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    if (!pgconn_result_ok(res)) {
        failed(mon, "retention purge", res);
        PQclear(res);
        mon->purge_after_id = mon->purge_resume; /* the next cycle starts where this one did */
        mon->purge_first_left = 0;
        mon->purge_cycle_deleted = 0;
        next(mon);
        return;
    }
    long long deleted = (long long)num(res, 0);
    long long max_seen = (long long)num(res, 1);
    long long live = (long long)num(res, 2);
    long long first_left = (long long)num(res, 3);
    if (first_left > 0 && mon->purge_first_left == 0)
        mon->purge_first_left = first_left;
    /* keep mode: rows W passed that no record names, kept; counted and named once each (a
     * later cycle finds them again until the audit has published them) */
    if (PQnfields(res) > 6 && num(res, 4) > 0 && (long long)num(res, 6) > mon->purge_kept_high) {
        mon->m->keep_gaps_total += (uint64_t)num(res, 4);
        log_error("keep: retention kept %lld rows at or below their watermark that were never recorded as "
                  "published (ids %s%s); the watermark's audit publishes them. A row inserted with an id below "
                  "the watermark (OVERRIDING SYSTEM VALUE, a restore, a rewound sequence) or a broken proof; see "
                  "docs/OUTBOX-TABLE.md, Keep", (long long)num(res, 4), PQgetvalue(res, 0, 5),
                  num(res, 4) > 20 ? ", ..." : "");
        mon->purge_kept_high = (long long)num(res, 6);
    }
    PQclear(res);
    mon->m->retention_deleted_total += (uint64_t)deleted;
    mon->purge_cycle_deleted += deleted;
    if (max_seen == 0 || live > 0) {
        /* Reached rows still PENDING or too young: this cycle is done. */
        if (mon->purge_cycle_deleted > 0)
            log_info("retention: deleted %lld SENT rows older than %s", mon->purge_cycle_deleted,
                     mon->cfg->retention);
        /* below the first row it left (or the last it read, if it left none) this cycle
         * deleted every row it saw */
        long long upto = mon->purge_first_left > 0 ? mon->purge_first_left - 1
                         : max_seen > 0                ? max_seen
                                                       : mon->purge_after_id;
        if (upto > mon->purge_resume)
            mon->purge_resume = upto;
        if (++mon->purge_cycles >= mon->purge_bottom_every) {
            mon->purge_cycles = 0;
            mon->purge_resume = 0;
        }
        mon->purge_after_id = mon->purge_resume;
        mon->purge_first_left = 0;
        mon->purge_cycle_deleted = 0;
    } else {
        mon->purge_after_id = max_seen;
        mon->purge_due = 1; /* keep going, one small batch at a time */
    }
    next(mon);
}

/* Keep mode: partitions kept ahead of the identity and dropped by retention (schema 9's
 * function, as the table's owner); a table that is not partitioned gets the row purge. */
static void partitions_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    if (!pgconn_result_ok(res) || PQntuples(res) != 1) {
        /* (the role may lack EXECUTE on the function: then the row purge, which works on
         * either kind of table, keeps retention going) */
        if (!mon->partitions_failed_logged || mon->partitioned)
            failed(mon, "partition maintenance (the relay's role needs EXECUTE on the table's "
                   "_partitions function: deploy/roles.sql)", res);
        mon->partitions_failed_logged = 1;
        PQclear(res);
        mon->purge_due = mon->cfg->retention_seconds > 0;
        next(mon);
        return;
    }
    mon->partitioned = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    if (!mon->partitioned) {
        mon->m->partitions_ahead = -1;
        PQclear(res);
        mon->purge_due = mon->cfg->retention_seconds > 0;
        next(mon);
        return;
    }
    long long created = (long long)num(res, 1), dropped = (long long)num(res, 2),
              rows = (long long)num(res, 3), ahead = (long long)num(res, 4);
    const char *busy = PQgetisnull(res, 0, 5) ? NULL : PQgetvalue(res, 0, 5);
    if (!PQgetisnull(res, 0, 6)) {
        mon->m->partitions_lost_total++;
        log_error("partitions: the partitions of %s for ids %s are gone, and the relay did not drop them "
                  "(dropped by hand?): their rows that were not yet published are lost; the relay goes on "
                  "with the rest", mon->cfg->table,
                  PQgetvalue(res, 0, 6));
    }
    mon->m->partitions_created_total += (uint64_t)created;
    mon->m->partitions_dropped_total += (uint64_t)dropped;
    mon->m->partitions_ahead = ahead;
    if (created > 0)
        log_info("partitions: made %lld partition%s ahead of the identity (%lld ahead)", created,
                 created == 1 ? "" : "s", ahead);
    if (dropped > 0)
        log_info("retention: dropped %lld partition%s (about %lld rows, every one published, older than %s)",
                 dropped, dropped == 1 ? "" : "s", rows, mon->cfg->retention);
    if (busy)
        log_warn("partitions: %s waited too long for its lock (a transaction holds the outbox); tried "
                 "again in %.0f s", busy, PURGE_INTERVAL_S);
    if (ahead < 2 && !mon->ahead_warned)
        log_error("partitions: only %lld partition%s ahead of the identity of %s: writers fail once their "
                  "ids find none (see the log above for why none was made)",
                  ahead, ahead == 1 ? " is" : "s are", mon->cfg->table);
    mon->ahead_warned = ahead < 2;
    PQclear(res);
    next(mon);
}

static void orphans_done(void *ctx, PGresult *res)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    if (!pgconn_result_ok(res) || PQntuples(res) != 1)
        failed(mon, "parked entries check", res);
    else if (num(res, 0) > 0)
        log_warn("keep: removed %.0f parked entr%s for rows that are not in %s (deleted or dropped by hand; "
                 "nothing is left to publish): ids %s%s", num(res, 0), num(res, 0) == 1 ? "y" : "ies",
                 mon->cfg->table, PQgetvalue(res, 0, 1), num(res, 0) > 20 ? ", ..." : "");
    PQclear(res);
    mon->partitions_due = 1;
    next(mon);
}

/* Runs the next due step; one statement at a time on the monitor connection. */
static void next(struct monitor *mon)
{
    if (mon->step != STEP_IDLE || !pgconn_idle(mon->conn))
        return;
    if (!mon->duplicates_done) {
        if (pgconn_query_prepared(mon->conn, mon->sql->duplicates, 0, NULL, duplicates_done, mon) == 0)
            mon->step = STEP_DUPLICATES;
        return;
    }
    if (mon->stats_due) {
        mon->stats_due = 0;
        if (mono_ms() < mon->stats_next_ms) { /* the backlog waits; the checks do not */
            send_long_tx(mon);
            return;
        }
        send_stats(mon);
        return;
    }
    if (mon->orphans_due && mon->sql->orphans) {
        mon->orphans_due = 0;
        if (pgconn_query_prepared(mon->conn, mon->sql->orphans, 0, NULL, orphans_done, mon) == 0)
            mon->step = STEP_ORPHANS;
        return;
    }
    if (mon->partitions_due && mon->sql->partitions) {
        mon->partitions_due = 0;
        char secs[16];
        snprintf(secs, sizeof(secs), "%d", mon->cfg->retention_seconds);
        /* no drop while keep mode's premises fail their check (a rewound sequence): a
         * record may then name an id a new row got again */
        const char *params[1] = {mon->cfg->retention_seconds > 0 && !mon->m->keep_blocked ? secs : NULL};
        if (pgconn_query_prepared(mon->conn, mon->sql->partitions, 1, params, partitions_done, mon) == 0)
            mon->step = STEP_PARTITIONS;
        return;
    }
    if (mon->purge_due && mon->cfg->retention_seconds > 0 && !mon->m->keep_blocked) {
        mon->purge_due = 0;
        char after[24], window[16], secs[16];
        snprintf(after, sizeof(after), "%lld", mon->purge_after_id);
        snprintf(window, sizeof(window), "%d", PURGE_WINDOW);
        snprintf(secs, sizeof(secs), "%d", mon->cfg->retention_seconds);
        const char *params[3] = {after, window, secs};
        if (pgconn_query_prepared(mon->conn, mon->sql->purge, 3, params, purge_done, mon) == 0)
            mon->step = STEP_PURGE;
    }
}

static void stats_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct monitor *mon = w->data;
    mon->stats_due = 1;
    next(mon);
}

static void purge_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct monitor *mon = w->data;
    if (mon->sql->partitions)
        mon->orphans_due = 1; /* then the partitions, then the purge if not partitioned */
    else
        mon->purge_due = 1;
    next(mon);
}

static void monitor_ready(void *ctx)
{
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
    mon->heads_known = 0; /* perhaps another server: the next backlog statement from the bottom */
    mon->stats_due = 1;
    next(mon);
}

static void monitor_lost(void *ctx, const char *why)
{
    (void)why;
    struct monitor *mon = ctx;
    mon->step = STEP_IDLE;
}

struct monitor *monitor_new(struct ev_loop *loop, const struct config *cfg,
                            const struct outbox_sql *sql, struct metrics *m)
{
    struct monitor *mon = xcalloc(1, sizeof(*mon));
    mon->loop = loop;
    mon->cfg = cfg;
    mon->sql = sql;
    mon->m = m;
    mon->purge_bottom_every = PURGE_BOTTOM_EVERY;
    mon->stats_bottom_ms = STATS_BOTTOM_MS;
#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("OUTBOX_TESTHOOK_PURGE_BOTTOM_EVERY");
    if (hook && atoi(hook) > 0)
        mon->purge_bottom_every = atoi(hook);
    hook = getenv("OUTBOX_TESTHOOK_STATS_BOTTOM_MS");
    if (hook && atoi(hook) > 0)
        mon->stats_bottom_ms = atoi(hook);
#endif
    /* JIT off, as on the worker session: the backlog's statement in keep mode (a lateral over
     * the 64 lease partitions) costs more than jit_above_cost, and PostgreSQL spent 87 ms of a
     * 552 ms run compiling it (auto_explain, bench/longtx.sh in keep mode) */
    char setup[192];
    snprintf(setup, sizeof(setup), "SET statement_timeout = %d; SET jit = off; SET application_name = 'outbox-relay monitor'",
             cfg->statement_timeout_ms);
    static const struct pgconn_callbacks cb = {monitor_ready, monitor_lost, NULL};
    mon->conn = pgconn_new(loop, "monitor", cfg->pg_dsn, setup, cfg->reconnect_max_ms, &cb, mon);
    if (cfg->pg_dsn_file)
        pgconn_set_dsn_file(mon->conn, cfg->pg_dsn_file, "OUTBOX_PG_DSN_FILE");
    ev_timer_init(&mon->stats_timer, stats_timer_cb, STATS_INTERVAL_S, STATS_INTERVAL_S);
    mon->stats_timer.data = mon;
    ev_timer_init(&mon->purge_timer, purge_timer_cb, 1.0, PURGE_INTERVAL_S);
    mon->purge_timer.data = mon;
    return mon;
}

void monitor_set_proof(struct monitor *mon, int64_t (*proof)(void *ctx, uint32_t *epoch), void *ctx)
{
    mon->proof = proof;
    mon->proof_ctx = ctx;
}

void monitor_start(struct monitor *mon)
{
    pgconn_start(mon->conn);
    ev_timer_start(mon->loop, &mon->stats_timer);
    if (mon->cfg->retention_seconds > 0 || mon->sql->partitions)
        ev_timer_start(mon->loop, &mon->purge_timer);
}

void monitor_stop(struct monitor *mon)
{
    ev_timer_stop(mon->loop, &mon->stats_timer);
    ev_timer_stop(mon->loop, &mon->purge_timer);
    pgconn_stop(mon->conn);
}

int monitor_connected(const struct monitor *mon)
{
    return pgconn_connected(mon->conn);
}

void monitor_free(struct monitor *mon)
{
    if (!mon)
        return;
    monitor_stop(mon);
    pgconn_free(mon->conn);
    free(mon);
}
