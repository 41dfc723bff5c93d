/* Admin commands for operators (blocking libpq; never on the relay loop):
 * status, requeue and purge, printing tables for humans or JSON for scripts. */
#ifndef OUTBOX_ADMIN_H
#define OUTBOX_ADMIN_H

#include <libpq-fe.h>
#include <stdio.h>

#include "relay/config.h"

/* Each returns 0, or -1 with err. conn is borrowed; output goes to out. */
int admin_status(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);
int admin_requeue(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);
int admin_purge(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);

#endif
