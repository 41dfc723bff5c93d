/* The table of outbox-relay's one-shot commands, and migrate. */
#include "admin/admin.h"

#include <string.h>

#include "admin/audit.h"
#include "admin/replay.h"
#include "core/log.h"
#include "relay/schema.h"

int admin_migrate(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err,
                  size_t errlen)
{
    (void)out;
    int applied = 0;
    if (schema_migrate(conn, cfg->table, cfg->payload_type, cfg->debezium, &applied, err, errlen) != 0 ||
        (cmd->leave_keep && keep_leave(conn, cfg, err, errlen) != 0) ||
        (cmd->partition_ids && keep_partition(conn, cfg, cmd->partition_ids, err, errlen) != 0))
        return -1;
    log_info("migrate: %s is at schema version %d (%d migration%s applied)", cfg->table,
             schema_layout_version(cfg->debezium), applied, applied == 1 ? "" : "s");
    return 0;
}

static const struct admin_command commands[] = {
    {"migrate", admin_migrate, OUTBOX_EXIT_FAILED},
    {"replay", replay_run, OUTBOX_EXIT_FAILED},
    {"audit", audit_run, OUTBOX_EXIT_USAGE}, /* unreachable: it cannot tell */
    {"status", admin_status, OUTBOX_EXIT_FAILED},
    {"requeue", admin_requeue, OUTBOX_EXIT_FAILED},
    {"purge", admin_purge, OUTBOX_EXIT_FAILED},
};

const struct admin_command *admin_command_find(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}
