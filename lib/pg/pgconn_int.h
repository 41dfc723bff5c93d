/* One PostgreSQL connection on the loop (pgconn.h), inside: its state, shared by its three
 * files, each calling only those listed below it (test/circles.sh):
 *   pgconn.c        life cycle, connecting host by host, the socket's and the timer's events;
 *   pgconn_query.c  queries: sending, preparing once per session, reading results,
 *                   notifications;
 *   pgconn_loss.c   watching the socket, and losing the connection (closing it, telling the
 *                   query in flight and the owner, scheduling the reconnect). */
#ifndef OUTBOX_PGCONN_INT_H
#define OUTBOX_PGCONN_INT_H

#include "core/backoff.h"
#include "pg/hostlist.h"
#include "pg/pgconn.h"
#include "pg/prepared.h"

enum pg_state { PG_DOWN, PG_CONNECTING, PG_IDLE, PG_BUSY, PG_STOPPED };

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
    struct prepared prepared; /* what this session prepared */
    int exec_slot; /* the prepared statement in flight, or -1 */
    int no_prepare; /* a prepared statement was lost (a pooler): statements go unprepared */
    struct pending_exec pending;
#ifdef OUTBOX_TEST_HOOKS
    enum pgconn_test_fail test_fail; /* the next query's send or flush fails */
#endif
};

/* pgconn_loss.c */
/* Watches the connection's socket for events (a connecting watcher is always set anew). */
void pgc_watch(struct pgconn *pg, int events);
/* Closes the session, forgetting what it prepared; no callback. */
void pgc_close(struct pgconn *pg);
/* The connection is gone: the query in flight hears NULL, the owner on_lost, and a
 * reconnect is scheduled (unless stopped). */
void pgc_lost(struct pgconn *pg, const char *why);
/* pgc_lost with libpq's error, its DSN's secrets redacted. */
void pgc_conn_error(struct pgconn *pg);

/* pgconn_query.c */
/* What a send does: a simple query (setup, several statements), a statement with its text
 * (unnamed, parsed and planned on the spot), or the preparation or execution of a named one. */
enum send_kind { SEND_SIMPLE, SEND_PARAMS, SEND_PREPARE, SEND_PREPARED };
int pgc_send_query(struct pgconn *pg, enum send_kind kind, const char *sql_or_name, const char *sql,
                   int nparams, const char *const *values);
/* Flushes what libpq holds and watches the socket: 0, or -1 when the connection was lost. */
int pgc_flush_and_watch(struct pgconn *pg);
/* Reads results of the query in flight; calls its callback with the first result. */
void pgc_read_results(struct pgconn *pg);
void pgc_drain_notifies(struct pgconn *pg);
/* Frees a call waiting for its preparation (its callback is not called). */
void pgc_pending_clear(struct pgconn *pg);

#endif
