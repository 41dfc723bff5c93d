/* The worker connection's statements: one sender for all of them (worker_send), one
 * completion that records contact with PostgreSQL (the lease deadline counts from it),
 * reports failures and asks the loop for the next step; and the schema version check. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* Asks for the before-sleep kick (relay.c's kick_cb) that moves the relay on. */
void relay_want_kick(struct relay *r)
{
    r->kick_wanted = 1;
    if (!ev_is_active(&r->kick_prepare))
        ev_prepare_start(r->loop, &r->kick_prepare);
}

/* Ends the loop with an exit status (enum outbox_exit). */
void relay_finish(struct relay *r, int code)
{
    r->exit_code = code;
    r->mode = MODE_DONE;
    ev_break(r->loop, EVBREAK_ALL);
}
#include "relay/schema.h"
#include "core/util.h"

int worker_busy(const struct relay *r)
{
    return r->stmt != NULL;
}

/* A statement failed: log it; reconnect when the server is shutting down, else retry after
 * a short delay. (A read-only server is pgconn's: it reconnects and res is NULL.) */
static void statement_failed(struct relay *r, const char *what, PGresult *res)
{
    if (!res)
        return; /* connection lost: the reconnect path takes over */
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    const char *state = pgconn_sqlstate(res);
    char key[sizeof(r->fail_log.last)];
    snprintf(key, sizeof(key), "%s failed (%s): %s", what, state, line);
    int64_t now = mono_ms();
    if (strcmp(key, r->fail_log.last) != 0) {
        log_warn("pg worker: %s", key);
        snprintf(r->fail_log.last, sizeof(r->fail_log.last), "%s", key);
        r->fail_log.logged_ms = now;
        r->fail_log.repeats = 0;
    } else if (now - r->fail_log.logged_ms >= r->fail_log.every_ms) {
        log_warn("pg worker: %s (again, %ld more times since it was last logged)", key,
                 r->fail_log.repeats + 1);
        r->fail_log.logged_ms = now;
        r->fail_log.repeats = 0;
    } else {
        r->fail_log.repeats++;
        log_debug("pg worker: %s", key);
    }
    if (strncmp(state, "57P", 3) == 0)
        pgconn_reset(r->worker, "server is shutting down");
    else if (!ev_is_active(&r->retry_timer)) {
        ev_timer_set(&r->retry_timer, 0.5, 0.0);
        ev_timer_start(r->loop, &r->retry_timer);
    }
}

static void worker_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    const struct worker_stmt *stmt = r->stmt;
    r->stmt = NULL;
    if (res) /* the session (and its advisory locks) was alive when the statement was sent */
        r->lease.last_contact_ms = r->stmt_sent_ms;
    if (pgconn_result_ok(res)) {
        stmt->on_ok(r, res);
        if (!stmt->keeps_result)
            PQclear(res);
    } else {
        statement_failed(r, stmt->what, res);
        if (stmt->on_fail)
            stmt->on_fail(r, res);
        PQclear(res);
    }
    relay_want_kick(r);
}

#ifdef OUTBOX_TEST_HOOKS
/* Test builds: once OUTBOX_TESTHOOK_SEND_FAIL_AFTER (FLUSH_FAIL_AFTER) rows were published,
 * the next worker statement's send (flush) fails, once. */
static void test_fail_send(struct relay *r, const struct worker_stmt *stmt)
{
    long long *after[2] = {&r->test_send_fail_after, &r->test_flush_fail_after};
    for (int i = 0; i < 2; i++) {
        if (*after[i] <= 0 || r->m.published_total < (uint64_t)*after[i])
            continue;
        *after[i] = 0;
        log_warn("test hook: the %s of the next worker statement (%s) fails", i ? "flush" : "send",
                 stmt->what);
        pgconn_test_fail_next(r->worker, i ? PGCONN_TEST_FAIL_FLUSH : PGCONN_TEST_FAIL_SEND);
        return;
    }
}
#endif

/* Sends a statement; worker_done runs its on_ok or on_fail. Returns 0 once it is in flight;
 * -1 if the connection is not idle (nothing sent, nothing run), or if the send failed at
 * once (PQsendQueryParams or PQflush): then, before this returns, pgconn has dropped the
 * connection and worker_done has run with res NULL, the statement's on_fail as for a
 * connection lost under it (which is why r->stmt is set before the send). A caller that
 * undoes on -1 what it prepared finds it possibly undone already (mark_send's move back). */
int worker_send(struct relay *r, const struct worker_stmt *stmt, const char *sql, int nparams,
                const char *const *params)
{
    if (!pgconn_idle(r->worker))
        return -1;
#ifdef OUTBOX_TEST_HOOKS
    test_fail_send(r, stmt);
#endif
    r->stmt = stmt;
    r->stmt_sent_ms = mono_ms();
    return pgconn_query_prepared(r->worker, sql, nparams, params, worker_done, r);
}

/* ---- schema version check, once per worker connection --------------------- */

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
        r->claim.floors_on = have >= 5;
        free(r->sql.placement_types);
        r->sql.placement_types = PQgetisnull(res, 0, START_CHECK_PLACEMENT_TYPES)
                                     ? NULL : xstrdup(PQgetvalue(res, 0, START_CHECK_PLACEMENT_TYPES));
        outbox_sql_claim(&r->sql, r->cfg, r->payload_bytea, r->claim.floors_on);
        outbox_sql_arm(&r->sql, r->cfg, have >= 6); /* the bell sequence (schema 6) */
        if (!r->schema_logged)
            log_info("schema: %s at version %d%s; payload %s", r->cfg->table, have,
                     have < schema_layout_version(r->cfg->debezium) ? " (the previous one: this relay runs on it; "
                                               "`outbox-relay migrate` brings it up to date)" : "",
                     ptype);
        r->schema_logged = 1;
        r->schema_ok = 1;
        r->claim.wanted = 1;
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
