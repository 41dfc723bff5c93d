/* PostgreSQL helpers both programs share, none of them on the relay's loop: result checks
 * and error lines, the blocking connect and exec of the commands and outbox-inbox, the
 * pooler check, and bytea payloads decoded from hex. (pgconn.h is the loop's connection.) */
#ifndef OUTBOX_PGUTIL_H
#define OUTBOX_PGUTIL_H

#include <libpq-fe.h>
#include <stddef.h>

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

/* Splits "schema.name" (or "name", schema public) into quoted parts. Caller frees all three. */
void schema_names(const char *table, char **schema_q, char **table_q, char **name);

#endif
