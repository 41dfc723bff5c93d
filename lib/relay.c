/* The relay loop: claim -> produce -> delivery reports -> mark SENT, with the
 * in-flight window, adaptive poll, doorbell, resets after failed deliveries, and the
 * shutdown state machine. */
#include "relay.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backoff.h"
#include "log.h"
#include "message.h"
#include "pgconn.h"
#include "schema.h"
#include "sink.h"
#include "util.h"

#define MIN_POLL_DELAY_MS 5
#define MARK_MAX_IDS 10000
#define STATS_INTERVAL_S 10.0

enum row_state { ROW_QUEUED, ROW_PRODUCED, ROW_ACKED, ROW_MARKING, ROW_FAILED, ROW_PARKING, ROW_STATES };

/* A claimed row not yet marked: the in-flight window. Kept sorted by id. */
struct inflight_row {
    int64_t id;
    int64_t created_ms;
    enum row_state state;
};

enum relay_mode { MODE_RUNNING, MODE_RESETTING, MODE_DRAINING, MODE_DONE };

enum worker_query { Q_NONE, Q_VERSION, Q_CLAIM, Q_MARK, Q_PARK, Q_NOTE_FAILED, Q_ARM };

struct park {
    int64_t id;
    char *reason;
};

struct relay {
    struct ev_loop *loop;
    const struct config *cfg;
    struct pgconn *worker;
    struct pgconn *listener;
    struct sink *sink;

    char *sql_claim;
    char *sql_mark;
    char *sql_park;
    char *sql_note_failed;
    char *sql_arm;
    char *sql_version;

    struct inflight_row *rows;
    size_t n_rows, cap_rows;
    size_t n_state[ROW_STATES];

    /* The last claim's rows not yet produced (backpressure), and keys blocked in it
     * because an earlier row of the key was parked. */
    PGresult *claim_res;
    int claim_next;
    char **blocked_keys;
    size_t n_blocked_keys;

    struct park *parks;
    size_t n_parks;
    size_t parks_sent;

    enum worker_query query;
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

    ev_timer stats_timer;
    struct relay_stats stats;
    uint64_t stats_marked_logged;
    ev_prepare kick_prepare;

#ifdef OUTBOX_TEST_HOOKS
    long long test_kill_before_mark_after; /* SIGKILL self once this many rows were acked */
    long long test_fatal_after;            /* raise a fatal producer error after this many acks */
#endif
};

static void kick(struct relay *r);

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

/* ---- SQL ----------------------------------------------------------------- */

static void build_sql(struct relay *r)
{
    char *schema_q, *table_q, *name;
    schema_names(r->cfg->table, &schema_q, &table_q, &name);
    struct strbuf sb;

    /* Every claim starts at the bottom of the pending index and skips only the rows in
     * flight: it scans the gaps between in-flight ids ($1 = gap starts, $2 = gap ends), so
     * a row that commits late below rows already published is still found, and in id
     * order with the later rows of its key. Keys with a parked row wait. */
    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, "
                  "o.topic, o.payload::text, o.headers::text, "
                  "(extract(epoch FROM o.created_at) * 1000)::int8, o.attempts "
                  "FROM unnest($1::int8[], $2::int8[]) AS g(lo, hi) "
                  "CROSS JOIN LATERAL ("
                  " SELECT * FROM %s p"
                  " WHERE p.status = 'PENDING' AND p.id BETWEEN g.lo AND g.hi"
                  " AND NOT EXISTS (SELECT 1 FROM %s f"
                  "  WHERE f.status = 'FAILED' AND f.aggregate_id = p.aggregate_id)"
                  " ORDER BY p.id LIMIT $3) o "
                  "ORDER BY o.id LIMIT $3",
                  table_q, table_q);
    r->sql_claim = sb.buf;

    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "UPDATE %s SET status = 'SENT', sent_at = clock_timestamp() "
                  "WHERE id = ANY($1::int8[]) AND status = 'PENDING'",
                  table_q);
    r->sql_mark = sb.buf;

    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "UPDATE %s SET status = 'FAILED', attempts = attempts + 1, last_error = $2 "
                  "WHERE id = $1::int8 AND status = 'PENDING'",
                  table_q);
    r->sql_park = sb.buf;

    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "UPDATE %s SET attempts = attempts + 1, last_error = $2 "
                  "WHERE id = ANY($1::int8[]) AND status = 'PENDING'",
                  table_q);
    r->sql_note_failed = sb.buf;

    strbuf_init(&sb);
    strbuf_printf(&sb, "UPDATE %s.\"%s_doorbell\" SET armed = true, channel = $1", schema_q, name);
    r->sql_arm = sb.buf;

    r->sql_version = schema_version_query(r->cfg->table);
    free(schema_q);
    free(table_q);
    free(name);
}

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
    r->stats.resets++;
    release_claim(r);
    ev_timer_stop(r->loop, &r->poll_timer);
    log_warn("relay: delivery failed (%s); pausing claims until in-flight deliveries settle, "
             "then re-claiming from the lowest pending row", reason);
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
        log_info("relay: resuming claims");
    }
    kick(r);
}

/* Moves a reset forward: recreate a fatal producer, wait for reports and marks, record
 * the failures, back off, resume. */
static void advance_reset(struct relay *r)
{
    if (r->fatal_pending) {
        char err[512];
        r->fatal_pending = 0;
        if (sink_recreate(r->sink, err, sizeof(err)) != 0) {
            log_error("relay: %s", err);
            r->fatal_pending = 1;
        } else {
            r->stats.producer_recreated++;
        }
        /* Reports the old producer never gave: those rows were not acknowledged. */
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].state == ROW_PRODUCED)
                set_state(r, &r->rows[i], ROW_FAILED);
    }
    if (r->n_state[ROW_PRODUCED] || r->n_state[ROW_ACKED] || r->n_state[ROW_MARKING] ||
        r->n_state[ROW_FAILED] || r->n_state[ROW_PARKING] || r->reset_waiting)
        return;
    int delay = backoff_next(&r->reset_backoff);
    r->reset_waiting = 1;
    ev_timer_set(&r->reset_timer, delay / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->reset_timer);
    log_info("relay: in-flight deliveries settled; re-claiming in %d ms", delay);
}

/* ---- worker queries ------------------------------------------------------ */

static void version_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
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
            r->exit_code = 1;
            r->mode = MODE_DONE;
            ev_break(r->loop, EVBREAK_ALL);
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
        r->exit_code = 1;
        r->mode = MODE_DONE;
        ev_break(r->loop, EVBREAK_ALL);
        return;
    }
    if (!r->schema_logged)
        log_info("schema: %s at version %d", r->cfg->table, have);
    r->schema_logged = 1;
    r->schema_ok = 1;
    r->claim_wanted = 1;
    kick(r);
}

static void send_version_check(struct relay *r)
{
    const char *params[1] = {r->cfg->table};
    if (pgconn_query(r->worker, r->sql_version, 1, params, version_done, r) == 0)
        r->query = Q_VERSION;
}

static void poll_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    r->claim_wanted = 1;
    kick(r);
}

/* Adaptive poll: claim again at once after a full batch, soon after a partial one,
 * and back off towards OUTBOX_POLL_INTERVAL_MS while claims come back empty. */
static void after_claim(struct relay *r, int rows)
{
    if (rows >= r->cfg->batch_size) {
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
    ev_timer_stop(r->loop, &r->poll_timer);
    ev_timer_set(&r->poll_timer, r->idle_delay_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->poll_timer);
}

static void claim_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
    r->stats.claims++;
    if (!result_ok(res)) {
        statement_failed(r, "claim", res);
        PQclear(res);
        r->claim_wanted = 1;
        return;
    }
    int n = PQntuples(res);
    if (r->mode != MODE_RUNNING || n == 0) {
        PQclear(res);
        if (r->mode == MODE_RUNNING)
            after_claim(r, 0);
        kick(r);
        return;
    }
    struct inflight_row *add = xmalloc((size_t)n * sizeof(*add));
    for (int i = 0; i < n; i++) {
        add[i].id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        add[i].created_ms = strtoll(PQgetvalue(res, i, 8), NULL, 10);
        add[i].state = ROW_QUEUED;
    }
    add_rows(r, add, (size_t)n);
    free(add);
    r->stats.claimed += (uint64_t)n;
    log_debug("claim: %d rows, ids %s..%s, in flight %zu", n, PQgetvalue(res, 0, 0),
              PQgetvalue(res, n - 1, 0), r->n_rows);
    r->claim_res = res;
    r->claim_next = 0;
    after_claim(r, n);
    kick(r);
}

static void append_gap(struct strbuf *lo, struct strbuf *hi, int64_t from, int64_t to)
{
    strbuf_printf(lo, "%s%lld", lo->len > 1 ? "," : "", (long long)from);
    strbuf_printf(hi, "%s%lld", hi->len > 1 ? "," : "", (long long)to);
}

static void send_claim(struct relay *r)
{
    struct strbuf lo, hi;
    strbuf_init(&lo);
    strbuf_init(&hi);
    strbuf_puts(&lo, "{");
    strbuf_puts(&hi, "{");
    int64_t from = 0;
    for (size_t i = 0; i < r->n_rows; i++) {
        if (r->rows[i].id > from)
            append_gap(&lo, &hi, from, r->rows[i].id - 1);
        from = r->rows[i].id + 1;
    }
    append_gap(&lo, &hi, from, INT64_MAX);
    strbuf_puts(&lo, "}");
    strbuf_puts(&hi, "}");
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", r->cfg->batch_size);
    const char *params[3] = {lo.buf, hi.buf, limit};
    if (pgconn_query(r->worker, r->sql_claim, 3, params, claim_done, r) == 0) {
        r->query = Q_CLAIM;
        r->claim_wanted = 0;
        ev_timer_stop(r->loop, &r->poll_timer);
    }
    strbuf_destroy(&lo);
    strbuf_destroy(&hi);
}

static void mark_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
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
    r->stats.marked += n;
    log_debug("mark: %zu rows SENT, in flight %zu", n, r->n_rows);
    kick(r);
}

static void send_mark(struct relay *r)
{
#ifdef OUTBOX_TEST_HOOKS
    if (r->test_kill_before_mark_after > 0 &&
        r->stats.acked >= (uint64_t)r->test_kill_before_mark_after) {
        log_warn("test hook: SIGKILL before marking %zu acknowledged rows",
                 r->n_state[ROW_ACKED]);
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
    const char *params[1] = {ids.buf};
    if (pgconn_query(r->worker, r->sql_mark, 1, params, mark_done, r) == 0)
        r->query = Q_MARK;
    else
        for (size_t i = 0; i < r->n_rows; i++)
            if (r->rows[i].state == ROW_MARKING)
                set_state(r, &r->rows[i], ROW_ACKED);
    strbuf_destroy(&ids);
}

static void park_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
    struct park *p = &r->parks[0];
    if (!result_ok(res)) {
        statement_failed(r, "park", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    struct inflight_row *row = find_row(r, p->id);
    if (row)
        remove_one(r, row);
    r->stats.parked++;
    free(p->reason);
    memmove(&r->parks[0], &r->parks[1], (r->n_parks - 1) * sizeof(*r->parks));
    r->n_parks--;
    kick(r);
}

static void send_park(struct relay *r)
{
    char id[24];
    snprintf(id, sizeof(id), "%lld", (long long)r->parks[0].id);
    const char *params[2] = {id, r->parks[0].reason};
    if (pgconn_query(r->worker, r->sql_park, 2, params, park_done, r) == 0)
        r->query = Q_PARK;
}

static void note_failed_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
    if (!result_ok(res)) {
        statement_failed(r, "recording failed deliveries", res);
        PQclear(res);
        return;
    }
    PQclear(res);
    size_t n = remove_rows(r, ROW_FAILED);
    log_info("relay: %zu rows whose delivery failed stay PENDING (attempts recorded)", n);
    kick(r);
}

static void send_note_failed(struct relay *r)
{
    struct strbuf ids;
    strbuf_init(&ids);
    strbuf_puts(&ids, "{");
    size_t n = 0;
    for (size_t i = 0; i < r->n_rows; i++)
        if (r->rows[i].state == ROW_FAILED)
            strbuf_printf(&ids, "%s%lld", n++ ? "," : "", (long long)r->rows[i].id);
    strbuf_puts(&ids, "}");
    const char *params[2] = {ids.buf, r->last_failure};
    if (pgconn_query(r->worker, r->sql_note_failed, 2, params, note_failed_done, r) == 0)
        r->query = Q_NOTE_FAILED;
    strbuf_destroy(&ids);
}

static void arm_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->query = Q_NONE;
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
    if (pgconn_query(r->worker, r->sql_arm, 1, params, arm_done, r) == 0)
        r->query = Q_ARM;
}

/* ---- producing ----------------------------------------------------------- */

static int key_blocked(struct relay *r, const char *key)
{
    for (size_t i = 0; i < r->n_blocked_keys; i++)
        if (strcmp(r->blocked_keys[i], key) == 0)
            return 1;
    return 0;
}

/* A row that can never be published: park it and hold the rest of its key. */
static void park_row(struct relay *r, struct inflight_row *row, const char *key, const char *reason)
{
    log_warn("relay: parking row id=%lld key=%s: %s", (long long)row->id, key, reason);
    set_state(r, row, ROW_PARKING);
    r->parks = xrealloc(r->parks, (r->n_parks + 1) * sizeof(*r->parks));
    r->parks[r->n_parks++] = (struct park){row->id, xstrdup(reason)};
    r->blocked_keys = xrealloc(r->blocked_keys, (r->n_blocked_keys + 1) * sizeof(char *));
    r->blocked_keys[r->n_blocked_keys++] = xstrdup(key);
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
        if (key_blocked(r, row.aggregate_id)) {
            remove_one(r, slot); /* stays PENDING; the parked key now holds it back */
            r->claim_next++;
            continue;
        }
        struct message msg;
        char reason[512];
        if (message_build(&row, r->cfg->topic_template, &msg, reason, sizeof(reason)) != 0) {
            park_row(r, slot, row.aggregate_id, reason);
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
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
            snprintf(reason, sizeof(reason), "message of %zu bytes is larger than the producer's "
                     "message.max.bytes", row.payload_len);
            park_row(r, slot, row.aggregate_id, reason);
        } else if (err) {
            set_state(r, slot, ROW_FAILED);
            snprintf(reason, sizeof(reason), "produce to %s: %s", msg.topic, rd_kafka_err2str(err));
            message_destroy(&msg);
            r->claim_next++;
            start_reset(r, reason);
            return;
        } else {
            set_state(r, slot, ROW_PRODUCED);
            r->stats.produced++;
        }
        message_destroy(&msg);
        r->claim_next++;
    }
    release_claim(r);
}

/* ---- Kafka callbacks (loop thread) --------------------------------------- */

static void on_delivery(void *ctx, int64_t row_id, rd_kafka_resp_err_t err, int32_t partition)
{
    struct relay *r = ctx;
    (void)partition;
    struct inflight_row *row = find_row(r, row_id);
    if (!row || row->state != ROW_PRODUCED) {
        log_warn("kafka: delivery report for row %lld that is not in flight", (long long)row_id);
        return;
    }
    if (!err) {
        set_state(r, row, ROW_ACKED);
        r->stats.acked++;
#ifdef OUTBOX_TEST_HOOKS
        if (r->test_fatal_after > 0 && r->stats.acked == (uint64_t)r->test_fatal_after) {
            log_warn("test hook: injecting a fatal producer error");
            sink_test_fatal(r->sink);
        }
#endif
        if (r->mode == MODE_RUNNING)
            backoff_reset(&r->reset_backoff);
    } else {
        set_state(r, row, ROW_FAILED);
        r->stats.delivery_failures++;
        char reason[256];
        snprintf(reason, sizeof(reason), "delivery failed: %s", rd_kafka_err2str(err));
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
    r->query = Q_NONE;
    r->schema_ok = 0;
    kick(r);
}

static void worker_lost(void *ctx, const char *why)
{
    struct relay *r = ctx;
    (void)why;
    r->query = Q_NONE;
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
    r->doorbell_armed = 0;
    r->idle_delay_ms = MIN_POLL_DELAY_MS;
    r->claim_wanted = 1;
    kick(r);
}

/* ---- scheduling ---------------------------------------------------------- */

static void finish(struct relay *r)
{
    r->mode = MODE_DONE;
    ev_break(r->loop, EVBREAK_ALL);
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
        r->n_state[ROW_MARKING] == 0 && r->n_parks == 0) {
        log_info("shutdown: all acknowledged rows marked; exiting");
        finish(r);
        return;
    }
    if (!pgconn_idle(r->worker) || ev_is_active(&r->retry_timer))
        return;
    if (!r->schema_ok)
        send_version_check(r);
    else if (r->n_parks)
        send_park(r);
    else if (r->n_state[ROW_ACKED])
        send_mark(r);
    else if (r->n_state[ROW_FAILED] && r->mode == MODE_RESETTING && !r->n_state[ROW_PRODUCED])
        send_note_failed(r);
    else if (r->arm_wanted && r->mode == MODE_RUNNING)
        send_arm(r);
    else if (r->claim_wanted && r->mode == MODE_RUNNING && !r->claim_res &&
             r->n_rows + (size_t)r->cfg->batch_size <= (size_t)r->cfg->max_inflight)
        send_claim(r);
}

static void stats_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    if (r->stats.marked == r->stats_marked_logged && r->n_rows == 0)
        return;
    log_info("relay: %llu rows marked SENT (+%llu in %.0fs), %zu in flight, %llu parked, "
             "%llu delivery failures, kafka %s, postgres %s",
             (unsigned long long)r->stats.marked,
             (unsigned long long)(r->stats.marked - r->stats_marked_logged), STATS_INTERVAL_S,
             r->n_rows, (unsigned long long)r->stats.parked,
             (unsigned long long)r->stats.delivery_failures,
             sink_brokers_up(r->sink) ? "up" : "down",
             pgconn_connected(r->worker) ? "connected" : "disconnected");
    r->stats_marked_logged = r->stats.marked;
}

static void shutdown_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    log_warn("shutdown: timed out with %zu deliveries unacknowledged and %zu acknowledged rows "
             "unmarked; they stay PENDING and will be published again",
             r->n_state[ROW_PRODUCED], r->n_state[ROW_ACKED] + r->n_state[ROW_MARKING]);
    finish(r);
}

void relay_shutdown(struct relay *r)
{
    r->shutdown_requests++;
    if (r->shutdown_requests > 1) {
        log_warn("shutdown: second signal, exiting at once");
        _exit(1);
    }
    log_info("shutdown: stop claiming; waiting up to %d ms for %zu in-flight deliveries",
             r->cfg->shutdown_timeout_ms, r->n_state[ROW_PRODUCED]);
    if (r->mode == MODE_DONE)
        return;
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
    backoff_init(&r->reset_backoff, 200, 10000);
    build_sql(r);

    static const struct sink_callbacks sink_cb = {on_delivery, on_fatal};
    r->sink = sink_new(loop, cfg, &sink_cb, r, err, errlen);
    if (!r->sink) {
        relay_free(r);
        return NULL;
    }

    char setup[256];
    snprintf(setup, sizeof(setup),
             "SET statement_timeout = %d; SET idle_in_transaction_session_timeout = 60000",
             cfg->statement_timeout_ms);
    static const struct pgconn_callbacks worker_cb = {worker_ready, worker_lost, NULL};
    r->worker = pgconn_new(loop, "worker", cfg->pg_dsn, setup, cfg->reconnect_max_ms, &worker_cb, r);
    if (cfg->notify_channel[0]) {
        char listen[128];
        snprintf(listen, sizeof(listen), "LISTEN \"%s\"", cfg->notify_channel);
        static const struct pgconn_callbacks listen_cb = {listener_ready, NULL, listener_notify};
        r->listener = pgconn_new(loop, "listen", cfg->pg_dsn, listen, cfg->reconnect_max_ms,
                                 &listen_cb, r);
    }

    ev_init(&r->poll_timer, poll_timer_cb);
    r->poll_timer.data = r;
    ev_init(&r->retry_timer, retry_cb);
    r->retry_timer.data = r;
    ev_init(&r->reset_timer, reset_timer_cb);
    r->reset_timer.data = r;
    ev_init(&r->shutdown_timer, shutdown_timeout_cb);
    r->shutdown_timer.data = r;
    ev_timer_init(&r->stats_timer, stats_cb, STATS_INTERVAL_S, STATS_INTERVAL_S);
    r->stats_timer.data = r;
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
    log_info("relay: table %s, topic template %s, batch %d, max in flight %d, poll interval "
             "%d ms, notify channel %s", r->cfg->table, r->cfg->topic_template,
             r->cfg->batch_size, r->cfg->max_inflight, r->cfg->poll_interval_ms,
             r->cfg->notify_channel[0] ? r->cfg->notify_channel : "(none)");
    pgconn_start(r->worker);
    if (r->listener)
        pgconn_start(r->listener);
    ev_timer_start(r->loop, &r->stats_timer);
}

void relay_free(struct relay *r)
{
    if (!r)
        return;
    ev_timer_stop(r->loop, &r->poll_timer);
    ev_timer_stop(r->loop, &r->retry_timer);
    ev_timer_stop(r->loop, &r->reset_timer);
    ev_timer_stop(r->loop, &r->shutdown_timer);
    ev_timer_stop(r->loop, &r->stats_timer);
    ev_prepare_stop(r->loop, &r->kick_prepare);
    sink_free(r->sink);
    pgconn_free(r->worker);
    pgconn_free(r->listener);
    release_claim(r);
    free(r->blocked_keys);
    for (size_t i = 0; i < r->n_parks; i++)
        free(r->parks[i].reason);
    free(r->parks);
    free(r->rows);
    free(r->sql_claim);
    free(r->sql_mark);
    free(r->sql_park);
    free(r->sql_note_failed);
    free(r->sql_arm);
    free(r->sql_version);
    free(r);
}

int relay_exit_code(const struct relay *r)
{
    return r->exit_code;
}

const struct relay_stats *relay_stats(const struct relay *r)
{
    return &r->stats;
}

size_t relay_inflight(const struct relay *r)
{
    return r->n_rows;
}
