/* outbox-inbox and PostgreSQL (inbox_int.h): connect, migrate, resolve the handler, build
 * the statements, run one, judge its failures, and retention. */
#include <stdlib.h>
#include <string.h>

#include "inbox/inbox_int.h"
#include "core/log.h"
#include "core/backoff.h"
#include "pg/pgconn.h"

PGconn *inbox_connect(const struct inbox_config *cfg)
{
    /* INBOX_PG_DSN_FILE is read again for every connection: a rotated password is used from
     * the next reconnect on; the handler may rely on the role's search_path (not pinned) */
    char *dsn = settings_current_secret(cfg->pg_dsn, cfg->pg_dsn_file, "INBOX_PG_DSN_FILE");
    PGconn *conn = pgconn_connect_blocking(dsn, "outbox-inbox", 0);
    free(dsn);
    return conn;
}

int inbox_migrate(PGconn *conn, const struct inbox_config *cfg, char *err, size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    struct strbuf q;
    strbuf_init(&q);
    /* status: APPLIED (the handler ran and committed) or FAILED (dead-lettered; a later
     * delivery of the same key is applied again). */
    strbuf_printf(&q,
                  "BEGIN;"
                  "SELECT pg_advisory_xact_lock(hashtext('outbox-inbox migrate'));"
                  "CREATE TABLE IF NOT EXISTS %s ("
                  " dedupe_key text NOT NULL,"
                  " handler text NOT NULL,"
                  " event_id text,"
                  " event_type text,"
                  " topic text NOT NULL,"
                  " \"partition\" integer NOT NULL,"
                  " \"offset\" bigint NOT NULL,"
                  " status text NOT NULL CONSTRAINT \"%s_status_check\" CHECK (status IN ('APPLIED', 'FAILED')),"
                  " attempts integer NOT NULL DEFAULT 0,"
                  " last_error text,"
                  " received_at timestamptz NOT NULL,"
                  " applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
                  " PRIMARY KEY (dedupe_key, handler));"
                  "CREATE INDEX IF NOT EXISTS \"%s_applied_at_idx\" ON %s (applied_at);"
                  "COMMENT ON TABLE %s IS 'outbox-inbox: one row per message applied (or failed), keyed by its "
                  "dedupe key and handler';"
                  "COMMIT",
                  table_q, name, name, table_q, table_q);
    PGresult *res = pgconn_exec(conn, q.buf, 0, NULL, err, errlen);
    int rc = res ? 0 : -1;
    PQclear(res);
    if (rc)
        PQclear(PQexec(conn, "ROLLBACK"));
    strbuf_destroy(&q);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}

int inbox_resolve(PGconn *conn, const struct inbox_config *cfg, char **function, char *err, size_t errlen)
{
    const char *p1[1] = {cfg->table};
    char why[512];
    PGresult *res = pgconn_exec(conn, "SELECT to_regclass($1) IS NOT NULL", 1, p1, why, sizeof(why));
    if (!res)
        return set_err(err, errlen, "cannot look up %s: %s", cfg->table, why), 1;
    int exists = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!exists)
        return set_err(err, errlen, "the inbox table %s does not exist: run `outbox-inbox migrate` (or set "
                       "INBOX_TABLE)", cfg->table), 1;
    /* The name is resolved by the server to exactly the inbox signature and quoted by it:
     * nothing of the setting reaches the statement unquoted. */
    const char *p2[1] = {cfg->handler};
    res = pgconn_exec(conn,
                      "SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname),"
                      " has_function_privilege(p.oid, 'EXECUTE'), p.prokind"
                      " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                      " WHERE p.oid = to_regprocedure($1 || '(uuid, text, text, jsonb, jsonb)')",
                      1, p2, why, sizeof(why));
    if (!res)
        return set_err(err, errlen, "INBOX_HANDLER: cannot resolve '%s': %s", cfg->handler, why), 1;
    if (PQntuples(res) == 0) {
        PQclear(res);
        const char *dot = strrchr(cfg->handler, '.');
        const char *p3[1] = {dot ? dot + 1 : cfg->handler};
        res = pgconn_exec(conn, "SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc WHERE proname = $1",
                          1, p3, why, sizeof(why));
        const char *others = res && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : NULL;
        set_err(err, errlen, "INBOX_HANDLER: no function %s(event_id uuid, event_type text, key text, payload "
                "jsonb, headers jsonb) is visible%s%s", cfg->handler, others ? "; found only: " : "",
                others ? others : "");
        PQclear(res);
        return 1;
    }
    int can_execute = PQgetvalue(res, 0, 1)[0] == 't', is_function = PQgetvalue(res, 0, 2)[0] == 'f';
    if (!can_execute || !is_function) {
        set_err(err, errlen, "INBOX_HANDLER: %s is %s", PQgetvalue(res, 0, 0),
                !is_function ? "not a function (a procedure or aggregate)" : "not executable by this role (GRANT EXECUTE)");
        PQclear(res);
        return 1;
    }
    *function = xstrdup(PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

void inbox_build_statements(struct inbox *ib)
{
    char *schema_q, *table_q, *name;
    schema_names(ib->cfg->table, &schema_q, &table_q, &name);
    struct strbuf sb;
    /* $1 key, $2 handler, $3 event_id, $4 event_type, $5 topic, $6 partition, $7 offset,
     * $8 attempts, $9 received (ms), and for a failure $10 the error */
    static const char *const cols =
        " (dedupe_key, handler, event_id, event_type, topic, \"partition\", \"offset\", status, attempts,"
        " received_at%s) VALUES ($1, $2, $3, $4, $5, $6::int, $7::int8, '%s', $8::int,"
        " to_timestamp($9::float8 / 1000)%s) ON CONFLICT (dedupe_key, handler) DO UPDATE SET status = '%s',"
        " event_id = EXCLUDED.event_id, event_type = EXCLUDED.event_type, topic = EXCLUDED.topic,"
        " \"partition\" = EXCLUDED.\"partition\", \"offset\" = EXCLUDED.\"offset\", attempts = EXCLUDED.attempts,"
        " last_error = EXCLUDED.last_error, received_at = EXCLUDED.received_at, applied_at = clock_timestamp()"
        " WHERE i.status = 'FAILED' RETURNING 1";
    /* The dedupe record and, only when it is new, the handler, in one statement: the
     * handler is in the target list of a query over the insert's returned rows, and the
     * MATERIALIZED CTE is read whole by count(*) whatever the function's volatility says.
     * It returns 1 when the message was applied, 0 for a duplicate. $10..$14: the
     * handler's arguments. */
    strbuf_init(&sb);
    strbuf_printf(&sb, "WITH ins AS (INSERT INTO %s AS i", table_q);
    strbuf_printf(&sb, cols, "", "APPLIED", "", "APPLIED");
    strbuf_printf(&sb, "), h AS MATERIALIZED (SELECT %s($10::uuid, $11, $12, $13::jsonb, $14::jsonb) FROM ins)"
                  " SELECT count(*) FROM h", ib->function);
    ib->apply_sql = sb.buf;
    strbuf_init(&sb);
    strbuf_printf(&sb, "INSERT INTO %s AS i", table_q);
    strbuf_printf(&sb, cols, ", last_error", "FAILED", ", $10", "FAILED");
    ib->fail_sql = sb.buf;
    strbuf_init(&sb);
    strbuf_printf(&sb, "DELETE FROM %s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %s WHERE applied_at < "
                  "clock_timestamp() - make_interval(secs => $1::int) LIMIT %d))", table_q, table_q, RETENTION_BATCH);
    ib->retention_sql = sb.buf;
    free(schema_q);
    free(table_q);
    free(name);
}

/* Errors that say nothing about the message: retried without counting an attempt. Besides
 * lost connections, conflicts and a read-only server after a failover, this counts what a
 * broken deployment raises for every message alike (a missing table, function, column or
 * schema, a missing privilege): dead-lettering everything would not fix it. */
static int transient_sqlstate(const char *state)
{
    static const char *const transient[] = {"40001", "40P01", "25006", "57P01", "57P02", "57P03",
                                            "53300", "53400", "55P03", "58000", "58030",
                                            "42P01", "42883", "42703", "3F000", "42501"};
    if (!state || strncmp(state, "08", 2) == 0)
        return 1;
    for (size_t i = 0; i < ARRAY_LEN(transient); i++)
        if (strcmp(state, transient[i]) == 0)
            return 1;
    return 0;
}


/* One statement; NULL on failure with *transient said and last_error filled. */
PGresult *inbox_statement(struct inbox *ib, const char *sql, int n, const char *const *params, int *transient)
{
    PGresult *res = n ? PQexecParams(ib->conn, sql, n, NULL, params, NULL, NULL, 0) : PQexec(ib->conn, sql);
    if (pgconn_result_ok(res))
        return res;
    inbox_failure(ib, res, transient);
    PQclear(res);
    return NULL;
}

/* Fills last_error from a failed result (NULL: the connection) and says whether the
 * failure is transient. */
void inbox_failure(struct inbox *ib, const PGresult *res, int *transient)
{
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (primary && state)
        snprintf(ib->last_error, sizeof(ib->last_error), "%s (SQLSTATE %s)", primary, state);
    else
        pgconn_error_line(res, ib->last_error, sizeof(ib->last_error));
    if (!res || PQstatus(ib->conn) != CONNECTION_OK)
        snprintf(ib->last_error, sizeof(ib->last_error), "connection lost: %s", PQerrorMessage(ib->conn));
    *transient = !res || PQstatus(ib->conn) != CONNECTION_OK ||
                 transient_sqlstate(PQresultErrorField(res, PG_DIAG_SQLSTATE));
}

void inbox_rollback(struct inbox *ib)
{
    if (ib->conn && PQstatus(ib->conn) == CONNECTION_OK && PQtransactionStatus(ib->conn) != PQTRANS_IDLE)
        PQclear(PQexec(ib->conn, "ROLLBACK"));
}

/* Connected, or 1 when asked to stop while reconnecting with backoff. */
int inbox_ensure_connected(struct inbox *ib)
{
    if (ib->conn && PQstatus(ib->conn) == CONNECTION_OK)
        return 0;
    if (ib->conn) {
        PQfinish(ib->conn);
        ib->conn = NULL;
        log_warn("postgres: connection lost; reconnecting");
    }
    struct backoff b;
    backoff_init(&b, 100, ib->cfg->retry_backoff_max_ms);
    while (!*ib->stop) {
        if ((ib->conn = inbox_connect(ib->cfg))) {
            ib->prepared = 0;
            ib->pg_reconnects++;
            log_info("postgres: connected");
            return 0;
        }
        if (inbox_pause_ms(ib, backoff_next(&b)))
            break;
    }
    return 1;
}

void inbox_retention(struct inbox *ib)
{
    int64_t now = mono_ms();
    if (!ib->cfg->retention_seconds || now - ib->last_retention < RETENTION_EVERY_MS || inbox_ensure_connected(ib))
        return;
    ib->last_retention = now;
    char secs[32];
    snprintf(secs, sizeof(secs), "%d", ib->cfg->retention_seconds);
    const char *params[1] = {secs};
    for (int round = 0; round < 20; round++) {
        int transient = 0;
        PGresult *res = inbox_statement(ib, ib->retention_sql, 1, params, &transient);
        if (!res) {
            log_warn("retention: %s", ib->last_error);
            return;
        }
        long n = atol(PQcmdTuples(res));
        PQclear(res);
        ib->retention_deleted += (uint64_t)n;
        if (n < RETENTION_BATCH)
            return;
    }
}
