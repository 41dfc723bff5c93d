/* Schema migrations: placeholder expansion, migrate under an advisory lock, version check. */
#include "schema.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pgconn.h"
#include "util.h"

/* A row of outbox_relay_schema that is about table $1 (given with its schema). */
#define SAME_TABLE "(table_name = $1 OR 'public.' || table_name = $1)"

/* Advisory lock key shared by every migrating relay ("outbox" in ASCII). */
#define MIGRATE_LOCK_KEY 0x6f7574626f78LL

int schema_version(void)
{
    return schema_files[schema_file_count - 1].version;
}

void schema_names(const char *table, char **schema_q, char **table_q, char **name)
{
    const char *dot = strchr(table, '.');
    char *schema = dot ? xstrndup(table, (size_t)(dot - table)) : xstrdup("public");
    *name = xstrdup(dot ? dot + 1 : table);
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "\"%s\"", schema);
    *schema_q = xstrdup(sb.buf);
    strbuf_printf(&sb, ".\"%s\"", *name);
    *table_q = sb.buf;
    free(schema);
}

static char *expand(const char *sql, const char *schema_q, const char *table_q, const char *name)
{
    struct strbuf sb;
    strbuf_init(&sb);
    for (const char *p = sql; *p;) {
        if (strncmp(p, "@SCHEMA@", 8) == 0) {
            strbuf_puts(&sb, schema_q);
            p += 8;
        } else if (strncmp(p, "@TABLE@", 7) == 0) {
            strbuf_puts(&sb, table_q);
            p += 7;
        } else if (strncmp(p, "@NAME@", 6) == 0) {
            strbuf_puts(&sb, name);
            p += 6;
        } else {
            strbuf_append(&sb, p, 1);
            p++;
        }
    }
    return sb.buf;
}

char *schema_version_query(const char *table)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    struct strbuf sb;
    strbuf_init(&sb);
    /* $1 has its schema (the configuration adds public.); older migrates recorded the name
     * as configured, possibly without it */
    strbuf_printf(&sb, "SELECT max(version) FROM %s.outbox_relay_schema WHERE " SAME_TABLE,
                  schema_q);
    free(schema_q);
    free(table_q);
    free(name);
    return sb.buf;
}

enum schema_check schema_check_result(const PGresult *res, const char *table, char *err,
                                      size_t errlen)
{
    if (!pgconn_result_ok(res)) {
        const char *state = pgconn_sqlstate(res);
        if (strcmp(state, "42P01") != 0 && strcmp(state, "3F000") != 0)
            return SCHEMA_RETRY;
        char line[512];
        pgconn_error_line(res, line, sizeof(line));
        set_err(err, errlen, "table %s has no outbox-relay schema (%s); run `outbox-relay "
                "migrate` first", table, line);
        return SCHEMA_UNUSABLE;
    }
    int have = PQntuples(res) < 1 || PQgetisnull(res, 0, 0) ? 0 : atoi(PQgetvalue(res, 0, 0));
    if (have == schema_version())
        return SCHEMA_OK;
    set_err(err, errlen, "table %s is at schema version %d but this relay needs version %d; run "
            "`outbox-relay migrate` with this relay's version%s", table, have, schema_version(),
            have > schema_version() ? " (or upgrade the relay: the schema is newer)" : "");
    return SCHEMA_UNUSABLE;
}

static int exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params,
                   char *err, size_t errlen)
{
    /* PQexec for parameterless (possibly multi-statement) SQL; the extended protocol
     * takes one statement only. */
    PGresult *res = nparams ? PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0)
                            : PQexec(conn, sql);
    int rc = 0;
    if (!pgconn_result_ok(res)) {
        char line[512];
        pgconn_error_line(res, line, sizeof(line));
        rc = set_err(err, errlen, "%s", line);
    }
    PQclear(res);
    return rc;
}

int schema_migrate(PGconn *conn, const char *table, int *applied, char *err, size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    struct strbuf sql;
    strbuf_init(&sql);
    int rc = -1;
    *applied = 0;

    if (exec_ok(conn, "BEGIN", 0, NULL, err, errlen) != 0)
        goto out;
    if (exec_ok(conn, "SET LOCAL lock_timeout = '30s'; SET LOCAL client_min_messages = warning", 0, NULL, err, errlen) != 0)
        goto rollback;
    strbuf_printf(&sql, "SELECT pg_advisory_xact_lock(%lld)", MIGRATE_LOCK_KEY);
    if (exec_ok(conn, sql.buf, 0, NULL, err, errlen) != 0)
        goto rollback;
    strbuf_reset(&sql);
    strbuf_printf(&sql,
                  "CREATE SCHEMA IF NOT EXISTS %s; "
                  "CREATE TABLE IF NOT EXISTS %s.outbox_relay_schema ("
                  " table_name text NOT NULL, version int NOT NULL,"
                  " applied_at timestamptz NOT NULL DEFAULT now(),"
                  " PRIMARY KEY (table_name, version))",
                  schema_q, schema_q);
    if (exec_ok(conn, sql.buf, 0, NULL, err, errlen) != 0)
        goto rollback;

    for (int i = 0; i < schema_file_count; i++) {
        const struct schema_file *f = &schema_files[i];
        char version[16];
        snprintf(version, sizeof(version), "%d", f->version);
        const char *params[2] = {table, version};
        strbuf_reset(&sql);
        strbuf_printf(&sql, "SELECT 1 FROM %s.outbox_relay_schema WHERE " SAME_TABLE
                      " AND version = $2::int",
                      schema_q);
        PGresult *res = PQexecParams(conn, sql.buf, 2, NULL, params, NULL, NULL, 0);
        int done = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
        int failed = PQresultStatus(res) != PGRES_TUPLES_OK;
        if (failed) {
            char line[512];
            pgconn_error_line(res, line, sizeof(line));
            set_err(err, errlen, "%s", line);
        }
        PQclear(res);
        if (failed)
            goto rollback;
        if (done)
            continue;
        char *body = expand(f->sql, schema_q, table_q, name);
        char detail[512];
        int step = exec_ok(conn, body, 0, NULL, detail, sizeof(detail));
        free(body);
        if (step != 0) {
            set_err(err, errlen, "migration %s on %s failed: %s", f->name, table, detail);
            goto rollback;
        }
        strbuf_reset(&sql);
        strbuf_printf(&sql, "INSERT INTO %s.outbox_relay_schema (table_name, version) VALUES ($1, $2::int)",
                      schema_q);
        if (exec_ok(conn, sql.buf, 2, params, err, errlen) != 0)
            goto rollback;
        log_info("migrate: applied %s to %s", f->name, table);
        (*applied)++;
    }
    if (exec_ok(conn, "COMMIT", 0, NULL, err, errlen) != 0)
        goto out;
    rc = 0;
    goto out;
rollback:
    PQclear(PQexec(conn, "ROLLBACK"));
    *applied = 0;
out:
    strbuf_destroy(&sql);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}
