/* A worker session's first statement: the schema version and the table's check, once per
 * connection (relay_int.h); what it finds sets the claim's statement and its floors. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"
#include "relay/schema.h"

static void version_result(struct relay *r, PGresult *res)
{
    char err[512];
    int have = 0;
    switch (schema_check_result(res, r->cfg->table, r->cfg->debezium, &have, err, sizeof(err))) {
    case SCHEMA_OK: {
        int dbz_table = PQnfields(res) > START_CHECK_MISSING_COLUMNS &&
                        strcmp(PQgetvalue(res, 0, START_CHECK_DEBEZIUM_LAYOUT), "t") == 0;
        if (dbz_table != r->cfg->debezium) {
            log_error("schema: table %s is in the %s layout but OUTBOX_LAYOUT=%s: %s", r->cfg->table,
                      dbz_table ? "debezium" : "native", r->cfg->layout,
                      dbz_table ? "set OUTBOX_LAYOUT=debezium"
                                : "set OUTBOX_LAYOUT=native, or migrate a Debezium outbox table with "
                                  "OUTBOX_LAYOUT=debezium");
            relay_finish(r, OUTBOX_EXIT_FAILED);
            break;
        }
        if (dbz_table && !PQgetisnull(res, 0, START_CHECK_MISSING_COLUMNS)) {
            log_error("schema: OUTBOX_ADDITIONAL_PLACEMENT names columns that %s does not have: %s",
                      r->cfg->table, PQgetvalue(res, 0, START_CHECK_MISSING_COLUMNS));
            relay_finish(r, OUTBOX_EXIT_FAILED);
            break;
        }
        const char *ptype = PQgetisnull(res, 0, START_CHECK_PAYLOAD_TYPE)
                                ? "none" : PQgetvalue(res, 0, START_CHECK_PAYLOAD_TYPE);
        r->payload_bytea = strcmp(ptype, "bytea") == 0;
        r->layout = (struct message_layout){
            .topic_template = r->cfg->topic_template, .debezium = r->cfg->debezium,
            .ce_source = r->cfg->ce_source,
            .ce_content_type = r->cfg->ce_content_type[0] ? r->cfg->ce_content_type
                                                          : message_content_type(ptype),
            .content_type = message_content_type(ptype)};
        if (!r->cfg->keep && PQnfields(res) > START_CHECK_KEEP_TABLE &&
            strcmp(PQgetvalue(res, 0, START_CHECK_KEEP_TABLE), "t") == 0) {
            log_error("schema: %s is in keep mode (its watermarks are set: published rows were never "
                      "marked) but OUTBOX_ON_SENT=%s would publish every one of them again: run with "
                      "OUTBOX_ON_SENT=keep, or leave keep mode first (docs/OUTBOX-TABLE.md, Keep)",
                      r->cfg->table, r->cfg->on_sent[0] ? r->cfg->on_sent : "mark (the default)");
            relay_finish(r, OUTBOX_EXIT_FAILED);
            break;
        }
        if (r->cfg->keep && have < 7) {
            log_error("schema: OUTBOX_ON_SENT=keep needs schema version 7 (its watermark tables); "
                      "%s is at %d: run `outbox-relay migrate`", r->cfg->table, have);
            relay_finish(r, OUTBOX_EXIT_FAILED);
            break;
        }
        /* the requeue count (schema 5) makes claims above the floors safe */
        claim_schema(r, have);
        free(r->sql.placement_types);
        r->sql.placement_types = PQgetisnull(res, 0, START_CHECK_PLACEMENT_TYPES)
                                     ? NULL : xstrdup(PQgetvalue(res, 0, START_CHECK_PLACEMENT_TYPES));
        outbox_sql_claim(&r->sql, r->cfg, r->payload_bytea, claim_floors_on(r));
        outbox_sql_arm(&r->sql, r->cfg, have >= 6); /* the bell sequence (schema 6) */
        if (!r->schema_logged)
            log_info("schema: %s at version %d%s; payload %s", r->cfg->table, have,
                     have < schema_layout_version(r->cfg->debezium) ? " (the previous one: this relay runs on it; "
                                               "`outbox-relay migrate` brings it up to date)" : "",
                     ptype);
        r->schema_logged = 1;
        r->schema_ok = 1;
        claim_want(r);
        break;
    }
    case SCHEMA_UNUSABLE:
        log_error("schema: %s", err);
        relay_finish(r, OUTBOX_EXIT_FAILED);
        break;
    case SCHEMA_RETRY:
        break; /* reported as a failed statement; retried after a delay */
    }
}

static const struct worker_stmt version_stmt = {
    .what = "schema version check", .on_ok = version_result, .on_fail = version_result};

void worker_send_version(struct relay *r)
{
    const char *params[1] = {r->cfg->table};
    worker_send(r, &version_stmt, r->sql.start_check, 1, params);
}
