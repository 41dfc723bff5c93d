/* One non-blocking PostgreSQL connection driven by the libev loop: asynchronous
 * connect (PQconnectStartParams/PQconnectPoll), one query at a time with
 * PQsendQueryParams or a statement prepared once per session, notifications, and reconnect
 * with capped backoff. Never blocks. */
#ifndef OUTBOX_PGCONN_H
#define OUTBOX_PGCONN_H

#include <ev.h>
#include <libpq-fe.h>

#include "pg/pgutil.h" /* the blocking helpers and result checks, shared by both programs */

struct pgconn;

/* The callback takes ownership of res (caller frees with PQclear). NULL means the
 * connection was lost before the query finished (it may or may not have been applied). */
typedef void (*pgconn_result_cb)(void *ctx, PGresult *res);

struct pgconn_callbacks {
    void (*on_ready)(void *ctx);                 /* connected and set up */
    void (*on_lost)(void *ctx, const char *why); /* connection gone; reconnect scheduled */
    void (*on_notify)(void *ctx, const PGnotify *notify);
};

/* Every session the relay opens pins its search_path first (nothing a role or a database
 * setting puts in it can shadow what the relay's statements call). */
#define PGCONN_PIN_SEARCH_PATH "SET search_path = pg_catalog, pg_temp"

/* name appears in logs ("worker", "listen"); dsn and setup_sql are copied.
 * PGCONN_PIN_SEARCH_PATH and then setup_sql (may be NULL) run once after every connect,
 * before on_ready. */
struct pgconn *pgconn_new(struct ev_loop *loop, const char *name, const char *dsn,
                          const char *setup_sql, int reconnect_max_ms,
                          const struct pgconn_callbacks *cb, void *ctx);
void pgconn_free(struct pgconn *pg);
/* The DSN comes from a file (origin: the setting, for messages): it is read again before
 * each connection attempt, so a rotated password is used from the next reconnect on. */
void pgconn_set_dsn_file(struct pgconn *pg, const char *path, const char *origin);

void pgconn_start(struct pgconn *pg);
/* Closes the connection and stops reconnecting (shutdown). */
void pgconn_stop(struct pgconn *pg);
/* Drops the connection and reconnects after a backoff (e.g. after a read-only error). */
void pgconn_reset(struct pgconn *pg, const char *why);

int pgconn_connected(const struct pgconn *pg); /* set up, maybe busy */
int pgconn_idle(const struct pgconn *pg);      /* set up and no query in flight */
/* Who the session is on the server, as pg_stat_activity shows it: its backend's pid and
 * the client's port (-1 over a Unix socket, as pg_stat_activity.client_port). 0 and 0
 * while not connected. */
void pgconn_session(const struct pgconn *pg, int *pid, int *port);

/* Sends one statement with text parameters (copied by libpq before return).
 * Returns 0, or -1 if not idle or the send failed. A failed send (PQsendQueryParams, or the
 * PQflush after it) drops the connection before this returns: cb runs with NULL, then
 * on_lost, both inside this call. */
int pgconn_query(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                 pgconn_result_cb cb, void *ctx);
/* The same for a statement sent again and again: prepared once per session (the first call
 * costs one more round trip), then executed by name, so PostgreSQL parses it once and, once
 * it settles on a generic plan, plans it once. Must be one statement. */
int pgconn_query_prepared(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                          pgconn_result_cb cb, void *ctx);

#ifdef OUTBOX_TEST_HOOKS
/* Test builds: the next pgconn_query fails as if PQsendQueryParams (PGCONN_TEST_FAIL_SEND)
 * or the PQflush after it (PGCONN_TEST_FAIL_FLUSH) had failed: the connection is reset. */
enum pgconn_test_fail { PGCONN_TEST_FAIL_NONE, PGCONN_TEST_FAIL_SEND, PGCONN_TEST_FAIL_FLUSH };
void pgconn_test_fail_next(struct pgconn *pg, enum pgconn_test_fail how);
#endif


#endif
