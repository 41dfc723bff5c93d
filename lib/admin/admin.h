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
/* migrate --leave-keep (keep_leave.c): the table's keep-mode state written into its rows as
 * mark mode keeps it (published rows SENT, parked rows FAILED), then removed; refused while
 * a relay runs on the table. 0, or -1 with err. */
int keep_leave(PGconn *conn, const struct config *cfg, char *err, size_t errlen);
/* migrate --partition IDS (keep_partition.c): the outbox becomes a table partitioned by id
 * range, IDS ids per partition (done already: the partitions ahead are checked). 0, or -1. */
int keep_partition(PGconn *conn, const struct config *cfg, long long width, char *err, size_t errlen);
int admin_purge(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);
/* migrate (commands.c): the schema's missing migrations, then --leave-keep or --partition
 * when asked; logs the version reached. 0, or -1 with err. */
int admin_migrate(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err,
                  size_t errlen);

/* The one-shot commands that work on one blocking connection (commands.c), as a table the
 * program dispatches from. */
typedef int (*admin_fn)(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err,
                        size_t errlen);
struct admin_command {
    const char *name; /* as typed: "status" */
    admin_fn run;     /* 0, -1 with err (exit FAILED), or an exit status of its own */
    int unreachable;  /* the exit status when PostgreSQL cannot be reached */
};
/* The command called name, or NULL when it is none of these. */
const struct admin_command *admin_command_find(const char *name);

#endif
