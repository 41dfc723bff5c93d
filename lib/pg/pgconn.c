/* Non-blocking PostgreSQL connection on the libev loop, with reconnect (pgconn_int.h): its life
 * cycle, connecting, and the socket's and the timer's events. Multi-host DSNs (host=a,b
 * port=p1,p2) are walked by libpq; this file gives each host its own connect timeout (libpq
 * ignores connect_timeout in asynchronous mode) by starting the next attempt at the host
 * after the one that did not answer (hostlist.h). */
#include "pg/pgconn_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>

#include "core/settings.h"
#include "core/log.h"
#include "core/util.h"

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
            k[n] = "host", v[n++] = host = hostlist_rotated(hl->host, hl->n, pg->first_host);
        if (hl->hostaddr)
            k[n] = "hostaddr", v[n++] = hostaddr = hostlist_rotated(hl->hostaddr, hl->n, pg->first_host);
        if (hl->port)
            k[n] = "port", v[n++] = port = hostlist_rotated(hl->port, hl->n, pg->first_host);
    }
    k[n] = v[n] = NULL;
    pg->conn = PQconnectStartParams(k, v, 1);
    free(host);
    free(hostaddr);
    free(port);
    pg->current[0] = '\0';
    pg->current_index = pg->first_host;
    if (!pg->conn || PQstatus(pg->conn) == CONNECTION_BAD) {
        pgc_conn_error(pg);
        return;
    }
    pg->state = PG_CONNECTING;
    arm_host_timer(pg);
    pgc_watch(pg, EV_WRITE);
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
        pgc_close(pg);
        start_connect(pg);
        return;
    }
    pg->hosts_tried = 0;
    pgc_lost(pg, n > 1 ? "connect timed out on every host" : "connect timed out");
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
    pgc_close(pg);
    pgc_pending_clear(pg); /* a stopped connection calls back no more */
}

void pgconn_reset(struct pgconn *pg, const char *why)
{
    if (pg->state == PG_STOPPED || pg->state == PG_DOWN)
        return;
    pgc_lost(pg, why);
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
    pgc_pending_clear(pg);
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

void pgconn_session(const struct pgconn *pg, int *pid, int *port)
{
    *pid = 0;
    *port = 0;
    if (!pgconn_connected(pg))
        return;
    *pid = PQbackendPID(pg->conn);
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    if (getsockname(PQsocket(pg->conn), (struct sockaddr *)&sa, &len) != 0)
        return;
    if (sa.ss_family == AF_INET)
        *port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
    else if (sa.ss_family == AF_INET6)
        *port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    else
        *port = -1;
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
        pgc_conn_error(pg);
        return;
    }
    pg->state = PG_BUSY;
    pg->query_cb = setup_done;
    pg->query_ctx = pg;
    pgc_send_query(pg, SEND_SIMPLE, pg->setup_sql, NULL, 0, NULL);
}

static void poll_connect(struct pgconn *pg)
{
    PostgresPollingStatusType st = PQconnectPoll(pg->conn);
    if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING)
        note_host(pg);
    switch (st) {
    case PGRES_POLLING_READING:
        pgc_watch(pg, EV_READ);
        break;
    case PGRES_POLLING_WRITING:
        pgc_watch(pg, EV_WRITE);
        break;
    case PGRES_POLLING_OK:
        connected(pg);
        break;
    default:
        pgc_conn_error(pg);
        break;
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
        pgc_flush_and_watch(pg);
        if (!pg->conn)
            return;
    }
    if (revents & EV_READ) {
        if (!PQconsumeInput(pg->conn)) {
            pgc_conn_error(pg);
            return;
        }
        pgc_read_results(pg);
        pgc_drain_notifies(pg);
        if (pg->conn && PQstatus(pg->conn) == CONNECTION_BAD)
            pgc_conn_error(pg);
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
