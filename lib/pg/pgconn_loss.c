/* One PostgreSQL connection on the loop (pgconn_int.h): watching its socket, and losing it. */
#include "pg/pgconn_int.h"

#include <stdlib.h>

#include "core/dsn.h"
#include "core/log.h"

/* Watches the connection's socket for events. While connecting, libpq may close a socket
 * and open another for the next host or address, which usually gets the same number;
 * libev must then be told again (epoll forgets a closed descriptor), so a connecting
 * watcher is always set anew. */
void pgc_watch(struct pgconn *pg, int events)
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
    prepared_forget_all(&pg->prepared);
    pg->exec_slot = -1;
}

void pgc_close(struct pgconn *pg)
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
void pgc_lost(struct pgconn *pg, const char *why)
{
    int was_up = pg->state == PG_IDLE || pg->state == PG_BUSY;
    pgconn_result_cb qcb = pg->state == PG_BUSY ? pg->query_cb : NULL;
    void *qctx = pg->query_ctx;
    pg->query_cb = NULL;
    pgc_close(pg);
    if (pg->state == PG_STOPPED)
        return;
    log_warn("pg %s: connection lost: %s", pg->name, why);
    schedule_reconnect(pg);
    if (qcb)
        qcb(qctx, NULL);
    if (was_up && pg->cb.on_lost)
        pg->cb.on_lost(pg->ctx, why);
}

void pgc_conn_error(struct pgconn *pg)
{
    char line[512], why[512];
    pgconn_conn_error_line(pg->conn, line, sizeof(line));
    dsn_redact(pg->dsn, line, why, sizeof(why));
    pgc_lost(pg, why[0] ? why : "connection failed");
}
