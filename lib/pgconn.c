/* Non-blocking PostgreSQL connection on the libev loop, with reconnect. */
#include "pgconn.h"

#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "log.h"
#include "util.h"

#define CONNECT_TIMEOUT_S 15.0

enum pg_state { PG_DOWN, PG_CONNECTING, PG_SETUP, PG_IDLE, PG_BUSY, PG_STOPPED };

struct pgconn {
    struct ev_loop *loop;
    char *name;
    char *dsn;
    char *setup_sql;
    struct pgconn_callbacks cb;
    void *ctx;

    PGconn *conn;
    enum pg_state state;
    ev_io io;
    ev_timer timer; /* connect timeout, or reconnect delay */
    struct backoff backoff;

    pgconn_result_cb query_cb;
    void *query_ctx;
    PGresult *first_result;
};

static void io_cb(struct ev_loop *loop, ev_io *w, int revents);
static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

struct pgconn *pgconn_new(struct ev_loop *loop, const char *name, const char *dsn,
                          const char *setup_sql, int reconnect_max_ms,
                          const struct pgconn_callbacks *cb, void *ctx)
{
    struct pgconn *pg = xcalloc(1, sizeof(*pg));
    pg->loop = loop;
    pg->name = xstrdup(name);
    pg->dsn = xstrdup(dsn ? dsn : "");
    pg->setup_sql = setup_sql ? xstrdup(setup_sql) : NULL;
    pg->cb = *cb;
    pg->ctx = ctx;
    pg->state = PG_STOPPED;
    backoff_init(&pg->backoff, 100, reconnect_max_ms);
    ev_init(&pg->io, io_cb);
    pg->io.data = pg;
    ev_init(&pg->timer, timer_cb);
    pg->timer.data = pg;
    return pg;
}

static void watch(struct pgconn *pg, int events)
{
    int fd = PQsocket(pg->conn);
    if (ev_is_active(&pg->io) && pg->io.fd == fd && (pg->io.events & (EV_READ | EV_WRITE)) == events)
        return;
    ev_io_stop(pg->loop, &pg->io);
    if (fd < 0)
        return;
    ev_io_set(&pg->io, fd, events);
    ev_io_start(pg->loop, &pg->io);
}

static void close_conn(struct pgconn *pg)
{
    ev_io_stop(pg->loop, &pg->io);
    ev_timer_stop(pg->loop, &pg->timer);
    if (pg->first_result) {
        PQclear(pg->first_result);
        pg->first_result = NULL;
    }
    if (pg->conn) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
}

static void schedule_reconnect(struct pgconn *pg)
{
    int delay = backoff_next(&pg->backoff);
    pg->state = PG_DOWN;
    ev_timer_set(&pg->timer, delay / 1000.0, 0.0);
    ev_timer_start(pg->loop, &pg->timer);
    log_info("pg %s: reconnecting in %d ms", pg->name, delay);
}

/* Connection gone: tell the pending query and the owner, then reconnect later. */
static void lost(struct pgconn *pg, const char *why)
{
    int was_up = pg->state == PG_IDLE || pg->state == PG_BUSY || pg->state == PG_SETUP;
    pgconn_result_cb qcb = pg->state == PG_BUSY ? pg->query_cb : NULL;
    void *qctx = pg->query_ctx;
    pg->query_cb = NULL;
    close_conn(pg);
    if (pg->state == PG_STOPPED)
        return;
    log_warn("pg %s: connection lost: %s", pg->name, why);
    schedule_reconnect(pg);
    if (qcb)
        qcb(qctx, NULL);
    if (was_up && pg->cb.on_lost)
        pg->cb.on_lost(pg->ctx, why);
}

static void conn_error(struct pgconn *pg)
{
    char why[512];
    const char *msg = pg->conn ? PQerrorMessage(pg->conn) : "no connection";
    snprintf(why, sizeof(why), "%.*s", (int)strcspn(msg, "\n"), msg);
    lost(pg, why[0] ? why : "connection failed");
}

static void start_connect(struct pgconn *pg)
{
    const char *keys[] = {"dbname", "fallback_application_name", "keepalives", "keepalives_idle",
                          "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                          "target_session_attrs", NULL};
    const char *vals[] = {pg->dsn, "outbox-relay", "1", "5", "2", "3", "10000", "read-write", NULL};
    pg->conn = PQconnectStartParams(keys, vals, 1);
    if (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD) {
        conn_error(pg);
        return;
    }
    pg->state = PG_CONNECTING;
    ev_timer_set(&pg->timer, CONNECT_TIMEOUT_S, 0.0);
    ev_timer_start(pg->loop, &pg->timer);
    watch(pg, EV_WRITE);
}

void pgconn_start(struct pgconn *pg)
{
    if (pg->state != PG_STOPPED)
        return;
    pg->state = PG_DOWN;
    start_connect(pg);
}

void pgconn_stop(struct pgconn *pg)
{
    pg->state = PG_STOPPED;
    close_conn(pg);
}

void pgconn_reset(struct pgconn *pg, const char *why)
{
    if (pg->state == PG_STOPPED || pg->state == PG_DOWN)
        return;
    lost(pg, why);
}

void pgconn_free(struct pgconn *pg)
{
    if (!pg)
        return;
    pgconn_stop(pg);
    free(pg->name);
    free(pg->dsn);
    free(pg->setup_sql);
    free(pg);
}

int pgconn_connected(const struct pgconn *pg)
{
    return pg->state == PG_IDLE || pg->state == PG_BUSY;
}

int pgconn_idle(const struct pgconn *pg)
{
    return pg->state == PG_IDLE;
}

static void flush_and_watch(struct pgconn *pg)
{
    int rc = PQflush(pg->conn);
    if (rc < 0) {
        conn_error(pg);
        return;
    }
    watch(pg, rc == 1 ? EV_READ | EV_WRITE : EV_READ);
}

static int send_query(struct pgconn *pg, const char *sql, int nparams, const char *const *values)
{
    int ok = nparams < 0 ? PQsendQuery(pg->conn, sql)
                         : PQsendQueryParams(pg->conn, sql, nparams, NULL, values, NULL, NULL, 0);
    if (!ok) {
        conn_error(pg);
        return -1;
    }
    flush_and_watch(pg);
    return 0;
}

static void setup_done(void *ctx, PGresult *res)
{
    struct pgconn *pg = ctx;
    if (res && PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
        char line[512];
        pgconn_error_line(res, line, sizeof(line));
        PQclear(res);
        log_error("pg %s: session setup failed: %s", pg->name, line);
        pgconn_reset(pg, "session setup failed");
        return;
    }
    PQclear(res);
    if (!pg->conn)
        return;
    backoff_reset(&pg->backoff);
    log_info("pg %s: connected to %s:%s", pg->name, PQhost(pg->conn), PQport(pg->conn));
    if (pg->cb.on_ready)
        pg->cb.on_ready(pg->ctx);
}

static void connected(struct pgconn *pg)
{
    ev_timer_stop(pg->loop, &pg->timer);
    if (PQsetnonblocking(pg->conn, 1) != 0) {
        conn_error(pg);
        return;
    }
    pg->state = PG_SETUP;
    if (!pg->setup_sql) {
        pg->state = PG_IDLE;
        setup_done(pg, NULL);
        return;
    }
    pg->state = PG_BUSY;
    pg->query_cb = setup_done;
    pg->query_ctx = pg;
    send_query(pg, pg->setup_sql, -1, NULL);
}

static void poll_connect(struct pgconn *pg)
{
    switch (PQconnectPoll(pg->conn)) {
    case PGRES_POLLING_READING:
        watch(pg, EV_READ);
        break;
    case PGRES_POLLING_WRITING:
        watch(pg, EV_WRITE);
        break;
    case PGRES_POLLING_OK:
        connected(pg);
        break;
    default:
        conn_error(pg);
        break;
    }
}

int pgconn_query(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                 pgconn_result_cb cb, void *ctx)
{
    if (pg->state != PG_IDLE)
        return -1;
    pg->state = PG_BUSY;
    pg->query_cb = cb;
    pg->query_ctx = ctx;
    return send_query(pg, sql, nparams, values);
}

static void drain_notifies(struct pgconn *pg)
{
    PGnotify *n;
    while (pg->conn && (n = PQnotifies(pg->conn)) != NULL) {
        if (pg->cb.on_notify)
            pg->cb.on_notify(pg->ctx, n);
        PQfreemem(n);
    }
}

/* Reads results of the query in flight; calls its callback with the first result. */
static void read_results(struct pgconn *pg)
{
    while (pg->state == PG_BUSY && !PQisBusy(pg->conn)) {
        PGresult *res = PQgetResult(pg->conn);
        if (res) {
            if (!pg->first_result)
                pg->first_result = res;
            else if (PQresultStatus(res) == PGRES_FATAL_ERROR &&
                     PQresultStatus(pg->first_result) != PGRES_FATAL_ERROR) {
                PQclear(pg->first_result); /* a later statement's error wins */
                pg->first_result = res;
            } else
                PQclear(res);
            continue;
        }
        PGresult *first = pg->first_result;
        pgconn_result_cb cb = pg->query_cb;
        void *ctx = pg->query_ctx;
        pg->first_result = NULL;
        pg->query_cb = NULL;
        pg->state = pg->state == PG_BUSY ? PG_IDLE : pg->state;
        if (cb)
            cb(ctx, first);
        else
            PQclear(first);
        return; /* the callback may have sent the next query or reset the connection */
    }
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct pgconn *pg = w->data;
    if (pg->state == PG_CONNECTING) {
        poll_connect(pg);
        return;
    }
    if (revents & EV_WRITE) {
        flush_and_watch(pg);
        if (!pg->conn)
            return;
    }
    if (revents & EV_READ) {
        if (!PQconsumeInput(pg->conn)) {
            conn_error(pg);
            return;
        }
        read_results(pg);
        drain_notifies(pg);
        if (pg->conn && PQstatus(pg->conn) == CONNECTION_BAD)
            conn_error(pg);
    }
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct pgconn *pg = w->data;
    if (pg->state == PG_CONNECTING) {
        lost(pg, "connect timed out");
        return;
    }
    if (pg->state == PG_DOWN)
        start_connect(pg);
}

const char *pgconn_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

void pgconn_error_line(const PGresult *res, char *buf, size_t len)
{
    const char *msg = res ? PQresultErrorMessage(res) : "connection lost";
    snprintf(buf, len, "%.*s", (int)strcspn(msg, "\n"), msg);
}
