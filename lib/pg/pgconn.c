/* Non-blocking PostgreSQL connection on the libev loop, with reconnect. Multi-host DSNs
 * (host=a,b port=p1,p2) are walked by libpq; this file gives each host its own connect
 * timeout (libpq ignores connect_timeout in asynchronous mode) by starting the next attempt
 * at the host after the one that did not answer. */
#include "pg/pgconn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/backoff.h"
#include "core/dsn.h"
#include "core/settings.h"
#include "core/log.h"
#include "core/util.h"

#define CONNECT_TIMEOUT_S 10 /* per host, unless the DSN sets connect_timeout */
#define SQLSTATE_READ_ONLY "25006"
#define SQLSTATE_PLAN_CHANGED "0A000" /* feature_not_supported: a cached plan's result type changed */
#define SQLSTATE_NO_PREPARED "26000"  /* invalid_sql_statement_name */

/* The DSN's host list, kept to rotate where an attempt starts. */
struct hostlist {
    int n;          /* hosts in the DSN (0 or 1: nothing to rotate) */
    char **host;    /* n entries, or NULL when the DSN has no host list */
    char **hostaddr;
    char **port;    /* n entries, or NULL when one port (or none) serves every host */
    int timeout_s;  /* per-host connect timeout */
};

enum pg_state { PG_DOWN, PG_CONNECTING, PG_IDLE, PG_BUSY, PG_STOPPED };

/* Statements prepared in the current session, by text. A statement is parsed, analysed and
 * (once PostgreSQL settles on a generic plan) planned once per session instead of on every
 * call: the claim's planning cost more than its execution at a steady rate (docs/PERFORMANCE.md).
 * Forgotten at every new connection; an entry is forgotten too when its preparation failed,
 * or its execution because a changed table made PostgreSQL refuse the cached plan or the
 * statement is gone: the next call prepares the text again under a new name. Other errors
 * (a timeout, a conflict) leave it prepared. When full, further texts run unprepared. */
#define PREPARED_MAX 48

struct prepared {
    char *sql;   /* NULL: a free slot */
    size_t len;
    int nparams;
    unsigned serial; /* in its name (prepared_name) */
};

/* A call waiting for its statement to be prepared: its parameters, copied. */
struct pending_exec {
    int slot, nparams;
    char **values;
    pgconn_result_cb cb;
    void *ctx;
};

struct pgconn {
    struct ev_loop *loop;
    char *name;
    char *dsn;
    char *dsn_file;   /* read again before each connect, or NULL */
    char *dsn_origin; /* its setting, for messages */
    char *setup_sql;
    struct pgconn_callbacks cb;
    void *ctx;

    PGconn *conn;
    enum pg_state state;
    ev_io io;
    ev_timer timer; /* connect timeout of the current host, or reconnect delay */
    struct backoff backoff;
    struct hostlist hosts;
    int first_host;     /* index in hosts where the next attempt starts */
    int hosts_tried;    /* hosts that timed out in this round of attempts */
    char current[300];  /* "host:port" libpq is trying now */
    int current_index;  /* its index in hosts, in the attempt's order */

    pgconn_result_cb query_cb;
    void *query_ctx;
    PGresult *first_result;
    struct prepared prepared[PREPARED_MAX];
    int exec_slot; /* the prepared statement in flight, or -1 */
    int no_prepare; /* a prepared statement was lost (a pooler): statements go unprepared */
    struct pending_exec pending;
#ifdef OUTBOX_TEST_HOOKS
    enum pgconn_test_fail test_fail; /* the next query's send or flush fails */
#endif
};

static void io_cb(struct ev_loop *loop, ev_io *w, int revents);
static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

/* Splits a comma-separated libpq list into n strings; returns the count. */
static int split_list(const char *value, char ***out)
{
    int n = 1;
    for (const char *c = value; *c; c++)
        n += *c == ',';
    char **items = xcalloc((size_t)n, sizeof(*items));
    const char *start = value;
    for (int i = 0; i < n; i++) {
        size_t len = strcspn(start, ",");
        items[i] = xstrndup(start, len);
        start += len + (start[len] == ',');
    }
    *out = items;
    return n;
}

static void free_list(char **items, int n)
{
    if (!items)
        return;
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

static void hostlist_init(struct hostlist *hl, const char *dsn)
{
    memset(hl, 0, sizeof(*hl));
    hl->timeout_s = CONNECT_TIMEOUT_S;
    PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
    if (!opts)
        return; /* the connect itself reports a bad DSN (config validated it already) */
    const char *host = NULL, *hostaddr = NULL, *port = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !o->val[0])
            continue;
        if (strcmp(o->keyword, "host") == 0)
            host = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            hostaddr = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            port = o->val;
        else if (strcmp(o->keyword, "connect_timeout") == 0) {
            int t = atoi(o->val);
            if (t > 0)
                hl->timeout_s = t < 2 ? 2 : t; /* libpq's own minimum */
        }
    }
    /* the host list (host, or hostaddr alone) sets n; hostaddr and port lists are rotated
     * with it when they have n entries (one port for every host needs no rotation) */
    const char *lists[3] = {host, hostaddr, port};
    char ***slots[3] = {&hl->host, &hl->hostaddr, &hl->port};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!lists[i])
            continue;
        char **items;
        int count = split_list(lists[i], &items);
        if (n == 0 && i < 2)
            n = count;
        if (count == n && n > 1)
            *slots[i] = items;
        else
            free_list(items, count);
    }
    hl->n = n > 1 ? n : 0;
    PQconninfoFree(opts);
}

static void hostlist_destroy(struct hostlist *hl)
{
    free_list(hl->host, hl->n);
    free_list(hl->hostaddr, hl->n);
    free_list(hl->port, hl->n);
}

/* A list rotated to start at index first; caller frees. */
static char *rotated(char **items, int n, int first)
{
    struct strbuf sb;
    strbuf_init(&sb);
    for (int i = 0; i < n; i++) {
        if (i)
            strbuf_puts(&sb, ",");
        strbuf_puts(&sb, items[(first + i) % n]);
    }
    return sb.buf;
}

struct pgconn *pgconn_new(struct ev_loop *loop, const char *name, const char *dsn,
                          const char *setup_sql, int reconnect_max_ms,
                          const struct pgconn_callbacks *cb, void *ctx)
{
    struct pgconn *pg = xcalloc(1, sizeof(*pg));
    pg->loop = loop;
    pg->name = xstrdup(name);
    pg->dsn = xstrdup(dsn ? dsn : "");
    struct strbuf setup;
    strbuf_init(&setup);
    strbuf_puts(&setup, PGCONN_PIN_SEARCH_PATH);
    if (setup_sql)
        strbuf_printf(&setup, "; %s", setup_sql);
    pg->setup_sql = setup.buf;
    pg->cb = *cb;
    pg->ctx = ctx;
    pg->state = PG_STOPPED;
    pg->exec_slot = -1;
    pg->pending.slot = -1;
    backoff_init(&pg->backoff, 100, reconnect_max_ms);
    hostlist_init(&pg->hosts, pg->dsn);
    ev_init(&pg->io, io_cb);
    pg->io.data = pg;
    ev_init(&pg->timer, timer_cb);
    pg->timer.data = pg;
    return pg;
}

/* Watches the connection's socket for events. While connecting, libpq may close a socket
 * and open another for the next host or address, which usually gets the same number;
 * libev must then be told again (epoll forgets a closed descriptor), so a connecting
 * watcher is always set anew. */
static void watch(struct pgconn *pg, int events)
{
    int fd = PQsocket(pg->conn);
    if (pg->state != PG_CONNECTING && ev_is_active(&pg->io) && pg->io.fd == fd &&
        (pg->io.events & (EV_READ | EV_WRITE)) == events)
        return;
    ev_io_stop(pg->loop, &pg->io);
    if (fd < 0)
        return;
    ev_io_set(&pg->io, fd, events);
    ev_io_start(pg->loop, &pg->io);
}

static void forget_prepared(struct pgconn *pg)
{
    for (int i = 0; i < PREPARED_MAX; i++) {
        free(pg->prepared[i].sql);
        pg->prepared[i].sql = NULL;
    }
    pg->exec_slot = -1;
}

static void close_conn(struct pgconn *pg)
{
    forget_prepared(pg);
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
    int was_up = pg->state == PG_IDLE || pg->state == PG_BUSY;
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
    char line[512], why[512];
    pgconn_conn_error_line(pg->conn, line, sizeof(line));
    dsn_redact(pg->dsn, line, why, sizeof(why));
    lost(pg, why[0] ? why : "connection failed");
}

/* Restarts the current host's connect timeout. */
static void arm_host_timer(struct pgconn *pg)
{
    ev_timer_stop(pg->loop, &pg->timer);
    ev_timer_set(&pg->timer, pg->hosts.timeout_s, 0.0);
    ev_timer_start(pg->loop, &pg->timer);
}

void pgconn_set_dsn_file(struct pgconn *pg, const char *path, const char *origin)
{
    free(pg->dsn_file);
    free(pg->dsn_origin);
    pg->dsn_file = path ? xstrdup(path) : NULL;
    pg->dsn_origin = xstrdup(origin ? origin : "the DSN file");
}

/* A DSN file whose content changed since the last attempt (a rotated password): connect
 * with the new one from now on. */
static void reread_dsn(struct pgconn *pg)
{
    if (!pg->dsn_file)
        return;
    char *dsn = settings_current_secret(pg->dsn, pg->dsn_file, pg->dsn_origin);
    if (strcmp(dsn, pg->dsn) == 0) {
        free(dsn);
        return;
    }
    log_info("pg %s: %s changed: connecting with its new content", pg->name, pg->dsn_origin);
    free(pg->dsn);
    pg->dsn = dsn;
    hostlist_destroy(&pg->hosts);
    hostlist_init(&pg->hosts, pg->dsn);
    pg->first_host = 0;
}

static void start_connect(struct pgconn *pg)
{
    reread_dsn(pg);
    /* Settings before dbname are defaults the DSN may override; those after it are forced:
     * the relay needs a primary. */
    const char *k[12] = {"fallback_application_name", "keepalives", "keepalives_idle",
                         "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                         "dbname", "target_session_attrs"};
    const char *v[12] = {"outbox-relay", "1", "5", "2", "3", "10000", pg->dsn, "read-write"};
    int n = 8;
    char *host = NULL, *hostaddr = NULL, *port = NULL;
    const struct hostlist *hl = &pg->hosts;
    if (hl->n > 1) { /* start the round at first_host */
        if (hl->host)
            k[n] = "host", v[n++] = host = rotated(hl->host, hl->n, pg->first_host);
        if (hl->hostaddr)
            k[n] = "hostaddr", v[n++] = hostaddr = rotated(hl->hostaddr, hl->n, pg->first_host);
        if (hl->port)
            k[n] = "port", v[n++] = port = rotated(hl->port, hl->n, pg->first_host);
    }
    k[n] = v[n] = NULL;
    pg->conn = PQconnectStartParams(k, v, 1);
    free(host);
    free(hostaddr);
    free(port);
    pg->current[0] = '\0';
    pg->current_index = pg->first_host;
    if (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD) {
        conn_error(pg);
        return;
    }
    pg->state = PG_CONNECTING;
    arm_host_timer(pg);
    watch(pg, EV_WRITE);
}

/* Follows libpq from host to host, giving each its own timeout. */
static void note_host(struct pgconn *pg)
{
    char now[sizeof(pg->current)];
    snprintf(now, sizeof(now), "%s:%s", PQhost(pg->conn), PQport(pg->conn));
    if (strcmp(now, pg->current) == 0)
        return;
    if (pg->current[0] && pg->hosts.n > 1)
        pg->current_index = (pg->current_index + 1) % pg->hosts.n;
    memcpy(pg->current, now, sizeof(now));
    arm_host_timer(pg);
}

/* The current host did not answer in time: start again at the next one, at once while
 * this round has hosts left, after the reconnect backoff once every host timed out. */
static void host_timed_out(struct pgconn *pg)
{
    int n = pg->hosts.n > 1 ? pg->hosts.n : 1;
    log_warn("pg %s: %s did not answer within %d s", pg->name,
             pg->current[0] ? pg->current : "the server", pg->hosts.timeout_s);
    pg->first_host = (pg->current_index + 1) % n;
    if (++pg->hosts_tried < n) {
        close_conn(pg);
        start_connect(pg);
        return;
    }
    pg->hosts_tried = 0;
    lost(pg, n > 1 ? "connect timed out on every host" : "connect timed out");
}

void pgconn_start(struct pgconn *pg)
{
    if (pg->state != PG_STOPPED)
        return;
    pg->state = PG_DOWN;
    start_connect(pg);
}

static void pending_clear(struct pgconn *pg)
{
    for (int i = 0; i < pg->pending.nparams; i++)
        free(pg->pending.values[i]);
    free(pg->pending.values);
    pg->pending = (struct pending_exec){.slot = -1};
}

void pgconn_stop(struct pgconn *pg)
{
    pg->state = PG_STOPPED;
    close_conn(pg);
    pending_clear(pg); /* a stopped connection calls back no more */
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
    free(pg->dsn_file);
    free(pg->dsn_origin);
    free(pg->setup_sql);
    pending_clear(pg);
    hostlist_destroy(&pg->hosts);
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

/* Flushes what libpq holds and watches the socket: 0, or -1 when the connection was lost. */
static int flush_and_watch(struct pgconn *pg)
{
    int rc = PQflush(pg->conn);
#ifdef OUTBOX_TEST_HOOKS
    if (pg->test_fail == PGCONN_TEST_FAIL_FLUSH) {
        pg->test_fail = PGCONN_TEST_FAIL_NONE;
        lost(pg, "test hook: PQflush failed");
        return -1;
    }
#endif
    if (rc < 0) {
        conn_error(pg);
        return -1;
    }
    watch(pg, rc == 1 ? EV_READ | EV_WRITE : EV_READ);
    return 0;
}

/* What a send does: a simple query (setup, several statements), a statement with its text
 * (unnamed, parsed and planned on the spot), or the preparation or execution of a named one. */
enum send_kind { SEND_SIMPLE, SEND_PARAMS, SEND_PREPARE, SEND_PREPARED };

static int send_query(struct pgconn *pg, enum send_kind kind, const char *sql_or_name, const char *sql,
                      int nparams, const char *const *values)
{
#ifdef OUTBOX_TEST_HOOKS
    if (pg->test_fail == PGCONN_TEST_FAIL_SEND) { /* nothing was sent */
        pg->test_fail = PGCONN_TEST_FAIL_NONE;
        lost(pg, "test hook: PQsendQueryParams failed");
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
        conn_error(pg);
        return -1;
    }
    return flush_and_watch(pg);
}

static void setup_done(void *ctx, PGresult *res)
{
    struct pgconn *pg = ctx;
    if (res && !pgconn_result_ok(res)) {
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
    pg->hosts_tried = 0;
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
    pg->state = PG_BUSY;
    pg->query_cb = setup_done;
    pg->query_ctx = pg;
    send_query(pg, SEND_SIMPLE, pg->setup_sql, NULL, 0, NULL);
}

static void poll_connect(struct pgconn *pg)
{
    PostgresPollingStatusType st = PQconnectPoll(pg->conn);
    if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING)
        note_host(pg);
    switch (st) {
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
    pg->exec_slot = -1;
    return send_query(pg, SEND_PARAMS, sql, NULL, nparams, values);
}

/* Statement names: a number drawn once per process and a counter of the process, so that a
 * server session reused through a pooler (whose reset query may not deallocate) never holds
 * one of these names from another connection or process. */
static unsigned prepared_nonce, prepared_counter;

static void prepared_name(const struct pgconn *pg, int slot, char *name, size_t size)
{
    snprintf(name, size, "outbox_%08x_%u", prepared_nonce, pg->prepared[slot].serial);
}

static int exec_prepared(struct pgconn *pg, int slot, int nparams, const char *const *values,
                         pgconn_result_cb cb, void *ctx)
{
    char name[32];
    prepared_name(pg, slot, name, sizeof(name));
    pg->state = PG_BUSY;
    pg->query_cb = cb;
    pg->query_ctx = ctx;
    pg->exec_slot = slot;
    return send_query(pg, SEND_PREPARED, name, NULL, nparams, values);
}

/* The preparation's result: on success the call that waited is executed; otherwise its
 * callback gets the error (or NULL: the connection was lost). */
static void prepare_done(void *ctx, PGresult *res)
{
    struct pgconn *pg = ctx;
    struct pending_exec p = pg->pending;
    pg->pending = (struct pending_exec){.slot = -1};
    if (res && (!pg->conn || !pg->prepared[p.slot].sql)) { /* cannot happen: as if lost */
        PQclear(res);
        res = NULL;
    }
    if (res && pgconn_result_ok(res)) {
        PQclear(res);
        exec_prepared(pg, p.slot, p.nparams, (const char *const *)p.values, p.cb, p.ctx);
    } else {
        if (res && pg->prepared[p.slot].sql) { /* not prepared: forget it */
            free(pg->prepared[p.slot].sql);
            pg->prepared[p.slot].sql = NULL;
        }
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
    size_t len = strlen(sql);
    int free_slot = -1;
    for (int i = 0; i < PREPARED_MAX; i++) {
        struct prepared *e = &pg->prepared[i];
        if (!e->sql) {
            if (free_slot < 0)
                free_slot = i;
            continue;
        }
        if (e->len == len && e->nparams == nparams && memcmp(e->sql, sql, len) == 0)
            return exec_prepared(pg, i, nparams, values, cb, ctx);
    }
    if (free_slot < 0)
        return pgconn_query(pg, sql, nparams, values, cb, ctx);
    struct prepared *e = &pg->prepared[free_slot];
    e->sql = xstrdup(sql);
    e->len = len;
    e->nparams = nparams;
    if (!prepared_nonce) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        prepared_nonce = ((unsigned)getpid() * 2654435761u) ^ (unsigned)ts.tv_nsec ^ (unsigned)ts.tv_sec;
        prepared_nonce |= 1;
    }
    e->serial = ++prepared_counter;
    pg->pending.slot = free_slot;
    pg->pending.nparams = nparams;
    pg->pending.values = nparams > 0 ? xcalloc((size_t)nparams, sizeof(char *)) : NULL;
    for (int i = 0; i < nparams; i++)
        pg->pending.values[i] = values[i] ? xstrdup(values[i]) : NULL;
    pg->pending.cb = cb;
    pg->pending.ctx = ctx;
    char name[32];
    prepared_name(pg, free_slot, name, sizeof(name));
    pg->state = PG_BUSY;
    pg->query_cb = prepare_done;
    pg->query_ctx = pg;
    pg->exec_slot = -1;
    return send_query(pg, SEND_PREPARE, name, sql, nparams, NULL);
}

#ifdef OUTBOX_TEST_HOOKS
void pgconn_test_fail_next(struct pgconn *pg, enum pgconn_test_fail how)
{
    pg->test_fail = how;
}
#endif

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
            lost(pg, "server is read-only");
            return;
        }
        const char *state = pgconn_sqlstate(first);
        if (pg->exec_slot >= 0 && (strcmp(state, SQLSTATE_PLAN_CHANGED) == 0 || strcmp(state, SQLSTATE_NO_PREPARED) == 0)) {
            /* the table changed under the cached plan ("cached plan must not change result
             * type"), or the statement is gone: the next call prepares the text anew (a
             * changed plan's old name stays until the session ends) */
            free(pg->prepared[pg->exec_slot].sql);
            pg->prepared[pg->exec_slot].sql = NULL;
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
        host_timed_out(pg);
        return;
    }
    if (pg->state == PG_DOWN)
        start_connect(pg);
}
