/* Exactly-once: rows recorded in PostgreSQL stay in the progress record until every standby
 * has their record (OUTBOX_EXACTLY_ONCE). After an asynchronous failover the promoted
 * standby may lack the last marks of the old primary: those rows are PENDING again there,
 * and a takeover that did not find them in the progress record would publish them again.
 *
 * A row whose record committed joins the tail with the current generation. Every
 * TAIL_CHECK_MS while rows wait (slowing down to TAIL_CHECK_MAX_MS while no row can go), the
 * worker session asks the server for its WAL insert
 * position and for the lowest position a standby has flushed (pg_stat_replication's
 * walsenders and every physical replication slot, so that a standby cut off from the
 * primary still counts). The insert position, read after the rows' records committed,
 * bounds their commit records: it seals their generation. A generation whose bound is at
 * or below every standby's position leaves the tail (sink_txn_recorded: the next progress
 * record no longer lists its rows). With no standby and no slot, rows leave at once, and
 * the server is asked again each second while rows are recorded.
 *
 * The tail holds at most TAIL_MAX_ROWS rows: beyond that (a standby that lags, or a slot
 * that nobody uses) the oldest leave the record anyway, counted and logged with the
 * standby's name, since a progress record must stay small. The rows belong to the producer
 * session (sink_txn_epoch) whose committed list holds them: a new session starts a new
 * tail. */
#include <inttypes.h>
#include <stdlib.h>

#include "core/log.h"
#include "relay/relay_int.h"

#define TAIL_CHECK_MS 50
#define TAIL_CHECK_MAX_MS 1000 /* while checks let no row go (a stale slot), they slow down to this */
#define TAIL_NONE_CHECK_MS 1000

/* One statement, read on every check: the insert position, the lowest standby position
 * (NULL: none, or one not visible), how many standbys and slots there are, how many of them
 * show no position (a walsender's positions are hidden without pg_read_all_stats), and the
 * one furthest behind. */
static const char tail_sql[] =
    "WITH s AS (SELECT 'standby ' || coalesce(nullif(application_name, ''), 'pid ' || pid) AS who, "
    "flush_lsn AS lsn FROM pg_stat_replication "
    "UNION ALL SELECT 'physical replication slot ' || slot_name, restart_lsn FROM pg_replication_slots "
    "WHERE slot_type = 'physical' AND restart_lsn IS NOT NULL AND wal_status IS DISTINCT FROM 'lost') "
    "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text, "
    "(SELECT (min(lsn) - '0/0'::pg_lsn)::text FROM s), (SELECT count(*) FROM s), "
    "(SELECT count(*) FROM s WHERE lsn IS NULL), "
    "(SELECT who FROM s ORDER BY lsn NULLS FIRST LIMIT 1)";

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_want_kick(w->data);
}

static void arm(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (!t->timer_init) {
        ev_timer_init(&t->timer, timer_cb, 0.0, 0.0);
        t->timer.data = r;
        t->timer_init = 1;
    }
    if (!ev_is_active(&t->timer)) {
        ev_timer_set(&t->timer, (double)(t->interval_ms ? t->interval_ms : TAIL_CHECK_MS) / 1000.0, 0.0);
        ev_timer_start(r->loop, &t->timer);
    }
}

static void tail_clear(struct eos_tail *t)
{
    t->head = t->n = 0;
    t->n_seal = 0;
}

/* Lets the oldest row go: it leaves the progress records from the next one on. */
static void pop(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    sink_txn_recorded(r->sink, t->id[t->head]);
    t->head = (t->head + 1) % EOS_TAIL_MAX_ROWS;
    t->n--;
}

/* Rows of generation gen or older leave. */
static void release_to(struct relay *r, uint64_t gen)
{
    struct eos_tail *t = &r->eos_tail;
    while (t->n && t->gen_of[t->head] <= gen)
        pop(r);
}

/* Takes the tail over for the producer session now (a new one starts empty). 0: none. */
static uint64_t session(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    uint64_t epoch = sink_txn_epoch(r->sink);
    if (epoch != t->epoch) {
        tail_clear(t);
        t->epoch = epoch;
        t->none = 0; /* perhaps another server: asked again before a row goes at once */
        t->interval_ms = TAIL_CHECK_MS;
        r->m.eos_tail_rows = 0;
    }
    return epoch;
}

void eos_tail_recorded(struct relay *r, int64_t id)
{
    struct eos_tail *t = &r->eos_tail;
    if (!session(r))
        return; /* not in a committed list */
    t->recorded_since_check = 1;
    if (t->none) { /* no standby and no slot at the last check (within TAIL_NONE_CHECK_MS) */
        sink_txn_recorded(r->sink, id);
        return;
    }
    if (!t->id) {
        t->id = xmalloc(EOS_TAIL_MAX_ROWS * sizeof(*t->id));
        t->gen_of = xmalloc(EOS_TAIL_MAX_ROWS * sizeof(*t->gen_of));
    }
    if (t->n == EOS_TAIL_MAX_ROWS) {
        pop(r);
        r->m.eos_tail_unconfirmed_total++;
        long held;
        if (log_limit_due(&t->full_log, 30000, &held))
            log_warn("exactly-once: %d rows recorded in PostgreSQL wait for %s to have their "
                     "records (%" PRIu64 " bytes of WAL behind at the last check); the oldest leave "
                     "the progress record now (%ld more since the last message): a failover to it "
                     "would publish them again (outbox_progress_unconfirmed_total)",
                     EOS_TAIL_MAX_ROWS, t->who[0] ? t->who : "a standby", t->lag, held);
    }
    size_t at = (t->head + t->n) % EOS_TAIL_MAX_ROWS;
    t->id[at] = id;
    t->gen_of[at] = t->gen;
    t->n++;
    r->m.eos_tail_rows = (int64_t)t->n;
    arm(r);
}

int eos_tail_due(const struct relay *r)
{
    const struct eos_tail *t = &r->eos_tail;
    if (!r->cfg->exactly_once || t->in_flight)
        return 0;
    int64_t now = mono_ms();
    if (t->n && t->epoch == sink_txn_epoch(r->sink))
        return now - t->sent_ms >= (t->interval_ms ? t->interval_ms : TAIL_CHECK_MS);
    return t->recorded_since_check && now - t->sent_ms >= TAIL_NONE_CHECK_MS;
}

static void seal(struct eos_tail *t, uint64_t gen, uint64_t lsn)
{
    if (t->n_seal == EOS_TAIL_SEALS) { /* the next seal bounds the oldest's rows too (later, higher) */
        for (size_t i = 1; i < t->n_seal; i++)
            t->seal[i - 1] = t->seal[i];
        t->n_seal--;
    }
    t->seal[t->n_seal].gen = gen;
    t->seal[t->n_seal].lsn = lsn;
    t->n_seal++;
}

static void check_ok(struct relay *r, PGresult *res)
{
    struct eos_tail *t = &r->eos_tail;
    t->in_flight = 0;
    if (t->sent_epoch != t->epoch || t->sent_epoch != sink_txn_epoch(r->sink) || PQntuples(res) != 1)
        return; /* another producer session's rows, or no answer: asked again */
    uint64_t at = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    int none_known = PQgetisnull(res, 0, 1);
    uint64_t low = none_known ? 0 : strtoull(PQgetvalue(res, 0, 1), NULL, 10);
    long standbys = atol(PQgetvalue(res, 0, 2)), hidden = atol(PQgetvalue(res, 0, 3));
    snprintf(t->who, sizeof(t->who), "%s", PQgetisnull(res, 0, 4) ? "" : PQgetvalue(res, 0, 4));
    size_t before = t->n;
    t->none = standbys == 0;
    if (standbys == 0) {
        t->lag = 0;
        release_to(r, t->sent_gen);
        t->n_seal = 0;
    } else {
        seal(t, t->sent_gen, at);
        t->lag = !hidden && at > low ? at - low : 0;
        long held;
        if (hidden) {
            if (log_limit_due(&t->hidden_log, 60000, &held))
                log_warn("exactly-once: the WAL position of %s is not visible to the relay's role "
                         "(grant it pg_read_all_stats, as deploy/roles.sql does): recorded rows stay "
                         "in the progress record, up to %d of them", t->who, EOS_TAIL_MAX_ROWS);
        } else {
            size_t k = 0;
            while (k < t->n_seal && t->seal[k].lsn <= low)
                k++;
            if (k) {
                release_to(r, t->seal[k - 1].gen);
                for (size_t i = k; i < t->n_seal; i++)
                    t->seal[i - k] = t->seal[i];
                t->n_seal -= k;
            }
        }
    }
    r->m.eos_tail_rows = (int64_t)t->n;
    if (t->n < before || !before || !t->interval_ms)
        t->interval_ms = TAIL_CHECK_MS;
    else
        t->interval_ms = t->interval_ms * 2 > TAIL_CHECK_MAX_MS ? TAIL_CHECK_MAX_MS : t->interval_ms * 2;
    if (t->n)
        arm(r);
}

static void check_fail(struct relay *r, PGresult *res)
{
    (void)res;
    r->eos_tail.in_flight = 0; /* asked again: nothing leaves meanwhile */
}

static const struct worker_stmt check_stmt = {
    .what = "reading the standbys' WAL positions", .on_ok = check_ok, .on_fail = check_fail};

void eos_tail_send(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    session(r);
    t->sent_ms = mono_ms();
    t->sent_epoch = t->epoch;
    t->sent_gen = t->gen++; /* rows recorded from now on wait for the next check */
    t->recorded_since_check = 0;
    t->in_flight = 1;
    if (worker_send(r, &check_stmt, tail_sql, 0, NULL) != 0)
        t->in_flight = 0;
}

void eos_tail_destroy(struct relay *r)
{
    struct eos_tail *t = &r->eos_tail;
    if (t->timer_init)
        ev_timer_stop(r->loop, &t->timer);
    free(t->id);
    free(t->gen_of);
    t->id = NULL;
    t->gen_of = NULL;
    tail_clear(t);
}
