/* PostgreSQL helpers shared by both programs (pgutil.h): result checks, error lines, the
 * blocking connect and exec, the pooler check, bytea payloads from hex. */
#include "pg/pgutil.h"

#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/dsn.h"
#include "core/log.h"
#include "pg/pgconn.h"
#include "core/util.h"

const char *pgconn_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

int pgconn_result_ok(const PGresult *res)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

static void first_line(const char *msg, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s", (int)strcspn(msg, "\n"), msg);
}

void pgconn_error_line(const PGresult *res, char *buf, size_t len)
{
    first_line(res ? PQresultErrorMessage(res) : "connection lost", buf, len);
}

void pgconn_conn_error_line(const PGconn *conn, char *buf, size_t len)
{
    first_line(conn ? PQerrorMessage(conn) : "no connection", buf, len);
}

PGresult *pgconn_exec(PGconn *conn, const char *sql, int nparams, const char *const *params,
                      char *err, size_t errlen)
{
    PGresult *res = nparams ? PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0)
                            : PQexec(conn, sql);
    if (pgconn_result_ok(res))
        return res;
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    set_err(err, errlen, "%s", line);
    PQclear(res);
    return NULL;
}

PGconn *pgconn_connect_blocking(const char *dsn, const char *application, int pin_search_path)
{
    /* Defaults before dbname (the DSN may override them); a primary is required. */
    const char *keys[] = {"fallback_application_name", "connect_timeout", "dbname", "target_session_attrs", NULL};
    const char *vals[] = {application, "10", dsn, "read-write", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(conn) != CONNECTION_OK) {
        char line[512], safe[512];
        pgconn_conn_error_line(conn, line, sizeof(line));
        dsn_redact(dsn, line, safe, sizeof(safe));
        log_error("postgres: cannot connect: %s", safe);
        PQfinish(conn);
        return NULL;
    }
    if (!pin_search_path)
        return conn;
    PGresult *res = PQexec(conn, PGCONN_PIN_SEARCH_PATH);
    int ok = pgconn_result_ok(res);
    PQclear(res);
    if (!ok) {
        log_error("postgres: cannot set search_path: %s", PQerrorMessage(conn));
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

/* pg_backend_pid() of conn's current backend, or -1 */
static long backend_pid(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    long pid = -1;
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        pid = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return pid;
}

/* A quiet connection for the session check: 3 s at most, nothing logged (the relay reports
 * its own connection problems). NULL when it did not connect. */
static PGconn *connect_quiet(const char *dsn)
{
    const char *keys[] = {"fallback_application_name", "connect_timeout", "dbname", "target_session_attrs", NULL};
    const char *vals[] = {"outbox-relay", "3", dsn, "read-write", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(conn) == CONNECTION_OK)
        return conn;
    PQfinish(conn);
    return NULL;
}

int pgconn_check_session(const char *dsn, char *why, size_t whylen)
{
    PGconn *a = connect_quiet(dsn);
    PGconn *b = a ? connect_quiet(dsn) : NULL;
    int rc = -1;
    long p1 = -1, p2 = -1, p3 = -1;
    int waited = 0;
    if (!a || !b)
        goto out;
    p1 = backend_pid(a, "SELECT pg_backend_pid()");
    p2 = backend_pid(b, "BEGIN; SELECT pg_backend_pid()");
    if (p1 < 0 || p2 < 0 || !PQsendQuery(a, "SELECT pg_backend_pid()"))
        goto out;
    /* a real session answers at once; a pooled one may wait for the backend b holds */
    int64_t deadline = mono_ms() + 3000;
    while (PQisBusy(a)) {
        int64_t left = deadline - mono_ms();
        struct pollfd pfd = {.fd = PQsocket(a), .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) == 0) {
            waited = 1;
            break;
        }
        if (!PQconsumeInput(a))
            goto out;
    }
    PQclear(PQexec(b, "ROLLBACK")); /* frees the backend a may be waiting for */
    if (waited) {
        set_err(why, whylen, "a second connection's open transaction kept the first one's next "
                "statement waiting for 3 s");
        rc = 0;
        goto out;
    }
    PGresult *res;
    while ((res = PQgetResult(a)) != NULL) {
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
            p3 = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
    }
    if (p3 < 0)
        goto out;
    if (p3 != p1) {
        set_err(why, whylen, "one connection's statements ran in two server sessions (pids %ld and %ld)",
                p1, p3);
        rc = 0;
    } else {
        rc = 1;
    }
out:
    if (b)
        PQfinish(b);
    if (a)
        PQfinish(a);
    return rc;
}


int pg_bytes_decode(struct pg_bytes *b, const PGresult *res, int col)
{
    int n = PQntuples(res);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)PQgetlength(res, i, col) / 2;
    b->buf = xmalloc(total + 1);
    b->end = xmalloc(((size_t)n + 1) * sizeof(*b->end));
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        long got = hex_decode(PQgetvalue(res, i, col), (size_t)PQgetlength(res, i, col),
                              (unsigned char *)b->buf + at);
        if (got < 0) {
            pg_bytes_free(b);
            return -1;
        }
        at += (size_t)got;
        b->end[i] = at;
    }
    return 0;
}

const char *pg_bytes_get(const struct pg_bytes *b, const PGresult *res, int col, int i, size_t *len)
{
    if (PQgetisnull(res, i, col)) {
        *len = 0;
        return NULL;
    }
    size_t from = i ? b->end[i - 1] : 0;
    *len = b->end[i] - from;
    return b->buf + from;
}

void pg_bytes_free(struct pg_bytes *b)
{
    free(b->buf);
    free(b->end);
    b->buf = NULL;
    b->end = NULL;
}

void schema_names(const char *table, char **schema_q, char **table_q, char **name)
{
    const char *dot = strchr(table, '.');
    char *schema = dot ? xstrndup(table, (size_t)(dot - table)) : xstrdup("public");
    *name = xstrdup(dot ? dot + 1 : table);
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "\"%s\"", schema);
    *schema_q = xstrdup(sb.buf);
    strbuf_printf(&sb, ".\"%s\"", *name);
    *table_q = sb.buf;
    free(schema);
}
