/* outbox-relay status / requeue / purge. */
#include "admin/admin.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "relay/outbox.h"
#include "pg/pgconn.h"
#include "relay/schema.h"
#include "core/util.h"

/* A result cell as JSON: NULL -> null, numbers when asked, else a string. */
static json_t *cell(PGresult *res, int row, int col, int numeric)
{
    if (PQgetisnull(res, row, col))
        return json_null();
    const char *v = PQgetvalue(res, row, col);
    if (numeric)
        return strchr(v, '.') ? json_real(strtod(v, NULL)) : json_integer(strtoll(v, NULL, 10));
    return json_string(v);
}

/* Rows of res as an array of objects; numeric_cols is a string of '0'/'1' per column. */
static json_t *rows_json(PGresult *res, const char *numeric_cols)
{
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *obj = json_object();
        for (int c = 0; c < PQnfields(res); c++)
            json_object_set_new(obj, PQfname(res, c), cell(res, i, c, numeric_cols[c] == '1'));
        json_array_append_new(arr, obj);
    }
    return arr;
}

static void print_table(FILE *out, const char *title, PGresult *res)
{
    fprintf(out, "\n%s\n", title);
    int n = PQnfields(res);
    if (PQntuples(res) == 0) {
        fprintf(out, "  (none)\n");
        return;
    }
    int width[16] = {0};
    for (int c = 0; c < n && c < 16; c++) {
        width[c] = (int)strlen(PQfname(res, c));
        for (int i = 0; i < PQntuples(res); i++) {
            int w = PQgetlength(res, i, c);
            if (w > 60)
                w = 60;
            if (w > width[c])
                width[c] = w;
        }
    }
    fputs(" ", out);
    for (int c = 0; c < n && c < 16; c++)
        fprintf(out, " %-*s", width[c], PQfname(res, c));
    fputs("\n", out);
    for (int i = 0; i < PQntuples(res); i++) {
        fputs(" ", out);
        for (int c = 0; c < n && c < 16; c++)
            fprintf(out, " %-*.*s", width[c], 60,
                    PQgetisnull(res, i, c) ? "" : PQgetvalue(res, i, c));
        fputs("\n", out);
    }
}

/* status's report from its four results: text, or JSON with --json. */
static void status_print(FILE *out, const struct config *cfg, int json, PGresult *summary, PGresult *parked,
                         PGresult *topics, PGresult *relays)
{
    if (json) {
        json_t *doc = json_object();
        json_object_set_new(doc, "table", json_string(cfg->table));
        json_object_set_new(doc, "schema_version", cell(summary, 0, 0, 1));
        json_object_set_new(doc, "layout", json_string(cfg->layout));
        json_object_set_new(doc, "pending_rows", cell(summary, 0, 1, 1));
        json_object_set_new(doc, "oldest_pending_age_seconds", cell(summary, 0, 2, 1));
        json_object_set_new(doc, "failed_rows", cell(summary, 0, 3, 1));
        json_object_set_new(doc, "parked", rows_json(parked, "1000100"));
        json_object_set_new(doc, "topics", rows_json(topics, "011"));
        json_object_set_new(doc, "relays", rows_json(relays, "0100101"));
        char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        fprintf(out, "%s\n", text);
        free(text);
        json_decref(doc);
    } else {
        fprintf(out, "outbox %s (schema version %s, %s layout)\n", cfg->table, PQgetvalue(summary, 0, 0),
                cfg->layout);
        fprintf(out, "  pending rows:        %s\n", PQgetvalue(summary, 0, 1));
        fprintf(out, "  oldest pending age:  %s\n",
                PQgetisnull(summary, 0, 2) ? "-" : PQgetvalue(summary, 0, 2));
        fprintf(out, "  parked (FAILED):     %s\n", PQgetvalue(summary, 0, 3));
        print_table(out, "parked rows (requeue with: outbox-relay requeue --id N | --key K | --all)", parked);
        print_table(out, "topics with unsent rows", topics);
        print_table(out, "connected relays", relays);
    }
}

int admin_status(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen)
{
    struct outbox_sql sql;
    outbox_sql_init(&sql, cfg);
    char *schema_q, *t, *name;
    schema_names(cfg->table, &schema_q, &t, &name);
    free(t); /* rows are read and written through the layout's relation */
    t = schema_read_relation(cfg->table, cfg->debezium, cfg->keep);
    struct strbuf q;
    strbuf_init(&q);
    PGresult *summary = NULL, *parked = NULL, *topics = NULL, *relays = NULL;
    int rc = -1;
    const char *table_param[1] = {cfg->table};

    strbuf_printf(&q,
                  "SELECT (%s) AS schema_version,"
                  " (SELECT count(*) FROM %s WHERE status = 'PENDING') AS pending_rows,"
                  " (SELECT round(" OUTBOX_OLDEST_AGE("created_at") "::numeric, 3)"
                  "   FROM %s WHERE status = 'PENDING') AS oldest_pending_age_seconds,"
                  " (SELECT count(*) FROM %s WHERE status = 'FAILED') AS failed_rows",
                  sql.version, t, t, t);
    if (!(summary = pgconn_exec(conn, q.buf, 1, table_param, err, errlen)))
        goto out;
    strbuf_reset(&q);
    strbuf_printf(&q,
                  "SELECT id, aggregate_id, event_type, %s AS topic, attempts, last_error,"
                  " to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS created_at"
                  " FROM %s p WHERE status = 'FAILED' ORDER BY id LIMIT 100",
                  sql.topic_expr, t);
    if (!(parked = pgconn_exec(conn, q.buf, 0, NULL, err, errlen)))
        goto out;
    strbuf_reset(&q);
    strbuf_printf(&q,
                  "SELECT %s AS topic, count(*) FILTER (WHERE status = 'PENDING') AS pending_rows,"
                  " count(*) FILTER (WHERE status = 'FAILED') AS failed_rows"
                  " FROM %s p WHERE status <> 'SENT' GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 100",
                  sql.topic_expr, t);
    if (!(topics = pgconn_exec(conn, q.buf, 0, NULL, err, errlen)))
        goto out;
    strbuf_reset(&q);
    strbuf_printf(&q,
                  "SELECT substr(a.application_name, 14) AS relay, a.pid,"
                  " coalesce(host(a.client_addr), 'local') AS client_addr,"
                  " to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS connected_since,"
                  " s.claimed_high,"
                  " to_char(s.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS last_claim_at,"
                  " (SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'"
                  "   AND l.classid = %d::oid AND l.objid < %d AND l.objsubid = 2 AND l.granted)"
                  "   AS partitions"
                  " FROM pg_stat_activity a LEFT JOIN %s.\"%s_relay_state\" s"
                  "  ON s.relay = substr(a.application_name, 14)"
                  " WHERE a.pid IN (SELECT l.pid FROM pg_locks l WHERE " OUTBOX_MEMBERS_WHERE ")"
                  " ORDER BY 1, 2",
                  sql.lease_key, OUTBOX_LEASE_PARTITIONS, schema_q, name, sql.lease_key);
    if (!(relays = pgconn_exec(conn, q.buf, 0, NULL, err, errlen)))
        goto out;

    status_print(out, cfg, cmd->json, summary, parked, topics, relays);
    rc = 0;
out:
    PQclear(summary);
    PQclear(parked);
    PQclear(topics);
    PQclear(relays);
    strbuf_destroy(&q);
    free(schema_q);
    free(t);
    free(name);
    outbox_sql_destroy(&sql);
    return rc;
}

int admin_requeue(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen)
{
    char *schema_q, *t, *name;
    schema_names(cfg->table, &schema_q, &t, &name);
    free(t); /* rows are read and written through the layout's relation */
    t = schema_rows_relation(cfg->table, cfg->debezium);
    struct strbuf q, doorbell;
    strbuf_init(&q);
    strbuf_init(&doorbell);
    strbuf_printf(&doorbell, "%s.\"%s_doorbell\"", schema_q, name);
    /* Requeued rows lie below the running relays' claim floors: the doorbell's requeue
     * count (schema 5), raised in the same transaction, makes their next claim read from
     * the bottom, so a requeued row still goes before the later rows of its key. */
    const char *dparams[1] = {doorbell.buf};
    PGresult *has = pgconn_exec(conn, "SELECT count(*) FROM pg_catalog.pg_attribute WHERE attrelid ="
                                      " pg_catalog.to_regclass($1) AND attname = 'requeued'"
                                      " AND NOT attisdropped", 1, dparams, err, errlen);
    int counted = has && strcmp(PQgetvalue(has, 0, 0), "1") == 0;
    PQclear(has);
    const char *which = cmd->id ? "id = $1::int8" : cmd->key ? "aggregate_id = $1" : "true";
    if (cfg->keep) /* the parked table: the requeued row goes again, below the watermark */
        strbuf_printf(&q, "WITH r AS (UPDATE %s.\"%s_parked\" SET failed = false, attempts = 0"
                          " WHERE failed AND %s RETURNING id)", schema_q, name, which);
    else
        strbuf_printf(&q, "WITH r AS (UPDATE %s SET status = 'PENDING', attempts = 0 WHERE status = 'FAILED'"
                          " AND %s RETURNING id)", t, which);
    if (counted)
        strbuf_printf(&q, ", c AS (UPDATE %s SET requeued = requeued + 1 WHERE EXISTS (SELECT FROM r))",
                      doorbell.buf);
    strbuf_puts(&q, " SELECT id FROM r");
    const char *params[1] = {cmd->id ? cmd->id : cmd->key};
    PGresult *res = pgconn_exec(conn, q.buf, cmd->all ? 0 : 1, params, err, errlen);
    int rc = -1;
    if (res) {
        if (cmd->json)
            fprintf(out, "{\"requeued\": %d}\n", PQntuples(res));
        else
            fprintf(out, "requeued %d parked row%s to PENDING\n", PQntuples(res),
                    PQntuples(res) == 1 ? "" : "s");
        PQclear(res);
        rc = 0;
    }
    strbuf_destroy(&q);
    strbuf_destroy(&doorbell);
    free(schema_q);
    free(t);
    free(name);
    return rc;
}

int admin_purge(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen)
{
    if (cfg->retention_seconds <= 0)
        return set_err(err, errlen, "OUTBOX_RETENTION is 0: retention is off, nothing to purge");
    struct outbox_sql sql;
    outbox_sql_init(&sql, cfg);
    long long total = 0, after = 0;
    int rc = 0;
    char secs[16];
    snprintf(secs, sizeof(secs), "%d", cfg->retention_seconds);
    for (;;) {
        char after_s[24];
        snprintf(after_s, sizeof(after_s), "%lld", after);
        const char *params[3] = {after_s, "5000", secs};
        PGresult *res = pgconn_exec(conn, sql.purge, 3, params, err, errlen);
        if (!res) {
            rc = -1;
            break;
        }
        long long deleted = atoll(PQgetvalue(res, 0, 0));
        long long max_seen = PQgetisnull(res, 0, 1) ? 0 : atoll(PQgetvalue(res, 0, 1));
        long long live = atoll(PQgetvalue(res, 0, 2));
        PQclear(res);
        total += deleted;
        if (max_seen == 0 || live > 0)
            break;
        after = max_seen;
    }
    if (rc == 0) {
        if (cmd->json)
            fprintf(out, "{\"deleted\": %lld}\n", total);
        else
            fprintf(out, "deleted %lld SENT rows older than %s\n", total, cfg->retention);
    }
    outbox_sql_destroy(&sql);
    return rc;
}
