/* The outbox table's SQL: every statement the relay, the monitor and the admin commands
 * run, built once from the configured table name (quoted) and topic template. */
#ifndef OUTBOX_OUTBOX_H
#define OUTBOX_OUTBOX_H

#include "config.h"

struct outbox_sql {
    char *claim;         /* $1 gap starts, $2 gap ends, $3 limit, $4 paused topics */
    char *mark;          /* $1 ids, $2 relay name, $3 highest id claimed so far */
    char *park;          /* $1 id, $2 reason */
    char *note_failed;   /* $1 ids, $2 reason: last_error only, attempts unchanged */
    char *row_failed;    /* $1 id, $2 reason, $3 max attempts: attempts+1, parks at the limit */
    char *arm;           /* $1 channel */
    char *version;       /* $1 table */
    char *stats;         /* $1 count cap */
    char *long_tx;       /* $1 threshold seconds */
    char *purge;         /* $1 after id, $2 window, $3 retention seconds */
    char *duplicates;    /* rows a previous relay may have published: PENDING below its claim mark */
    char *topic_expr;    /* SQL expression of a row's topic (alias p) */
};

void outbox_sql_init(struct outbox_sql *sql, const struct config *cfg);
void outbox_sql_destroy(struct outbox_sql *sql);

#endif
