/* One PostgreSQL connection on the loop (pgconn_int.h): its queries, one at a time, with their
 * text or prepared once per session (prepared.h), their results and notifications. */
#include "pg/pgconn_int.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

#define SQLSTATE_READ_ONLY "25006"
#define SQLSTATE_PLAN_CHANGED "0A000" /* feature_not_supported: a cached plan's result type changed */
#define SQLSTATE_NO_PREPARED "26000"  /* invalid_sql_statement_name */

void pgc_pending_clear(struct pgconn *pg)
{
    for (int i = 0; i < pg->pending.nparams; i++)
        free(pg->pending.values[i]);
    free(pg->pending.values);
    pg->pending = (struct pending_exec){.slot = -1};
}

/* Flushes what libpq holds and watches the socket: 0, or -1 when the connection was lost. */
int pgc_flush_and_watch(struct pgconn *pg)
{
    int rc = PQflush(pg->conn);
#ifdef OUTBOX_TEST_HOOKS
    if (pg->test_fail == PGCONN_TEST_FAIL_FLUSH) {
        pg->test_fail = PGCONN_TEST_FAIL_NONE;
        pgc_lost(pg, "test hook: PQflush failed");
        return -1;
    }
#endif
    if (rc < 0) {
        pgc_conn_error(pg);
        return -1;
    }
    pgc_watch(pg, rc == 1 ? EV_READ | EV_WRITE : EV_READ);
    return 0;
}

int pgc_send_query(struct pgconn *pg, enum send_kind kind, const char *sql_or_name, const char *sql,
                      int nparams, const char *const *values)
{
#ifdef OUTBOX_TEST_HOOKS
    if (pg->test_fail == PGCONN_TEST_FAIL_SEND) { /* nothing was sent */
        pg->test_fail = PGCONN_TEST_FAIL_NONE;
        pgc_lost(pg, "test hook: PQsendQueryParams failed");
        return -1;
    }
#endif
    int ok = 0;
    switch (kind) {
    case SEND_SIMPLE:
        ok = PQsendQuery(pg->conn, sql_or_name);
        break;
    case SEND_PARAMS:
        ok = PQsendQueryParams(pg->conn, sql_or_name, nparams, NULL, values, NULL, NULL, 0);
        break;
    case SEND_PREPARE:
        ok = PQsendPrepare(pg->conn, sql_or_name, sql, nparams, NULL);
        break;
    case SEND_PREPARED:
        ok = PQsendQueryPrepared(pg->conn, sql_or_name, nparams, values, NULL, NULL, 0);
        break;
    }
    if (!ok) {
        pgc_conn_error(pg);
        return -1;
    }
    return pgc_flush_and_watch(pg);
}

int pgconn_query(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                 pgconn_result_cb cb, void *ctx)
{
    if (pg->state != PG_IDLE)
        return -1;
    pg->state = PG_BUSY;
    pg->query_cb = cb;
    pg->query_ctx = ctx;
    pg->exec_slot = -1;
    return pgc_send_query(pg, SEND_PARAMS, sql, NULL, nparams, values);
}

static int exec_prepared(struct pgconn *pg, int slot, int nparams, const char *const *values,
                         pgconn_result_cb cb, void *ctx)
{
    char name[32];
    prepared_name(&pg->prepared, slot, name, sizeof(name));
    pg->state = PG_BUSY;
    pg->query_cb = cb;
    pg->query_ctx = ctx;
    pg->exec_slot = slot;
    return pgc_send_query(pg, SEND_PREPARED, name, NULL, nparams, values);
}

/* The preparation's result: on success the call that waited is executed; otherwise its
 * callback gets the error (or NULL: the connection was lost). */
static void prepare_done(void *ctx, PGresult *res)
{
    struct pgconn *pg = ctx;
    struct pending_exec p = pg->pending;
    pg->pending = (struct pending_exec){.slot = -1};
    if (res && (!pg->conn || !prepared_held(&pg->prepared, p.slot))) { /* cannot happen: as if lost */
        PQclear(res);
        res = NULL;
    }
    if (res && pgconn_result_ok(res)) {
        PQclear(res);
        exec_prepared(pg, p.slot, p.nparams, (const char *const *)p.values, p.cb, p.ctx);
    } else {
        if (res) /* not prepared: forget it */
            prepared_forget(&pg->prepared, p.slot);
        if (p.cb)
            p.cb(p.ctx, res);
        else
            PQclear(res);
    }
    for (int i = 0; i < p.nparams; i++)
        free(p.values[i]);
    free(p.values);
}

int pgconn_query_prepared(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                          pgconn_result_cb cb, void *ctx)
{
    if (pg->state != PG_IDLE)
        return -1;
    if (pg->no_prepare)
        return pgconn_query(pg, sql, nparams, values, cb, ctx);
    int free_slot;
    int slot = prepared_find(&pg->prepared, sql, nparams, &free_slot);
    if (slot >= 0)
        return exec_prepared(pg, slot, nparams, values, cb, ctx);
    if (free_slot < 0)
        return pgconn_query(pg, sql, nparams, values, cb, ctx);
    prepared_add(&pg->prepared, free_slot, sql, nparams);
    pg->pending.slot = free_slot;
    pg->pending.nparams = nparams;
    pg->pending.values = nparams > 0 ? xcalloc((size_t)nparams, sizeof(char *)) : NULL;
    for (int i = 0; i < nparams; i++)
        pg->pending.values[i] = values[i] ? xstrdup(values[i]) : NULL;
    pg->pending.cb = cb;
    pg->pending.ctx = ctx;
    char name[32];
    prepared_name(&pg->prepared, free_slot, name, sizeof(name));
    pg->state = PG_BUSY;
    pg->query_cb = prepare_done;
    pg->query_ctx = pg;
    pg->exec_slot = -1;
    return pgc_send_query(pg, SEND_PREPARE, name, sql, nparams, NULL);
}

#ifdef OUTBOX_TEST_HOOKS
void pgconn_test_fail_next(struct pgconn *pg, enum pgconn_test_fail how)
{
    pg->test_fail = how;
}
#endif

void pgc_drain_notifies(struct pgconn *pg)
{
    PGnotify *n;
    while (pg->conn && (n = PQnotifies(pg->conn)) != NULL) {
        if (pg->cb.on_notify)
            pg->cb.on_notify(pg->ctx, n);
        PQfreemem(n);
    }
}

/* Reads results of the query in flight; calls its callback with the first result. */
void pgc_read_results(struct pgconn *pg)
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
        if (strcmp(pgconn_sqlstate(first), SQLSTATE_READ_ONLY) == 0) {
            /* A standby, or a primary demoted under us: no statement will work here. The
             * query's callback hears "connection lost" (nothing was applied). */
            pg->first_result = NULL;
            PQclear(first);
            /* One error line when the server turns read-only, not one per connection of the
             * process that meets it (keep mode's monitor writes too). */
            static struct log_limit read_only_log;
            long held;
            if (log_limit_due(&read_only_log, 30000, &held)) {
                log_error("pg %s: server %s:%s is read-only (a standby, or demoted); reconnecting "
                          "to find the primary", pg->name, PQhost(pg->conn), PQport(pg->conn));
            } else {
                log_info("pg %s: reconnecting too, to find the primary (the server turned read-only)", pg->name);
            }
            pgc_lost(pg, "server is read-only");
            return;
        }
        const char *state = pgconn_sqlstate(first);
        if (pg->exec_slot >= 0 && (strcmp(state, SQLSTATE_PLAN_CHANGED) == 0 || strcmp(state, SQLSTATE_NO_PREPARED) == 0)) {
            /* the table changed under the cached plan ("cached plan must not change result
             * type"), or the statement is gone: the next call prepares the text anew (a
             * changed plan's old name stays until the session ends) */
            prepared_forget(&pg->prepared, pg->exec_slot);
            if (strcmp(state, SQLSTATE_NO_PREPARED) == 0 && !pg->no_prepare) {
                /* a session loses what it prepared only behind a pooler in transaction mode
                 * (which the start-up check cannot see when PostgreSQL was down then) */
                log_warn("pg %s: a statement this session prepared is gone (a connection pooler in "
                         "transaction mode?); sending statements unprepared from now on", pg->name);
                pg->no_prepare = 1;
            }
        }
        pg->exec_slot = -1;
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
