/* outbox-inbox: the consumer half of effectively-once. Each message is applied in one
 * PostgreSQL transaction with its dedupe record, and only then is its offset stored. */
#ifndef OUTBOX_INBOX_H
#define OUTBOX_INBOX_H

#include <libpq-fe.h>
#include <signal.h>

#include "inbox/inbox_config.h"

/* Creates the inbox table (and its index) when missing, under an advisory lock; safe to
 * run from many processes at once. 0, or -1 with err. */
int inbox_migrate(PGconn *conn, const struct inbox_config *cfg, char *err, size_t errlen);

/* Checks that the table exists and resolves the handler to exactly the inbox signature;
 * fills function (caller frees) with its name as the server quotes it. 0, 1 (missing table or
 * handler: err says what to do). */
int inbox_resolve(PGconn *conn, const struct inbox_config *cfg, char **function, char *err, size_t errlen);

/* Consumes until *stop becomes non-zero (a signal handler sets it), then finishes the
 * message in progress, commits the stored offsets and returns the exit status (0; 1 when
 * the table or handler is missing; 2 when the consumer cannot be built). */
int inbox_run(const struct inbox_config *cfg, volatile sig_atomic_t *stop);

/* The connection the inbox and its commands use: fallback application name, connect
 * timeout, a primary; the role's own search_path (the inbox's statements qualify every
 * name; the handler's body may rely on it). NULL (logged, secrets redacted) on failure. */
PGconn *inbox_connect(const struct inbox_config *cfg);

#endif
