/* The relay loop: claim -> produce -> delivery reports -> mark SENT, with the in-flight
 * window, adaptive poll and doorbell, resets after failed deliveries, poison rows (isolate,
 * count attempts, park), paused topics, stall diagnosis, metrics publishing, and the
 * shutdown state machine. */
#include "relay.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backoff.h"
#include "http.h"
#include "log.h"
#include "message.h"
#include "monitor.h"
#include "outbox.h"
#include "pgconn.h"
#include "schema.h"
#include "sink.h"
#include "util.h"

#ifndef OUTBOX_VERSION
#define OUTBOX_VERSION "dev"
#endif

#define MIN_POLL_DELAY_MS 5
#define MARK_MAX_IDS 10000
#define LOG_INTERVAL_S 10.0
#define PUBLISH_INTERVAL_S 0.5
#define STALL_AFTER_MS 30000
#define MAX_PAUSED 16

enum row_state { ROW_QUEUED, ROW_PRODUCED, ROW_ACKED, ROW_MARKING, ROW_FAILED, ROW_PARKING, ROW_STATES };

/* A claimed row not yet marked: the in-flight window, kept sorted by id. */
struct inflight_row {
    int64_t id;
    int64_t created_ms;
    int attempts;
    int partition; /* lease partition */
    enum row_state state;
    rd_kafka_resp_err_t err;   /* delivery error while ROW_FAILED */
    enum failure_reason fail;
    int maybe_persisted;       /* a failed message that Kafka may have written anyway */
};

enum relay_mode { MODE_RUNNING, MODE_RESETTING, MODE_DRAINING, MODE_DONE };

/* A row to write back: parked (FAILED) or one failed-alone attempt counted. */
struct row_update {
    int64_t id;
    char *reason;
    int count_attempt; /* 1: attempts+1, parks at OUTBOX_MAX_ATTEMPTS; 0: park now */
};

/* A lease partition as this relay sees it. It publishes rows of a partition only while
 * ACTIVE: after acquiring the advisory lock and waiting out the grace period when the
 * previous holder did not release it cleanly (it may still be publishing until its own
 * deadline), and never after its own deadline without contact with PostgreSQL. */
enum lease_state { LEASE_FREE, LEASE_GRACE, LEASE_ACTIVE, LEASE_DRAINING };

struct lease {
    enum lease_state state;
    int64_t publish_from_ms; /* monotonic */
};

struct lease_event {
    int partition;
    const char *event;
    int64_t at, publish_from, publish_until; /* wall clock ms; 0 = NULL */
};

struct paused_topic {
    char name[250];
    int64_t until_ms;
};

struct relay {
    struct ev_loop *loop;
    const struct config *cfg;
    struct outbox_sql sql;
    struct pgconn *worker;
    struct pgconn *listener;
    struct sink *sink;
    struct monitor *monitor;
    struct http *http;
    struct metrics m;

    struct inflight_row *rows;
    size_t n_rows, cap_rows;
    size_t n_state[ROW_STATES];

    /* The last claim's rows not yet produced (backpressure), and keys blocked in it
     * because an earlier row of the key was parked. */
    PGresult *claim_res;
    int claim_next;
    char **blocked_keys;
    size_t n_blocked_keys;

    struct row_update *updates; /* parks and counted attempts, written before the next claim */
    size_t n_updates;

    struct paused_topic paused[MAX_PAUSED];
    size_t n_paused;

    /* Isolation: after a row-level error in a batch, rows are published one at a time
     * until past this id, so the guilty row fails alone (and only then is counted). */
    int64_t isolate_until_id;

    struct lease leases[OUTBOX_LEASE_PARTITIONS];
    struct lease_event *lease_events; /* lease log rows not yet written */
    size_t n_lease_events;
    size_t lease_events_sent; /* how many the statement in flight writes */
    int lease_due;         /* time to scan and rebalance */
    int lease_relays;      /* live relays at the last scan */
    int64_t last_contact_ms; /* monotonic send time of the last statement that succeeded */
    int64_t sent_ms;         /* monotonic send time of the statement in flight */
    int64_t grace_ms, deadline_ms;
    char incarnation[256];   /* relay name/pid: this process in the lease log */
    ev_timer lease_timer;

    int claim_quota;   /* rows per partition in the claim in flight */
    int busy;          /* a worker statement is in flight */
    int last_was_mark; /* the previous worker statement was a mark */
    int schema_ok; /* version checked on the current worker connection */
    int schema_logged;
    int claim_wanted;
    int arm_wanted;
    int doorbell_armed;
    int idle_delay_ms;
    ev_timer poll_timer;
    ev_timer retry_timer; /* after a failed statement */

    enum relay_mode mode;
    int fatal_pending;
    char last_failure[256];
    struct backoff reset_backoff;
    ev_timer reset_timer;
    int reset_waiting;

    ev_timer shutdown_timer;
    int shutdown_requests;
    int exit_code;

    ev_timer log_timer;
    uint64_t marked_logged;
    ev_timer publish_timer;
    int64_t last_progress_ms;
    uint64_t last_progress_marked;
    const char *stall_logged;
    ev_prepare kick_prepare;

#ifdef OUTBOX_TEST_HOOKS
    long long test_kill_before_mark_after; /* SIGKILL self once this many rows were acked */
    long long test_fatal_after;            /* raise a fatal producer error after this many acks */
#endif
};

static void kick(struct relay *r);
static int active_partitions(struct relay *r, struct strbuf *out);
static void lose_leases(struct relay *r, const char *why);

/* ---- in-flight window ---------------------------------------------------- */

static struct inflight_row *find_row(struct relay *r, int64_t id)
{
    size_t lo = 0, hi = r->n_rows;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->rows[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->n_rows && r->rows[lo].id == id ? &r->rows[lo] : NULL;
}

static void set_state(struct relay *r, struct inflight_row *row, enum row_state state)
{
    r->n_state[row->state]--;
    r->n_state[state]++;
    row->state = state;
}

/* Adds a claim's rows (ascending ids, none already present) by merging. */
static void add_rows(struct relay *r, const struct inflight_row *add, size_t n)
{
    if (r->n_rows + n > r->cap_rows) {
        r->cap_rows = (r->n_rows + n) * 2;
        r->rows = xrealloc(r->rows, r->cap_rows * sizeof(*r->rows));
    }
    size_t i = r->n_rows, j = n, k = r->n_rows + n;
    while (j > 0) {
        if (i > 0 && r->rows[i - 1].id > add[j - 1].id)
            r->rows[--k] = r->rows[--i];
        else
            r->rows[--k] = add[--j];
    }
    r->n_rows += n;
    r->n_state[ROW_QUEUED] += n;
}

/* Drops every row in the given state from the window. */
static size_t remove_rows(struct relay *r, enum row_state state)
{
    size_t out = 0;
    for (size_t i = 0; i < r->n_rows; i++)
        if (r->rows[i].state != state)
            r->rows[out++] = r->rows[i];
    size_t removed = r->n_rows - out;
    r->n_rows = out;
    r->n_state[state] -= removed;
    return removed;
}

static void remove_one(struct relay *r, struct inflight_row *row)
{
    size_t i = (size_t)(row - r->rows);
    r->n_state[row->state]--;
    memmove(&r->rows[i], &r->rows[i + 1], (r->n_rows - i - 1) * sizeof(*r->rows));
    r->n_rows--;
}

/* ---- helpers ------------------------------------------------------------- */

/* Callbacks that run inside kick (delivery reports) ask for another kick, which runs
 * before the loop next waits for events. */
static void kick_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)revents;
    struct relay *r = w->data;
    ev_prepare_stop(loop, w);
    kick(r);
}

static void schedule_kick(struct relay *r)
{
    if (!ev_is_active(&r->kick_prepare))
        ev_prepare_start(r->loop, &r->kick_prepare);
}

static int result_ok(PGresult *res)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* A statement failed: log it; reconnect after a read-only error (failover), else retry
 * after a short delay. */
static void statement_failed(struct relay *r, const char *what, PGresult *res)
{
    if (!res)
        return; /* connection lost: the reconnect path takes over */
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    const char *state = pgconn_sqlstate(res);
    log_warn("pg worker: %s failed (%s): %s", what, state, line);
    if (strcmp(state, "25006") == 0 || strncmp(state, "57P", 3) == 0)
        pgconn_reset(r->worker, "server is read-only or shutting down");
    else if (!ev_is_active(&r->retry_timer)) {
        ev_timer_set(&r->retry_timer, 0.5, 0.0);
        ev_timer_start(r->loop, &r->retry_timer);
    }
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    kick(w->data);
}

/* Which errors are the row's, the topic's, or nobody's in particular. */
static enum failure_reason classify(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
        return err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT ? FAILURE_TRANSIENT : FAILURE_ROW;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
        return FAILURE_TOPIC;
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__FATAL:
        return FAILURE_PRODUCER;
    default:
        return FAILURE_TRANSIENT;
    }
}

/* ---- paused topics --------------------------------------------------------- */

static void pause_topic(struct relay *r, const char *topic, rd_kafka_resp_err_t err)
{
    int64_t until = mono_ms() + r->cfg->topic_pause_ms;
    for (size_t i = 0; i < r->n_paused; i++)
        if (strcmp(r->paused[i].name, topic) == 0) {
            r->paused[i].until_ms = until;
            return;
        }
    if (r->n_paused == MAX_PAUSED) {
        log_warn("relay: more than %d paused topics; not pausing %s", MAX_PAUSED, topic);
        return;
    }
    snprintf(r->paused[r->n_paused].name, sizeof(r->paused[0].name), "%s", topic);
    r->paused[r->n_paused++].until_ms = until;
    log_warn("relay: topic %s paused for %d ms: %s (its rows stay PENDING; other topics flow)",
             topic, r->cfg->topic_pause_ms, rd_kafka_err2str(err));
}

static void expire_pauses(struct relay *r)
{
    int64_t now = mono_ms();
    for (size_t i = 0; i < r->n_paused;) {
        if (r->paused[i].until_ms <= now) {
            log_info("relay: topic %s resumes (trying again)", r->paused[i].name);
            r->paused[i] = r->paused[--r->n_paused];
        } else {
            i++;
        }
    }
}

/* ---- resets (a delivery failed, or the producer is fatal) ------------------ */

/* Rows claimed but not produced go back: they stay PENDING and are claimed again. */
static void release_claim(struct relay *r)
{
    if (r->claim_res) {
        PQclear(r->claim_res);
        r->claim_res = NULL;
    }
    for (size_t i = 0; i < r->n_blocked_keys; i++)
        free(r->blocked_keys[i]);
    r->n_blocked_keys = 0;
    remove_rows(r, ROW_QUEUED);
}

static void start_reset(struct relay *r, const char *reason)
{
    snprintf(r->last_failure, sizeof(r->last_failure), "%s", reason);
    if (r->mode != MODE_RUNNING)
        return;
    r->mode = MODE_RESETTING;
    r->m.resets_total++;
    release_claim(r);
    ev_timer_stop(r->loop, &r->poll_timer);
    log_warn("relay: %s; pausing claims until in-flight deliveries settle, then claiming again "
             "from the lowest pending row", reason);
}

static void reset_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    r->reset_waiting = 0;
    if (r->mode == MODE_RESETTING) {
        r->mode = MODE_RUNNING;
        r->claim_wanted = 1;
        log_info("relay: resuming claims%s", r->isolate_until_id ? " one row at a time" : "");
    }
    kick(r);
}

static void queue_update(struct relay *r, int64_t id, const char *reason, int count_attempt)
{
    r->updates = xrealloc(r->updates, (r->n_updates + 1) * sizeof(*r->updates));
    r->updates[r->n_updates++] = (struct row_update){id, xstrdup(reason), count_attempt};
}

/* Decides what each failed row means once every in-flight delivery has reported:
 * row errors of a row published alone count as attempts; row errors in a batch start
 * isolation; topic errors pause the topic; the rest just wait for the next claim. */
static void judge_failures(struct relay *r)
{
    int alone = r->isolate_until_id && r->n_state[ROW_FAILED] == 1;
    for (size_t i = 0; i < r->n_rows; i++) {
        struct inflight_row *row = &r->rows[i];
        if (row->state != ROW_FAILED)
            continue;
        if (row->fail == FAILURE_ROW) {
            if (alone) {
                char reason[300];
                snprintf(reason, sizeof(reason), "Kafka rejected the message: %s",
                         rd_kafka_err2str(row->err));
                queue_update(r, row->id, reason, 1);
                set_state(r, row, ROW_PARKING);
            } else if (row->id > r->isolate_until_id) {
                r->isolate_until_id = row->id;
            }
        }
        /* rows may have been written anyway: count them as possible duplicates */
    }
    if (r->isolate_until_id)
        log_info("relay: publishing rows one at a time up to id %lld to find the row Kafka "
                 "rejects", (long long)r->isolate_until_id);
}

/* Moves a reset forward: recreate a fatal producer, wait for reports and marks, judge and
 * record the failures, back off, resume. */
static void advance_reset(struct relay *r)
{
    if (r->fatal_pending) {
        char err[512];
        r->fatal_pending = 0;
        if (sink_recreate(r->sink, err, sizeof(err)) != 0) {
            log_error("relay: %s", err);
            r->fatal_pending = 1;
        } else {
            r->m.producer_recreated_total++;
        }
        /* Reports the old producer never gave: those rows were not acknowledged. */
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].state == ROW_PRODUCED) {
                r->rows[i].fail = FAILURE_PRODUCER;
                r->rows[i].maybe_persisted = 1; /* no report: unknown, count it */
                set_state(r, &r->rows[i], ROW_FAILED);
            }
    }
    if (r->n_state[ROW_PRODUCED] || r->n_state[ROW_ACKED] || r->n_state[ROW_MARKING] ||
        r->n_state[ROW_FAILED] || r->n_state[ROW_PARKING] || r->n_updates || r->reset_waiting)
        return;
    int delay = backoff_next(&r->reset_backoff);
    r->reset_waiting = 1;
    ev_timer_set(&r->reset_timer, delay / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->reset_timer);
    log_info("relay: in-flight deliveries settled; claiming again in %d ms", delay);
}

/* ---- worker statements --------------------------------------------------- */

static void finish(struct relay *r, int code)
{
    r->exit_code = code;
    r->mode = MODE_DONE;
    ev_break(r->loop, EVBREAK_ALL);
}

static int worker_send(struct relay *r, const char *sql, int nparams, const char *const *params,
                pgconn_result_cb cb)
{
    if (pgconn_query(r->worker, sql, nparams, params, cb, r) != 0)
        return -1;
    r->busy = 1;
    r->sent_ms = mono_ms();
    return 0;
}

/* A worker statement came back: the session (and its advisory locks) was alive when it
 * was sent. */
static void contact(struct relay *r, PGresult *res)
{
    r->busy = 0;
    if (res)
        r->last_contact_ms = r->sent_ms;
}

static void version_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!res)
        return;
    if (!result_ok(res)) {
        char state[8], line[512];
        snprintf(state, sizeof(state), "%s", pgconn_sqlstate(res));
        pgconn_error_line(res, line, sizeof(line));
        PQclear(res);
        if (strcmp(state, "42P01") == 0 || strcmp(state, "3F000") == 0) {
            log_error("schema: table %s has no outbox-relay schema (%s); run `outbox-relay "
                      "migrate` first", r->cfg->table, line);
            finish(r, 1);
            return;
        }
        log_warn("pg worker: schema version check failed (%s): %s", state, line);
        ev_timer_set(&r->retry_timer, 1.0, 0.0);
        ev_timer_start(r->loop, &r->retry_timer);
        return;
    }
    int have = PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (have != schema_version()) {
        log_error("schema: table %s is at schema version %d but this relay needs version %d; "
                  "run `outbox-relay migrate` with this relay's version%s",
                  r->cfg->table, have, schema_version(),
                  have > schema_version() ? " (or upgrade the relay: the schema is newer)" : "");
        finish(r, 1);
        return;
    }
    if (!r->schema_logged)
        log_info("schema: %s at version %d", r->cfg->table, have);
    r->schema_logged = 1;
    r->schema_ok = 1;
    r->claim_wanted = 1;
    kick(r);
}

static void poll_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    r->claim_wanted = 1;
    kick(r);
}

/* Adaptive poll: claim again at once after a full batch, soon after a partial one, and
 * back off towards OUTBOX_POLL_INTERVAL_MS while claims come back empty; once idle, arm
 * the doorbell. */
static void after_claim(struct relay *r, int rows, int limit)
{
    if (rows >= limit && !r->isolate_until_id) {
        r->claim_wanted = 1;
        r->idle_delay_ms = MIN_POLL_DELAY_MS;
        return;
    }
    r->claim_wanted = 0;
    if (rows > 0) {
        r->idle_delay_ms = MIN_POLL_DELAY_MS;
        r->doorbell_armed = 0;
    } else {
        r->idle_delay_ms *= 2;
        if (r->idle_delay_ms >= r->cfg->poll_interval_ms) {
            r->idle_delay_ms = r->cfg->poll_interval_ms;
            if (r->listener && pgconn_connected(r->listener) && !r->doorbell_armed)
                r->arm_wanted = 1;
        }
    }
    if (r->idle_delay_ms > r->cfg->poll_interval_ms)
        r->idle_delay_ms = r->cfg->poll_interval_ms;
    if (r->isolate_until_id)
        return; /* the next claim follows the delivery report */
    ev_timer_stop(r->loop, &r->poll_timer);
    ev_timer_set(&r->poll_timer, r->idle_delay_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->poll_timer);
}

static int claim_limit(const struct relay *r)
{
    return r->isolate_until_id ? 1 : r->cfg->batch_size;
}

static int add_partition(PGresult *res, int row)
{
    return atoi(PQgetvalue(res, row, 10)) & (OUTBOX_LEASE_PARTITIONS - 1);
}

static void claim_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    r->m.claims_total++;
    if (!result_ok(res)) {
        statement_failed(r, "claim", res);
        PQclear(res);
        r->claim_wanted = 1;
        return;
    }
    int n = PQntuples(res);
    if (r->mode != MODE_RUNNING || n == 0) {
        PQclear(res);
        if (r->mode == MODE_RUNNING) {
            if (r->isolate_until_id) {
                log_info("relay: nothing left to isolate; back to batches");
                r->isolate_until_id = 0;
            }
            after_claim(r, 0, claim_limit(r));
        }
        kick(r);
        return;
    }
    struct inflight_row *add = xmalloc((size_t)n * sizeof(*add));
    for (int i = 0; i < n; i++) {
        add[i] = (struct inflight_row){
            .id = strtoll(PQgetvalue(res, i, 0), NULL, 10),
            .created_ms = strtoll(PQgetvalue(res, i, 8), NULL, 10),
            .attempts = atoi(PQgetvalue(res, i, 9)),
            .partition = atoi(PQgetvalue(res, i, 10)) & (OUTBOX_LEASE_PARTITIONS - 1),
            .state = ROW_QUEUED,
        };
    }
    add_rows(r, add, (size_t)n);
    free(add);
    r->m.claimed_rows_total += (uint64_t)n;
    histogram_observe(&r->m.batch_rows, n);
    log_debug("claim: %d rows, ids %s..%s, in flight %zu", n, PQgetvalue(res, 0, 0),
              PQgetvalue(res, n - 1, 0), r->n_rows);
    r->claim_res = res;
    r->claim_next = 0;
    /* A partition that filled its quota may have more: then claim again at once. */
    int per_part[OUTBOX_LEASE_PARTITIONS] = {0}, quota_hit = 0;
    for (int i = 0; i < n; i++)
        if (++per_part[add_partition(res, i)] >= r->claim_quota)
            quota_hit = 1;
    after_claim(r, quota_hit ? claim_limit(r) : n, claim_limit(r));
    kick(r);
}

/* Rows per partition in one claim: twice a fair share of the batch, so that a claim stays
 * near the batch size without reading every partition's backlog. */
static int part_quota(const struct relay *r, int nparts)
{
    int limit = claim_limit(r);
    int q = (limit + nparts - 1) / nparts * 2;
    return q < 16 ? (limit < 16 ? limit : 16) : q;
}

/* Paused topics as a text[] literal; names are valid topic names, so no quoting is needed. */
static void paused_literal(struct relay *r, struct strbuf *out)
{
    strbuf_puts(out, "{");
    for (size_t i = 0; i < r->n_paused; i++)
        strbuf_printf(out, "%s\"%s\"", i ? "," : "", r->paused[i].name);
    strbuf_puts(out, "}");
}

static void send_claim(struct relay *r)
{
    struct strbuf ids, paused, parts;
    strbuf_init(&parts);
    int nparts = active_partitions(r, &parts);
    if (!nparts) {
        strbuf_destroy(&parts);
        return; /* no partition to publish yet (grace, or none held) */
    }
    strbuf_init(&ids);
    strbuf_init(&paused);
    strbuf_puts(&ids, "{");
    for (size_t i = 0; i < r->n_rows; i++)
        strbuf_printf(&ids, "%s%lld", i ? "," : "", (long long)r->rows[i].id);
    strbuf_puts(&ids, "}");
    paused_literal(r, &paused);
    char limit[16], quota[16];
    r->claim_quota = part_quota(r, nparts);
    snprintf(limit, sizeof(limit), "%d", claim_limit(r));
    snprintf(quota, sizeof(quota), "%d", r->claim_quota);
    const char *params[5] = {ids.buf, limit, paused.buf, parts.buf, quota};
    if (worker_send(r, r->sql.claim, 5, params, claim_done) == 0) {
        r->claim_wanted = 0;
        ev_timer_stop(r->loop, &r->poll_timer);
    }
    strbuf_destroy(&parts);
    strbuf_destroy(&ids);
    strbuf_destroy(&paused);
}

static void mark_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "mark", res);
        PQclear(res);
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].state == ROW_MARKING)
                set_state(r, &r->rows[i], ROW_ACKED);
        return;
    }
    PQclear(res);
    size_t n = remove_rows(r, ROW_MARKING);
    r->m.marked_total += n;
    log_debug("mark: %zu rows SENT, in flight %zu", n, r->n_rows);
    kick(r);
}

static void send_mark(struct relay *r)
{
#ifdef OUTBOX_TEST_HOOKS
    if (r->test_kill_before_mark_after > 0 &&
        r->m.published_total >= (uint64_t)r->test_kill_before_mark_after) {
        log_warn("test hook: SIGKILL before marking %zu acknowledged rows", r->n_state[ROW_ACKED]);
        kill(getpid(), SIGKILL);
    }
#endif
    struct strbuf ids;
    strbuf_init(&ids);
    strbuf_puts(&ids, "{");
    size_t n = 0;
    for (size_t i = 0; i < r->n_rows && n < MARK_MAX_IDS; i++) {
        if (r->rows[i].state != ROW_ACKED)
            continue;
        strbuf_printf(&ids, "%s%lld", n ? "," : "", (long long)r->rows[i].id);
        set_state(r, &r->rows[i], ROW_MARKING);
        n++;
    }
    strbuf_puts(&ids, "}");
    char high[24];
    snprintf(high, sizeof(high), "%lld", (long long)(r->n_rows ? r->rows[r->n_rows - 1].id : 0));
    const char *params[3] = {ids.buf, r->cfg->relay_name, high};
    if (worker_send(r, r->sql.mark, 3, params, mark_done) != 0)
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].state == ROW_MARKING)
                set_state(r, &r->rows[i], ROW_ACKED);
    strbuf_destroy(&ids);
}

/* Sends a parked row to the dead-letter topic (headers only when the payload is gone). */
static void dead_letter(struct relay *r, const struct outbox_row *row, const char *reason)
{
    if (!r->cfg->dead_letter_topic[0])
        return;
    char id[24];
    snprintf(id, sizeof(id), "%lld", (long long)row->id);
    struct message msg = {
        .topic = xstrdup(r->cfg->dead_letter_topic),
        .headers = {
            {"event_id", row->event_id},
            {"event_type", row->event_type ? row->event_type : ""},
            {"aggregate_type", row->aggregate_type ? row->aggregate_type : ""},
            {"outbox_error", reason},
            {"outbox_id", id},
        },
        .n_headers = 5,
    };
    /* Only a payload that fits: the reason may be that it is too large. */
    int with_payload = row->payload && row->payload_len < 512 * 1024;
    rd_kafka_resp_err_t err = sink_produce(r->sink, &msg, row->aggregate_id,
                                           with_payload ? row->payload : NULL,
                                           with_payload ? row->payload_len : 0, row->created_ms,
                                           -row->id);
    if (err)
        log_warn("relay: dead-letter copy of row %lld not sent: %s", (long long)row->id,
                 rd_kafka_err2str(err));
    message_destroy(&msg);
}

static void update_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    struct row_update *u = &r->updates[0];
    if (!result_ok(res)) {
        statement_failed(r, "writing back a failed row", res);
        PQclear(res);
        return;
    }
    int parked = !u->count_attempt ||
                 (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "FAILED") == 0);
    if (parked) {
        r->m.parked_total++;
        log_warn("relay: row %lld parked as FAILED: %s", (long long)u->id, u->reason);
        if (u->count_attempt) {
            /* Rejected by Kafka: the payload is what was rejected, so the dead letter
             * carries the row's identity and the reason only. */
            struct outbox_row row = {
                .id = u->id,
                .event_id = PQgetvalue(res, 0, 2),
                .aggregate_id = PQgetvalue(res, 0, 3),
                .aggregate_type = PQgetvalue(res, 0, 4),
                .event_type = PQgetvalue(res, 0, 5),
                .created_ms = strtoll(PQgetvalue(res, 0, 6), NULL, 10),
            };
            dead_letter(r, &row, u->reason);
        }
    } else if (PQntuples(res) == 1) {
        log_warn("relay: row %lld failed alone (attempt %s of %d): %s", (long long)u->id,
                 PQgetvalue(res, 0, 1), r->cfg->max_attempts, u->reason);
    }
    PQclear(res);
    struct inflight_row *row = find_row(r, u->id);
    if (row)
        remove_one(r, row);
    free(u->reason);
    memmove(&r->updates[0], &r->updates[1], (r->n_updates - 1) * sizeof(*r->updates));
    r->n_updates--;
    kick(r);
}

static void send_update(struct relay *r)
{
    struct row_update *u = &r->updates[0];
    char id[24], max[16];
    snprintf(id, sizeof(id), "%lld", (long long)u->id);
    snprintf(max, sizeof(max), "%d", r->cfg->max_attempts);
    const char *params[3] = {id, u->reason, max};
    if (u->count_attempt)
        worker_send(r, r->sql.row_failed, 3, params, update_done);
    else
        worker_send(r, r->sql.park, 2, params, update_done);
}

static void note_failed_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "recording failed deliveries", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    size_t n = remove_rows(r, ROW_FAILED);
    log_info("relay: %zu rows whose delivery failed stay PENDING (last_error recorded)", n);
    kick(r);
}

static void send_note_failed(struct relay *r)
{
    judge_failures(r);
    if (!r->n_state[ROW_FAILED]) {
        kick(r);
        return;
    }
    struct strbuf ids;
    strbuf_init(&ids);
    strbuf_puts(&ids, "{");
    size_t n = 0;
    for (size_t i = 0; i < r->n_rows; i++)
        if (r->rows[i].state == ROW_FAILED) {
            strbuf_printf(&ids, "%s%lld", n++ ? "," : "", (long long)r->rows[i].id);
            /* librdkafka says whether a failed message may have been written anyway */
            if (r->rows[i].maybe_persisted)
                r->m.possible_duplicates_total++;
        }
    strbuf_puts(&ids, "}");
    const char *params[2] = {ids.buf, r->last_failure};
    worker_send(r, r->sql.note_failed, 2, params, note_failed_done);
    strbuf_destroy(&ids);
}

static void arm_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "arming the doorbell", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    r->doorbell_armed = 1;
    /* A row committed before the arm took effect rang no bell: look once more. */
    r->claim_wanted = 1;
    kick(r);
}

static void send_arm(struct relay *r)
{
    const char *params[1] = {r->cfg->notify_channel};
    r->arm_wanted = 0;
    worker_send(r, r->sql.arm, 1, params, arm_done);
}

/* ---- leases ---------------------------------------------------------------- */

static int leases_held(const struct relay *r)
{
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        n += r->leases[p].state == LEASE_GRACE || r->leases[p].state == LEASE_ACTIVE;
    return n;
}

static void log_lease(struct relay *r, int partition, const char *event, int64_t from, int64_t until)
{
    r->lease_events = xrealloc(r->lease_events, (r->n_lease_events + 1) * sizeof(*r->lease_events));
    r->lease_events[r->n_lease_events++] = (struct lease_event){partition, event, wall_ms(), from, until};
}

/* The session that held the locks is gone or may be: stop publishing every partition at
 * once, drop what is queued in the producer, and log the loss (written once reconnected). */
static void lose_leases(struct relay *r, const char *why)
{
    int lost = 0;
    int64_t now = wall_ms();
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        if (r->leases[p].state == LEASE_FREE)
            continue;
        log_lease(r, p, "lost", 0, now);
        r->leases[p].state = LEASE_FREE;
        lost++;
    }
    if (!lost)
        return;
    r->m.lease_lost_total += (uint64_t)lost;
    log_warn("lease: lost %d partitions (%s); producer queue purged, their rows stay PENDING", lost, why);
    release_claim(r);
    sink_abandon(r->sink, 200);
    start_reset(r, "lease partitions lost");
}

static void lease_log_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "writing the lease log", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    /* the first lease_events_sent events are written; later ones arrived meanwhile */
    memmove(r->lease_events, r->lease_events + r->lease_events_sent,
            (r->n_lease_events - r->lease_events_sent) * sizeof(*r->lease_events));
    r->n_lease_events -= r->lease_events_sent;
    r->lease_events_sent = 0;
    kick(r);
}

/* Writes every queued lease event in one statement. */
static void send_lease_log(struct relay *r)
{
    struct strbuf parts, events, at, from, until;
    struct strbuf *all[] = {&parts, &events, &at, &from, &until};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        strbuf_init(all[i]);
        strbuf_puts(all[i], "{");
    }
    for (size_t i = 0; i < r->n_lease_events; i++) {
        const struct lease_event *e = &r->lease_events[i];
        const char *sep = i ? "," : "";
        strbuf_printf(&parts, "%s%d", sep, e->partition);
        strbuf_printf(&events, "%s%s", sep, e->event);
        strbuf_printf(&at, "%s%lld", sep, (long long)e->at);
        strbuf_printf(&from, "%s%lld", sep, (long long)e->publish_from);
        strbuf_printf(&until, "%s%lld", sep, (long long)e->publish_until);
    }
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        strbuf_puts(all[i], "}");
    const char *params[6] = {parts.buf, r->incarnation, events.buf, at.buf, from.buf, until.buf};
    if (worker_send(r, r->sql.lease_log, 6, params, lease_log_done) == 0)
        r->lease_events_sent = r->n_lease_events;
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        strbuf_destroy(all[i]);
}

static void lease_acquire_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "acquiring lease partitions", res);
        PQclear(res);
        return;
    }
    int64_t now = mono_ms(), wall = wall_ms();
    int got = 0, takeovers = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        int p = atoi(PQgetvalue(res, i, 0));
        if (strcmp(PQgetvalue(res, i, 1), "t") != 0 || p < 0 || p >= OUTBOX_LEASE_PARTITIONS)
            continue;
        /* The previous holder may still be publishing until its own deadline unless it
         * released the partition cleanly (or it was this very process). */
        const char *last = PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2);
        int clean = !last || strcmp(last, "released") == 0 ||
                    (strcmp(last, "lost") == 0 && strcmp(PQgetvalue(res, i, 3), r->incarnation) == 0);
        int64_t wait = clean ? 0 : r->grace_ms;
        r->leases[p].state = wait ? LEASE_GRACE : LEASE_ACTIVE;
        r->leases[p].publish_from_ms = now + wait;
        log_lease(r, p, "acquired", wall + wait, 0);
        got++;
        takeovers += !clean;
    }
    PQclear(res);
    if (got) {
        r->m.lease_takeovers_total += (uint64_t)takeovers;
        log_info("lease: acquired %d partitions (%d taken over from a relay that did not release "
                 "them: publishing after a %lld ms grace); holding %d of %d with %d relays",
                 got, takeovers, (long long)(takeovers ? r->grace_ms : 0), leases_held(r),
                 OUTBOX_LEASE_PARTITIONS, r->lease_relays);
        r->claim_wanted = 1;
    }
    kick(r);
}

static void lease_release_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "releasing lease partitions", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    int64_t now = wall_ms();
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->leases[p].state == LEASE_DRAINING && r->leases[p].publish_from_ms == -1) {
            r->leases[p].state = LEASE_FREE;
            log_lease(r, p, "released", 0, now);
            n++;
        }
    log_info("lease: released %d partitions; holding %d", n, leases_held(r));
    kick(r);
}

/* Releases draining partitions that have nothing in flight any more. Returns 1 if a
 * statement was sent. */
static int send_lease_release(struct relay *r)
{
    int inflight[OUTBOX_LEASE_PARTITIONS] = {0};
    for (size_t i = 0; i < r->n_rows; i++)
        inflight[r->rows[i].partition]++;
    struct strbuf parts;
    strbuf_init(&parts);
    strbuf_puts(&parts, "{");
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->leases[p].state == LEASE_DRAINING && !inflight[p]) {
            strbuf_printf(&parts, "%s%d", n++ ? "," : "", p);
            r->leases[p].publish_from_ms = -1; /* marks "in this release" */
        }
    strbuf_puts(&parts, "}");
    int sent = 0;
    if (n) {
        char key[16];
        snprintf(key, sizeof(key), "%d", r->sql.lease_key);
        const char *params[2] = {key, parts.buf};
        sent = worker_send(r, r->sql.lease_release, 2, params, lease_release_done) == 0;
    }
    strbuf_destroy(&parts);
    return sent;
}

static void lease_scan_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    contact(r, res);
    if (!result_ok(res)) {
        statement_failed(r, "scanning lease partitions", res);
        PQclear(res);
        return;
    }
    int relays = atoi(PQgetvalue(res, 0, 0));
    int locked[OUTBOX_LEASE_PARTITIONS] = {0};
    const char *list = PQgetvalue(res, 0, 1);
    for (const char *c = list; *c;) {
        if (*c >= '0' && *c <= '9') {
            int p = atoi(c);
            if (p >= 0 && p < OUTBOX_LEASE_PARTITIONS)
                locked[p] = 1;
            while (*c >= '0' && *c <= '9')
                c++;
        } else {
            c++;
        }
    }
    PQclear(res);
    if (relays < 1)
        relays = 1;
    if (relays != r->lease_relays && r->lease_relays)
        log_info("lease: %d relays share the table (was %d)", relays, r->lease_relays);
    r->lease_relays = relays;
    int target = (OUTBOX_LEASE_PARTITIONS + relays - 1) / relays;
    int held = leases_held(r);
    if (held > target && r->mode == MODE_RUNNING) {
        /* give back the highest partitions: stop claiming them, release once drained */
        int give = held - target;
        for (int p = OUTBOX_LEASE_PARTITIONS - 1; p >= 0 && give > 0; p--)
            if (r->leases[p].state == LEASE_ACTIVE || r->leases[p].state == LEASE_GRACE) {
                r->leases[p].state = LEASE_DRAINING;
                give--;
            }
        r->m.lease_rebalances_total++;
        log_info("lease: handing back %d partitions to balance %d relays", held - target, relays);
    } else if (held < target && r->mode == MODE_RUNNING) {
        struct strbuf parts;
        strbuf_init(&parts);
        strbuf_puts(&parts, "{");
        int n = 0;
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS && n < target - held; p++)
            if (!locked[p] && r->leases[p].state == LEASE_FREE)
                strbuf_printf(&parts, "%s%d", n++ ? "," : "", p);
        strbuf_puts(&parts, "}");
        if (n) {
            char key[16];
            snprintf(key, sizeof(key), "%d", r->sql.lease_key);
            const char *params[2] = {key, parts.buf};
            worker_send(r, r->sql.lease_acquire, 2, params, lease_acquire_done);
        }
        strbuf_destroy(&parts);
    }
    if (!r->busy)
        kick(r);
}

/* Lease housekeeping on a timer: the client-side deadline, grace periods, and a scan. */
static void lease_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    int64_t now = mono_ms();
    if (leases_held(r) > 0 && now - r->last_contact_ms > r->deadline_ms) {
        char why[96];
        snprintf(why, sizeof(why), "no answer from PostgreSQL for %lld ms",
                 (long long)(now - r->last_contact_ms));
        lose_leases(r, why);
        pgconn_reset(r->worker, why); /* a new session; the old one's locks go with it */
    }
    r->lease_due = 1;
    kick(r);
}

/* GRACE partitions whose time has come start publishing. Returns the ACTIVE set as an
 * int2[] literal in out; 0 if there is none. */
static int active_partitions(struct relay *r, struct strbuf *out)
{
    int64_t now = mono_ms();
    int n = 0;
    strbuf_puts(out, "{");
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        if (r->leases[p].state == LEASE_GRACE && now >= r->leases[p].publish_from_ms)
            r->leases[p].state = LEASE_ACTIVE;
        if (r->leases[p].state == LEASE_ACTIVE)
            strbuf_printf(out, "%s%d", n++ ? "," : "", p);
    }
    strbuf_puts(out, "}");
    return n;
}

/* ---- producing ----------------------------------------------------------- */

static int key_blocked(struct relay *r, const char *key)
{
    for (size_t i = 0; i < r->n_blocked_keys; i++)
        if (strcmp(r->blocked_keys[i], key) == 0)
            return 1;
    return 0;
}

/* A row that can never be published: park it; with the block policy, hold the rest of
 * its key in this claim (later claims skip keys with a FAILED row). */
static void park_row(struct relay *r, struct inflight_row *slot, const struct outbox_row *row,
                     const char *reason)
{
    set_state(r, slot, ROW_PARKING);
    queue_update(r, row->id, reason, 0);
    dead_letter(r, row, reason);
    if (strcmp(r->cfg->poison_policy, "block") == 0) {
        r->blocked_keys = xrealloc(r->blocked_keys, (r->n_blocked_keys + 1) * sizeof(char *));
        r->blocked_keys[r->n_blocked_keys++] = xstrdup(row->aggregate_id);
    }
}

static void produce_claimed(struct relay *r)
{
    if (!r->claim_res || r->mode != MODE_RUNNING)
        return;
    PGresult *res = r->claim_res;
    int n = PQntuples(res);
    while (r->claim_next < n) {
        int i = r->claim_next;
        struct outbox_row row = {
            .id = strtoll(PQgetvalue(res, i, 0), NULL, 10),
            .event_id = PQgetvalue(res, i, 1),
            .aggregate_type = PQgetvalue(res, i, 2),
            .aggregate_id = PQgetvalue(res, i, 3),
            .event_type = PQgetvalue(res, i, 4),
            .topic = PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5),
            .payload = PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6),
            .payload_len = (size_t)PQgetlength(res, i, 6),
            .headers = PQgetisnull(res, i, 7) ? NULL : PQgetvalue(res, i, 7),
            .created_ms = strtoll(PQgetvalue(res, i, 8), NULL, 10),
            .attempts = atoi(PQgetvalue(res, i, 9)),
        };
        struct inflight_row *slot = find_row(r, row.id);
        if (!slot || slot->state != ROW_QUEUED) {
            r->claim_next++;
            continue;
        }
        if (r->leases[slot->partition].state != LEASE_ACTIVE) {
            remove_one(r, slot); /* the lease is going or gone: the row stays PENDING */
            r->claim_next++;
            continue;
        }
        if (key_blocked(r, row.aggregate_id)) {
            remove_one(r, slot); /* stays PENDING; the parked key now holds it back */
            r->claim_next++;
            continue;
        }
        struct message msg;
        char reason[512];
        if (message_build(&row, r->cfg->topic_template, &msg, reason, sizeof(reason)) != 0) {
            park_row(r, slot, &row, reason);
            r->claim_next++;
            continue;
        }
        rd_kafka_resp_err_t err = sink_produce(r->sink, &msg, row.aggregate_id, row.payload,
                                               row.payload ? row.payload_len : 0, row.created_ms,
                                               row.id);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            message_destroy(&msg);
            return; /* backpressure: resumes on the next delivery report */
        }
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || err == RD_KAFKA_RESP_ERR__INVALID_ARG) {
            snprintf(reason, sizeof(reason), "the producer refuses the message (%zu bytes): %s",
                     row.payload_len, rd_kafka_err2str(err));
            park_row(r, slot, &row, reason);
        } else if (err) {
            slot->err = err;
            slot->fail = classify(err);
            set_state(r, slot, ROW_FAILED);
            r->m.publish_failures_total[slot->fail]++;
            snprintf(reason, sizeof(reason), "produce to %s failed: %s", msg.topic,
                     rd_kafka_err2str(err));
            if (slot->fail == FAILURE_TOPIC)
                pause_topic(r, msg.topic, err);
            message_destroy(&msg);
            r->claim_next++;
            start_reset(r, reason);
            return;
        } else {
            set_state(r, slot, ROW_PRODUCED);
        }
        message_destroy(&msg);
        r->claim_next++;
    }
    release_claim(r);
}

/* ---- Kafka callbacks (loop thread) --------------------------------------- */

static void on_delivery(void *ctx, int64_t row_id, rd_kafka_resp_err_t err, const char *topic,
                        int maybe_persisted)
{
    struct relay *r = ctx;
    if (row_id < 0) { /* a dead-letter copy */
        if (err)
            log_warn("kafka: dead-letter copy of row %lld failed: %s", (long long)-row_id,
                     rd_kafka_err2str(err));
        return;
    }
    struct inflight_row *row = find_row(r, row_id);
    if (!row || row->state != ROW_PRODUCED) {
        log_warn("kafka: delivery report for row %lld that is not in flight", (long long)row_id);
        return;
    }
    if (!err) {
        set_state(r, row, ROW_ACKED);
        r->m.published_total++;
        histogram_observe(&r->m.latency, (double)(wall_ms() - row->created_ms) / 1000.0);
        if (r->isolate_until_id) {
            if (row->id >= r->isolate_until_id) {
                log_info("relay: isolation done at row %lld; back to batches", (long long)row->id);
                r->isolate_until_id = 0;
            }
            r->claim_wanted = 1; /* one row at a time: the next claim follows this report */
        }
#ifdef OUTBOX_TEST_HOOKS
        if (r->test_fatal_after > 0 && r->m.published_total == (uint64_t)r->test_fatal_after) {
            log_warn("test hook: injecting a fatal producer error");
            sink_test_fatal(r->sink);
        }
#endif
        if (r->mode == MODE_RUNNING)
            backoff_reset(&r->reset_backoff);
    } else {
        row->err = err;
        row->fail = classify(err);
        row->maybe_persisted = maybe_persisted;
        set_state(r, row, ROW_FAILED);
        r->m.publish_failures_total[row->fail]++;
        log_debug("kafka: delivery of row %lld to %s failed: %s", (long long)row_id,
                  topic ? topic : "?", rd_kafka_err2name(err));
        if (row->fail == FAILURE_TOPIC && topic)
            pause_topic(r, topic, err);
        char reason[300];
        snprintf(reason, sizeof(reason), "delivery to %s failed: %s", topic ? topic : "?",
                 rd_kafka_err2str(err));
        start_reset(r, reason);
    }
    schedule_kick(r);
}

static void on_fatal(void *ctx, const char *reason)
{
    struct relay *r = ctx;
    char why[300];
    snprintf(why, sizeof(why), "fatal producer error: %s", reason);
    r->fatal_pending = 1;
    start_reset(r, why);
    schedule_kick(r);
}

/* ---- PostgreSQL callbacks ------------------------------------------------ */

static void worker_ready(void *ctx)
{
    struct relay *r = ctx;
    r->busy = 0;
    r->schema_ok = 0;
    kick(r);
}

static void worker_lost(void *ctx, const char *why)
{
    struct relay *r = ctx;
    r->busy = 0;
    r->m.pg_reconnects_total++;
    lose_leases(r, why); /* the session's advisory locks are gone with it */
}

static void listener_ready(void *ctx)
{
    struct relay *r = ctx;
    /* LISTEN misses what happened while disconnected: poll once. */
    r->doorbell_armed = 0;
    r->claim_wanted = 1;
    kick(r);
}

static void listener_notify(void *ctx, const PGnotify *n)
{
    struct relay *r = ctx;
    (void)n;
    r->m.doorbell_wakeups_total++;
    r->doorbell_armed = 0;
    r->idle_delay_ms = MIN_POLL_DELAY_MS;
    r->claim_wanted = 1;
    kick(r);
}

/* ---- scheduling ---------------------------------------------------------- */

static int claim_ready(const struct relay *r)
{
    return r->claim_wanted && r->mode == MODE_RUNNING && !r->claim_res &&
           (!r->isolate_until_id || r->n_rows == 0) &&
           r->n_rows + (size_t)r->cfg->batch_size <= (size_t)r->cfg->max_inflight;
}

static void kick(struct relay *r)
{
    if (r->mode == MODE_DONE)
        return;
    sink_poll(r->sink);
    produce_claimed(r);
    if (r->mode == MODE_RESETTING)
        advance_reset(r);
    if (r->mode == MODE_DRAINING && r->n_state[ROW_PRODUCED] == 0 && r->n_state[ROW_ACKED] == 0 &&
        r->n_state[ROW_MARKING] == 0 && r->n_updates == 0) {
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
            if (r->leases[p].state == LEASE_ACTIVE || r->leases[p].state == LEASE_GRACE)
                r->leases[p].state = LEASE_DRAINING;
        int leases_left = 0;
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
            leases_left += r->leases[p].state != LEASE_FREE;
        if ((!leases_left && !r->n_lease_events) || !pgconn_connected(r->worker)) {
            log_info("shutdown: all acknowledged rows marked, leases released; exiting");
            finish(r, 0);
            return;
        }
    }
    if (r->busy || !pgconn_idle(r->worker) || ev_is_active(&r->retry_timer))
        return;
    expire_pauses(r);
    if (!r->schema_ok) {
        const char *params[1] = {r->cfg->table};
        worker_send(r, r->sql.version, 1, params, version_done);
    } else if (r->n_updates) {
        send_update(r);
    } else if (r->n_lease_events) {
        send_lease_log(r);
    } else if (send_lease_release(r)) {
        /* drained partitions handed back */
    } else if (r->lease_due && (r->mode == MODE_RUNNING || r->mode == MODE_RESETTING)) {
        char key[16];
        snprintf(key, sizeof(key), "%d", r->sql.lease_key);
        const char *params[1] = {key};
        r->lease_due = 0;
        worker_send(r, r->sql.lease_scan, 1, params, lease_scan_done);
    } else if (r->n_state[ROW_ACKED] && !(r->last_was_mark && claim_ready(r))) {
        /* Marks and claims alternate while both are wanted, so that acknowledgements
         * arriving in small groups cannot starve claiming (and the in-flight window
         * stays full while Kafka works). */
        r->last_was_mark = 1;
        send_mark(r);
    } else if (r->n_state[ROW_FAILED] && r->mode == MODE_RESETTING && !r->n_state[ROW_PRODUCED]) {
        send_note_failed(r);
    } else if (r->arm_wanted && r->mode == MODE_RUNNING) {
        send_arm(r);
    } else if (claim_ready(r)) {
        r->last_was_mark = 0;
        send_claim(r);
    } else if (r->n_state[ROW_ACKED]) {
        r->last_was_mark = 1;
        send_mark(r);
    }
}

/* ---- reporting ----------------------------------------------------------- */

/* Why the backlog is not moving, or NULL. */
static const char *stall_reason(struct relay *r)
{
    int64_t now = mono_ms();
    if (r->m.marked_total != r->last_progress_marked ||
        (r->m.pending_rows == 0 && r->n_rows == 0)) {
        r->last_progress_marked = r->m.marked_total;
        r->last_progress_ms = now;
        return NULL;
    }
    if (now - r->last_progress_ms < STALL_AFTER_MS)
        return NULL;
    if (!pgconn_connected(r->worker))
        return "postgres_unreachable";
    if (sink_brokers_up(r->sink) == 0)
        return "kafka_unreachable";
    if (r->n_paused)
        return "topic_paused";
    if (r->m.failed_rows > 0)
        return "parked_key";
    if (r->m.long_tx_pid || r->m.long_tx_xid[0])
        return "long_transaction";
    return "unknown";
}

static void render_status(struct relay *r, struct strbuf *o)
{
    struct metrics *m = &r->m;
    strbuf_printf(o, "{\"version\":\"%s\",\"relay\":", OUTBOX_VERSION);
    strbuf_json_string(o, r->cfg->relay_name, strlen(r->cfg->relay_name));
    strbuf_puts(o, ",\"table\":");
    strbuf_json_string(o, r->cfg->table, strlen(r->cfg->table));
    strbuf_printf(o,
                  ",\"state\":{\"postgres_connected\":%s,\"kafka_brokers_up\":%d,"
                  "\"degraded\":%s,\"stall_reason\":%s%s%s,\"shutting_down\":%s},",
                  m->pg_connected ? "true" : "false", m->kafka_brokers_up,
                  m->degraded ? "true" : "false", m->stall_reason ? "\"" : "",
                  m->stall_reason ? m->stall_reason : "null", m->stall_reason ? "\"" : "",
                  r->mode == MODE_DRAINING ? "true" : "false");
    strbuf_printf(o,
                  "\"backlog\":{\"pending_rows\":%lld,\"pending_rows_exact\":%s,"
                  "\"oldest_pending_age_seconds\":%.3f,\"failed_rows\":%lld,\"inflight_rows\":%lld},",
                  (long long)m->pending_rows, m->pending_rows_exact ? "true" : "false",
                  m->oldest_pending_age_seconds, (long long)m->failed_rows,
                  (long long)m->inflight_rows);
    strbuf_printf(o,
                  "\"flow\":{\"published_total\":%llu,\"marked_total\":%llu,\"parked_total\":%llu,"
                  "\"possible_duplicates_total\":%llu,\"latency_p50_seconds\":%.4f,"
                  "\"latency_p99_seconds\":%.4f},",
                  (unsigned long long)m->published_total, (unsigned long long)m->marked_total,
                  (unsigned long long)m->parked_total,
                  (unsigned long long)m->possible_duplicates_total,
                  histogram_quantile(&m->latency, 0.5), histogram_quantile(&m->latency, 0.99));
    strbuf_puts(o, "\"paused_topics\":[");
    for (size_t i = 0; i < r->n_paused; i++) {
        if (i)
            strbuf_puts(o, ",");
        strbuf_json_string(o, r->paused[i].name, strlen(r->paused[i].name));
    }
    strbuf_puts(o, "],\"long_transaction\":");
    if (m->long_tx_pid || m->long_tx_xid[0]) {
        strbuf_printf(o, "{\"pid\":%d,\"age_seconds\":%.1f,\"xid\":", m->long_tx_pid,
                      m->long_tx_age_seconds);
        strbuf_json_string(o, m->long_tx_xid, strlen(m->long_tx_xid));
        strbuf_puts(o, ",\"application_name\":");
        strbuf_json_string(o, m->long_tx_application, strlen(m->long_tx_application));
        strbuf_puts(o, "}");
    } else {
        strbuf_puts(o, "null");
    }
    strbuf_puts(o, "}\n");
}

static void publish_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    struct metrics *m = &r->m;
    m->inflight_rows = (int64_t)r->n_rows;
    m->lease_partitions_held = leases_held(r);
    m->pg_connected = pgconn_connected(r->worker);
    m->kafka_brokers_up = sink_brokers_up(r->sink);
    m->n_paused_topics = r->n_paused < METRICS_MAX_PAUSED ? r->n_paused : METRICS_MAX_PAUSED;
    for (size_t i = 0; i < m->n_paused_topics; i++)
        snprintf(m->paused_topics[i], sizeof(m->paused_topics[i]), "%s", r->paused[i].name);
    m->stall_reason = stall_reason(r);
    m->degraded = m->stall_reason != NULL || !m->pg_connected || m->kafka_brokers_up == 0;
    if (m->stall_reason != r->stall_logged) {
        if (m->stall_reason)
            log_warn("stalled: the backlog (%lld pending, oldest %.0fs) has not moved for %d s: %s",
                     (long long)m->pending_rows, m->oldest_pending_age_seconds,
                     STALL_AFTER_MS / 1000, m->stall_reason);
        else if (r->stall_logged)
            log_info("flowing again (was stalled: %s)", r->stall_logged);
        r->stall_logged = m->stall_reason;
    }
    if (!r->http)
        return;
    struct strbuf text, status;
    strbuf_init(&text);
    strbuf_init(&status);
    metrics_render(m, OUTBOX_VERSION, &text);
    render_status(r, &status);
    int ready = r->schema_logged && r->mode != MODE_DRAINING;
    if (r->cfg->ready_strict)
        ready = ready && m->pg_connected && m->kafka_brokers_up > 0;
    http_publish(r->http, text.buf, status.buf, ready);
    strbuf_destroy(&text);
    strbuf_destroy(&status);
}

static void log_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    if (r->m.marked_total == r->marked_logged && r->n_rows == 0)
        return;
    log_info("relay: %llu rows marked SENT (+%llu in %.0fs), %zu in flight, %lld pending, "
             "%llu parked, kafka brokers up %d, postgres %s",
             (unsigned long long)r->m.marked_total,
             (unsigned long long)(r->m.marked_total - r->marked_logged), LOG_INTERVAL_S, r->n_rows,
             (long long)r->m.pending_rows, (unsigned long long)r->m.parked_total,
             sink_brokers_up(r->sink), pgconn_connected(r->worker) ? "connected" : "disconnected");
    r->marked_logged = r->m.marked_total;
}

/* ---- shutdown ------------------------------------------------------------ */

static void shutdown_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    log_warn("shutdown: timed out with %zu deliveries unacknowledged and %zu acknowledged rows "
             "unmarked; they stay PENDING and will be published again",
             r->n_state[ROW_PRODUCED], r->n_state[ROW_ACKED] + r->n_state[ROW_MARKING]);
    finish(r, 0);
}

void relay_shutdown(struct relay *r)
{
    r->shutdown_requests++;
    if (r->shutdown_requests > 1) {
        log_warn("shutdown: second signal, exiting at once");
        _exit(1);
    }
    if (r->mode == MODE_DONE)
        return;
    log_info("shutdown: stop claiming; waiting up to %d ms for %zu in-flight deliveries",
             r->cfg->shutdown_timeout_ms, r->n_state[ROW_PRODUCED]);
    release_claim(r);
    remove_rows(r, ROW_FAILED);
    r->mode = MODE_DRAINING;
    ev_timer_stop(r->loop, &r->poll_timer);
    ev_timer_stop(r->loop, &r->reset_timer);
    ev_timer_set(&r->shutdown_timer, r->cfg->shutdown_timeout_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->shutdown_timer);
    kick(r);
}

/* ---- life cycle ---------------------------------------------------------- */

struct relay *relay_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->loop = loop;
    r->cfg = cfg;
    r->mode = MODE_RUNNING;
    r->idle_delay_ms = MIN_POLL_DELAY_MS;
    metrics_init(&r->m);
    backoff_init(&r->reset_backoff, 200, 10000);
    outbox_sql_init(&r->sql, cfg);

    static const struct sink_callbacks sink_cb = {on_delivery, on_fatal};
    r->sink = sink_new(loop, cfg, &sink_cb, r, err, errlen);
    if (!r->sink) {
        relay_free(r);
        return NULL;
    }
    if (cfg->http_addr[0]) {
        r->http = http_new(cfg->http_addr, err, errlen);
        if (!r->http) {
            relay_free(r);
            return NULL;
        }
    }

    struct strbuf setup;
    strbuf_init(&setup);
    strbuf_printf(&setup,
                  "SET statement_timeout = %d; SET idle_in_transaction_session_timeout = 60000; "
                  "SET synchronous_commit = off; SET tcp_keepalives_idle = 1; "
                  "SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = %d; "
                  "SET tcp_user_timeout = %d; SET application_name = 'outbox-relay ",
                  cfg->statement_timeout_ms, cfg->lease_timeout_ms / 2000 > 0 ? cfg->lease_timeout_ms / 2000 : 1,
                  cfg->lease_timeout_ms / 2);
    for (const char *p = cfg->relay_name; *p && setup.len < 120; p++)
        if (*p != '\'' && *p != '\\')
            strbuf_append(&setup, p, 1);
    strbuf_puts(&setup, "'");
    static const struct pgconn_callbacks worker_cb = {worker_ready, worker_lost, NULL};
    r->worker = pgconn_new(loop, "worker", cfg->pg_dsn, setup.buf, cfg->reconnect_max_ms,
                           &worker_cb, r);
    strbuf_destroy(&setup);
    if (cfg->notify_channel[0]) {
        char listen[160];
        snprintf(listen, sizeof(listen),
                 "SET application_name = 'outbox-relay listen'; LISTEN \"%s\"", cfg->notify_channel);
        static const struct pgconn_callbacks listen_cb = {listener_ready, NULL, listener_notify};
        r->listener = pgconn_new(loop, "listen", cfg->pg_dsn, listen, cfg->reconnect_max_ms,
                                 &listen_cb, r);
    }
    r->monitor = monitor_new(loop, cfg, &r->sql, &r->m);

    ev_init(&r->poll_timer, poll_timer_cb);
    r->poll_timer.data = r;
    ev_init(&r->retry_timer, retry_cb);
    r->retry_timer.data = r;
    ev_init(&r->reset_timer, reset_timer_cb);
    r->reset_timer.data = r;
    ev_init(&r->shutdown_timer, shutdown_timeout_cb);
    r->shutdown_timer.data = r;
    r->grace_ms = cfg->lease_timeout_ms * 2 / 5;    /* > the old holder's deadline */
    r->deadline_ms = cfg->lease_timeout_ms * 3 / 10; /* < the server's detection time */
    snprintf(r->incarnation, sizeof(r->incarnation), "%s/%d", cfg->relay_name, (int)getpid());
    ev_timer_init(&r->lease_timer, lease_timer_cb, cfg->lease_timeout_ms / 5000.0,
                  cfg->lease_timeout_ms / 5000.0);
    r->lease_timer.data = r;
    r->lease_due = 1;
    ev_timer_init(&r->log_timer, log_cb, LOG_INTERVAL_S, LOG_INTERVAL_S);
    r->log_timer.data = r;
    ev_timer_init(&r->publish_timer, publish_cb, 0.0, PUBLISH_INTERVAL_S);
    r->publish_timer.data = r;
    ev_prepare_init(&r->kick_prepare, kick_prepare_cb);
    r->kick_prepare.data = r;

#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER");
    r->test_kill_before_mark_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_FATAL_AFTER");
    r->test_fatal_after = hook ? atoll(hook) : 0;
#endif
    return r;
}

void relay_start(struct relay *r)
{
    log_info("relay %s: table %s, topic template %s, batch %d, max in flight %d, poll interval "
             "%d ms, notify channel %s, retention %s", r->cfg->relay_name, r->cfg->table,
             r->cfg->topic_template, r->cfg->batch_size, r->cfg->max_inflight,
             r->cfg->poll_interval_ms,
             r->cfg->notify_channel[0] ? r->cfg->notify_channel : "(none)", r->cfg->retention);
    r->last_progress_ms = mono_ms();
    pgconn_start(r->worker);
    if (r->listener)
        pgconn_start(r->listener);
    monitor_start(r->monitor);
    ev_timer_start(r->loop, &r->log_timer);
    ev_timer_start(r->loop, &r->publish_timer);
    ev_timer_start(r->loop, &r->lease_timer);
}

void relay_free(struct relay *r)
{
    if (!r)
        return;
    ev_timer_stop(r->loop, &r->poll_timer);
    ev_timer_stop(r->loop, &r->retry_timer);
    ev_timer_stop(r->loop, &r->reset_timer);
    ev_timer_stop(r->loop, &r->shutdown_timer);
    ev_timer_stop(r->loop, &r->log_timer);
    ev_timer_stop(r->loop, &r->publish_timer);
    ev_timer_stop(r->loop, &r->lease_timer);
    ev_prepare_stop(r->loop, &r->kick_prepare);
    http_free(r->http);
    sink_free(r->sink);
    monitor_free(r->monitor);
    pgconn_free(r->worker);
    pgconn_free(r->listener);
    release_claim(r);
    free(r->blocked_keys);
    for (size_t i = 0; i < r->n_updates; i++)
        free(r->updates[i].reason);
    free(r->updates);
    free(r->lease_events);
    free(r->rows);
    outbox_sql_destroy(&r->sql);
    free(r);
}

int relay_exit_code(const struct relay *r)
{
    return r->exit_code;
}

const struct metrics *relay_metrics(const struct relay *r)
{
    return &r->m;
}
