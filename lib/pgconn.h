/* One non-blocking PostgreSQL connection driven by the libev loop: asynchronous
 * connect (PQconnectStartParams/PQconnectPoll), one query at a time with
 * PQsendQueryParams, notifications, and reconnect with capped backoff. Never blocks. */
#ifndef OUTBOX_PGCONN_H
#define OUTBOX_PGCONN_H

#include <ev.h>
#include <libpq-fe.h>

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

/* Sends one statement with text parameters (copied by libpq before return).
 * Returns 0, or -1 if not idle or the send failed (then the connection is reset). */
int pgconn_query(struct pgconn *pg, const char *sql, int nparams, const char *const *values,
                 pgconn_result_cb cb, void *ctx);

/* Whether a result is a success (command or rows); NULL is not. */
int pgconn_result_ok(const PGresult *res);
/* SQLSTATE of a failed result, "" if none. */
const char *pgconn_sqlstate(const PGresult *res);
/* First line of a result's error message. */
void pgconn_error_line(const PGresult *res, char *buf, size_t len);
/* First line of a connection's error message (libpq's are multi-line). */
void pgconn_conn_error_line(const PGconn *conn, char *buf, size_t len);
/* Blocking, for the commands and outbox-inbox: connects to a primary (connect_timeout 10 s
 * and the fallback application name unless the DSN says otherwise), optionally pinning
 * the search_path. NULL on failure, logged with the DSN's secrets redacted. */
PGconn *pgconn_connect_blocking(const char *dsn, const char *application, int pin_search_path);
/* Blocking, for the command-line commands only (never on the relay's loop): runs sql
 * (PQexec when nparams is 0, so it may hold several statements) and returns its result,
 * or NULL with err set to the first line of the error. */
PGresult *pgconn_exec(PGconn *conn, const char *sql, int nparams, const char *const *params,
                      char *err, size_t errlen);

/* A bytea column of a result, sent as hex (encode(col, 'hex')), decoded for every row into
 * one buffer: the bytes of a binary payload, NUL bytes included. */
struct pg_bytes {
    char *buf;
    size_t *end; /* row i is buf[end[i-1] .. end[i]) (from 0 for the first) */
};
/* Returns 0, or -1 when a value is not hex (then b is empty). */
int pg_bytes_decode(struct pg_bytes *b, const PGresult *res, int col);
/* Row i's bytes and length; NULL for a NULL value. */
const char *pg_bytes_get(const struct pg_bytes *b, const PGresult *res, int col, int i, size_t *len);
void pg_bytes_free(struct pg_bytes *b);

/* Whether dsn leads to a real session, as LISTEN and session advisory locks need, or to a
 * pooler in transaction or statement mode (PgBouncer and the like): one connection reads
 * its backend's pid, a second holds a transaction open, the first asks again — a pooled
 * "session" answers from another backend, or waits for the one the transaction holds.
 * 1 a real session, 0 pooled (why says what was seen), -1 not known (unreachable). */
int pgconn_check_session(const char *dsn, char *why, size_t whylen);

#endif
