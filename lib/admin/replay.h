/* outbox-relay replay: SENT rows published again, as first published (a duplicate drill). */
#ifndef OUTBOX_REPLAY_H
#define OUTBOX_REPLAY_H

#include <libpq-fe.h>
#include <stdio.h>

#include "relay/config.h"

/* Selects SENT rows by cmd->id, cmd->key or cmd->since/until (at most
 * cmd->limit), in id order, and publishes them again (not with cmd->dry_run); reports on
 * out (JSON with cmd->json). Returns 0 when every selected row was delivered, 1 on failure
 * (err says why), 2 when a --since window without --limit holds more than 100,000 rows. */
int replay_run(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);

#endif
