/* outbox-relay replay: SENT rows published again, as first published (a duplicate drill). */
#ifndef OUTBOX_REPLAY_H
#define OUTBOX_REPLAY_H

#include <libpq-fe.h>
#include <stdio.h>

#include "config.h"

/* Selects SENT rows by cfg->requeue_id, cfg->requeue_key or cfg->since/until (at most
 * cfg->limit), in id order, and publishes them again (not with cfg->dry_run); reports on
 * out (JSON with cfg->json). Returns 0 when every selected row was delivered, 1 on failure
 * (err says why), 2 when a --since window without --limit holds more than 100,000 rows. */
int replay_run(PGconn *conn, const struct config *cfg, FILE *out, char *err, size_t errlen);

#endif
