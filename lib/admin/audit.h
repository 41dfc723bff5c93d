/* outbox-relay audit: did everything committed reach Kafka? Compares the outbox table with
 * the topics its rows name. */
#ifndef OUTBOX_AUDIT_H
#define OUTBOX_AUDIT_H

#include <libpq-fe.h>
#include <stdio.h>

#include "relay/config.h"

/* Reads every partition of the topics the rows of the window (cmd->since/until on
 * created_at; the whole table without them) name, up to the high watermarks taken at the
 * start, into a temporary table of this session, and compares: committed rows, delivered,
 * lost, duplicates, per-key order of first deliveries, completion times, pending, parked,
 * and the window it could verify where Kafka's retention deleted old segments. Reports on
 * out (JSON with cmd->json), progress on the log. Returns 0 when nothing was lost, 1 when
 * a row was lost or a key's first deliveries are out of order, 2 when the audit could not
 * be done (err says why). */
int audit_run(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen);

#endif
