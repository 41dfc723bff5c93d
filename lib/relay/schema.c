/* Schema migrations: placeholder expansion, migrate under an advisory lock, version check. */
#include "relay/schema.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "relay/outbox.h"
#include "pg/pgconn.h"
#include "core/util.h"

/* A row of outbox_relay_schema that is about table $1 (given with its schema). */
#define SAME_TABLE "(table_name = $1 OR 'public.' || table_name = $1)"

/* Advisory lock key shared by every migrating relay ("outbox" in ASCII). */
#define MIGRATE_LOCK_KEY 0x6f7574626f78LL

int schema_version(void)
{
    return schema_layout_version(0);
}

int schema_layout_version(int debezium)
{
    int v = 0;
    for (int i = 0; i < schema_file_count; i++)
        if (schema_files[i].layouts & (debezium ? SCHEMA_DEBEZIUM : SCHEMA_NATIVE) && schema_files[i].version > v)
            v = schema_files[i].version;
    return v;
}

char *schema_read_relation(const char *table, int debezium, int keep)
{
    if (!keep)
        return schema_rows_relation(table, debezium);
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    char *v = xasprintf("%s.\"%s_kept\"", schema_q, name);
    free(schema_q);
    free(table_q);
    free(name);
    return v;
}

char *schema_rows_relation(const char *table, int debezium)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    if (!debezium) {
        free(schema_q);
        free(name);
        return table_q;
    }
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "%s.\"%s_relay_rows\"", schema_q, name);
    free(schema_q);
    free(table_q);
    free(name);
    return sb.buf;
}

/* The names a migration's placeholders stand for. */
struct placeholders {
    const char *schema_q, *table_q, *name, *payload_type;
};

static char *expand(const char *sql, const struct placeholders *n)
{
    struct strbuf sb;
    strbuf_init(&sb);
    for (const char *p = sql; *p;) {
        if (strncmp(p, "@SCHEMA@", 8) == 0) {
            strbuf_puts(&sb, n->schema_q);
            p += 8;
        } else if (strncmp(p, "@TABLE@", 7) == 0) {
            strbuf_puts(&sb, n->table_q);
            p += 7;
        } else if (strncmp(p, "@NAME@", 6) == 0) {
            strbuf_puts(&sb, n->name);
            p += 6;
        } else if (strncmp(p, "@PAYLOAD_TYPE@", 14) == 0) {
            strbuf_puts(&sb, n->payload_type);
            p += 14;
        } else {
            strbuf_append(&sb, p, 1);
            p++;
        }
    }
    return sb.buf;
}

char *schema_expand(const char *sql, const char *table, const char *payload_type)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    const struct placeholders names = {schema_q, table_q, name, payload_type};
    char *out = expand(sql, &names);
    free(schema_q);
    free(table_q);
    free(name);
    return out;
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

enum schema_check schema_check_result(const PGresult *res, const char *table, int debezium, int *have_out,
                                      char *err, size_t errlen)
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
    *have_out = have;
    if (PQntuples(res) == 1 && PQnfields(res) > 1 && strcmp(PQgetvalue(res, 0, 1), "t") == 0) {
        set_err(err, errlen, "row-level security is enabled on %s and this relay's role does not "
                "bypass it: the relay would see only some rows. Give the role BYPASSRLS (or make "
                "it the table's owner), or disable row-level security on the outbox table", table);
        return SCHEMA_UNUSABLE;
    }
    /* the version the table's own layout reaches (a table in the other layout is refused
     * by the layout check, with a message that says so) */
    if (PQnfields(res) > START_CHECK_DEBEZIUM_LAYOUT && !PQgetisnull(res, 0, START_CHECK_DEBEZIUM_LAYOUT))
        debezium = strcmp(PQgetvalue(res, 0, START_CHECK_DEBEZIUM_LAYOUT), "t") == 0;
    int n = schema_layout_version(debezium);
    if (have == n || (have == n - 1 && have >= 1))
        return SCHEMA_OK;
    set_err(err, errlen, "table %s is at schema version %d but this relay runs on versions %d "
            "and %d; run `outbox-relay migrate` with this relay's version%s", table, have,
            n > 1 ? n - 1 : n, n,
            have > n ? " (or upgrade the relay: the schema is newer)" : "");
    return SCHEMA_UNUSABLE;
}

static int exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params,
                   char *err, size_t errlen)
{
    PGresult *res = pgconn_exec(conn, sql, nparams, params, err, errlen);
    PQclear(res);
    return res ? 0 : -1;
}

/* A migration's text is split into sections at lines "-- @outside-transaction": the first
 * runs in a transaction (with the version record when it is the only one); each later
 * section is one statement run alone, outside any transaction (CREATE INDEX CONCURRENTLY,
 * VALIDATE CONSTRAINT without holding the ADD's lock). A migration with such sections is
 * recorded once they all succeeded, so all of its sections must be safe to run again. */
#define OUTSIDE_MARK "-- @outside-transaction"

/* An index build CONCURRENTLY that was interrupted (migrate killed, a lock or statement
 * timeout, a lost connection) leaves the index INVALID: never used by the planner, yet
 * found by the step's IF NOT EXISTS when migrate is run again. So before a step that builds
 * indexes concurrently, this table's invalid indexes that the step names are dropped (also
 * concurrently). Others' indexes are left alone; a migration's own builds are serialised by
 * migrate's lock, so an invalid one it names is a leftover. */
static int drop_invalid_indexes(PGconn *conn, const struct placeholders *n, const char *step,
                                char *err, size_t errlen)
{
    if (!strstr(step, "CONCURRENTLY"))
        return 0;
    const char *params[1] = {n->table_q};
    PGresult *res = pgconn_exec(conn, "SELECT c.relname FROM pg_catalog.pg_index i"
                                      " JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid"
                                      " WHERE i.indrelid = pg_catalog.to_regclass($1) AND NOT i.indisvalid",
                                1, params, err, errlen);
    if (!res)
        return -1;
    int rc = 0;
    for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
        struct strbuf quoted, drop;
        strbuf_init(&quoted);
        strbuf_init(&drop);
        strbuf_printf(&quoted, "\"%s\"", PQgetvalue(res, i, 0));
        if (strstr(step, quoted.buf)) {
            log_info("migrate: dropping the invalid index %s.%s, left by an interrupted build; "
                     "it is built again", n->schema_q, quoted.buf);
            strbuf_printf(&drop, "DROP INDEX CONCURRENTLY IF EXISTS %s.%s", n->schema_q, quoted.buf);
            rc = exec_ok(conn, drop.buf, 0, NULL, err, errlen);
        }
        strbuf_destroy(&quoted);
        strbuf_destroy(&drop);
    }
    PQclear(res);
    return rc;
}

static int apply_migration(PGconn *conn, const struct schema_file *f, const char *table,
                           const struct placeholders *n, char *err, size_t errlen)
{
    const char *schema_q = n->schema_q;
    char *body = expand(f->sql, n);
    char version[16], detail[512];
    snprintf(version, sizeof(version), "%d", f->version);
    const char *params[2] = {table, version};
    struct strbuf record;
    strbuf_init(&record);
    strbuf_printf(&record, "INSERT INTO %s.outbox_relay_schema (table_name, version) VALUES ($1, $2::int)",
                  schema_q);
    char *outside = strstr(body, OUTSIDE_MARK);
    if (outside)
        *outside = '\0'; /* body is now the transactional section */
    int rc = -1;
    if (exec_ok(conn, "BEGIN", 0, NULL, err, errlen) != 0)
        goto out;
    if (exec_ok(conn, body, 0, NULL, detail, sizeof(detail)) != 0 ||
        (!outside && exec_ok(conn, record.buf, 2, params, detail, sizeof(detail)) != 0) ||
        exec_ok(conn, "COMMIT", 0, NULL, detail, sizeof(detail)) != 0) {
        PQclear(PQexec(conn, "ROLLBACK"));
        set_err(err, errlen, "migration %s on %s failed: %s", f->name, table, detail);
        goto out;
    }
    for (char *sect = outside; sect;) {
        sect += strlen(OUTSIDE_MARK);
        char *next = strstr(sect, OUTSIDE_MARK);
        if (next)
            *next = '\0';
        if (drop_invalid_indexes(conn, n, sect, detail, sizeof(detail)) != 0 ||
            exec_ok(conn, sect, 0, NULL, detail, sizeof(detail)) != 0) {
            set_err(err, errlen, "migration %s on %s failed in a step outside its transaction "
                    "(run migrate again: every step of it is safe to repeat): %s", f->name, table,
                    detail);
            goto out;
        }
        sect = next;
    }
    if (outside && exec_ok(conn, record.buf, 2, params, detail, sizeof(detail)) != 0) {
        set_err(err, errlen, "migration %s on %s: recording it failed: %s", f->name, table, detail);
        goto out;
    }
    rc = 0;
out:
    strbuf_destroy(&record);
    free(body);
    return rc;
}

int schema_payload_type(PGconn *conn, const char *table, char *out, size_t outlen, char *err,
                        size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    const char *params[1] = {table_q};
    PGresult *res = pgconn_exec(conn, "SELECT format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute"
                                      " WHERE attrelid = pg_catalog.to_regclass($1) AND attname = 'payload'"
                                      " AND NOT attisdropped", 1, params, err, errlen);
    free(schema_q);
    free(table_q);
    free(name);
    if (!res)
        return -1;
    snprintf(out, outlen, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return 0;
}

/* The payload column's type for the migrations: the table's when it exists (a different
 * OUTBOX_PAYLOAD_TYPE is refused: migrate never changes a column writers use), else the
 * setting (empty: jsonb). */
static int migrate_payload_type(PGconn *conn, const char *table, const char *wanted, char *out,
                                size_t outlen, char *err, size_t errlen)
{
    if (schema_payload_type(conn, table, out, outlen, err, errlen) != 0)
        return -1;
    if (!out[0])
        snprintf(out, outlen, "%s", wanted && wanted[0] ? wanted : "jsonb");
    else if (wanted && wanted[0] && strcmp(wanted, out) != 0)
        return set_err(err, errlen, "OUTBOX_PAYLOAD_TYPE=%s, but the payload column of %s is "
                       "already %s: the setting only chooses the type of a new table (the relay "
                       "reads the type the table has); unset it, or convert the column yourself",
                       wanted, table, out);
    return 0;
}

/* The bookkeeping table (schema.outbox_relay_schema): made when missing, never adopted
 * from another role (it decides what migrate runs). */
static int bookkeeping(PGconn *conn, const char *schema_q, char *err, size_t errlen)
{
    struct strbuf sql;
    strbuf_init(&sql);
    strbuf_printf(&sql,
                  "CREATE SCHEMA IF NOT EXISTS %s; "
                  "CREATE TABLE IF NOT EXISTS %s.outbox_relay_schema ("
                  " table_name text NOT NULL, version int NOT NULL,"
                  " applied_at timestamptz NOT NULL DEFAULT now(),"
                  " PRIMARY KEY (table_name, version))",
                  schema_q, schema_q);
    if (exec_ok(conn, sql.buf, 0, NULL, err, errlen) != 0) {
        strbuf_destroy(&sql);
        return -1;
    }
    /* Never adopt a bookkeeping table someone else made (it decides what migrate runs). */
    strbuf_reset(&sql);
    strbuf_printf(&sql, "SELECT pg_has_role(c.relowner, 'MEMBER') FROM pg_class c"
                        " WHERE c.oid = '%s.outbox_relay_schema'::regclass", schema_q);
    PGresult *own = PQexec(conn, sql.buf);
    int mine = pgconn_result_ok(own) && PQntuples(own) == 1 && PQgetvalue(own, 0, 0)[0] == 't';
    PQclear(own);
    strbuf_destroy(&sql);
    if (!mine)
        return set_err(err, errlen, "%s.outbox_relay_schema exists and is owned by another role; "
                       "migrate as its owner (or drop it if it is not the relay's)", schema_q);
    return 0;
}

/* A table in the other layout is refused before anything runs: the Debezium layout's
 * table has relay_seq, the native one event_id. */
static int check_layout(PGconn *conn, const char *table, const char *table_q, int debezium, char *err,
                        size_t errlen)
{
    const char *tparam[1] = {table_q};
    PGresult *lay = pgconn_exec(conn, "SELECT bool_or(attname = 'relay_seq'), bool_or(attname = 'event_id')"
                                      " FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass($1)"
                                      " AND NOT attisdropped", 1, tparam, err, errlen);
    if (!lay)
        return -1;
    int has_seq = PQgetvalue(lay, 0, 0)[0] == 't', has_event_id = PQgetvalue(lay, 0, 1)[0] == 't';
    PQclear(lay);
    if (!debezium && has_seq)
        return set_err(err, errlen, "table %s is in the Debezium layout (it has relay_seq): set "
                       "OUTBOX_LAYOUT=debezium", table);
    if (debezium && has_event_id && !has_seq)
        return set_err(err, errlen, "table %s is in the native layout (it has event_id): unset "
                       "OUTBOX_LAYOUT or set it to native", table);
    return 0;
}

/* migrate's lock, waited for without a statement running: a session waiting in
 * pg_advisory_lock holds a snapshot, and a step that builds an index CONCURRENTLY waits for
 * every older snapshot, so migrates queued behind one building an index deadlocked with it
 * (five at once in debezium_operate). At most MIGRATE_LOCK_WAIT_MS, as lock_timeout was. */
#define MIGRATE_LOCK_WAIT_MS 30000
static int migrate_lock(PGconn *conn, char *err, size_t errlen)
{
    char q[80];
    snprintf(q, sizeof(q), "SELECT pg_try_advisory_lock(%lld)", MIGRATE_LOCK_KEY);
    for (int waited = 0;; waited += 100) {
        PGresult *res = pgconn_exec(conn, q, 0, NULL, err, errlen);
        if (!res)
            return -1;
        int got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (got)
            return 0;
        if (waited >= MIGRATE_LOCK_WAIT_MS) {
            set_err(err, errlen, "another migrate has held migrate's lock on this database for %d s "
                    "(a long step, or a migrate stopped without ending its session); run migrate "
                    "again once it is done", MIGRATE_LOCK_WAIT_MS / 1000);
            return -1;
        }
        if (waited == 0)
            log_info("migrate: another migrate is running on this database; waiting for it");
        usleep(100 * 1000);
    }
}

int schema_lock(PGconn *conn, char *err, size_t errlen)
{
    return migrate_lock(conn, err, errlen);
}

void schema_unlock(PGconn *conn)
{
    char q[80];
    snprintf(q, sizeof(q), "SELECT pg_advisory_unlock(%lld)", MIGRATE_LOCK_KEY);
    PQclear(PQexec(conn, q));
}

int schema_migrate(PGconn *conn, const char *table, const char *payload_type, int debezium,
                   int *applied, char *err, size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(table, &schema_q, &table_q, &name);
    struct strbuf sql;
    strbuf_init(&sql);
    int rc = -1, locked = 0;
    *applied = 0;

    /* One migrate at a time, through the steps outside transactions too: a session lock. */
    if (exec_ok(conn, "SET lock_timeout = '30s'; SET client_min_messages = warning; "
                "SET search_path = pg_catalog, pg_temp", 0, NULL, err, errlen) != 0)
        goto out;
    if (migrate_lock(conn, err, errlen) != 0)
        goto out;
    locked = 1;
    if (bookkeeping(conn, schema_q, err, errlen) != 0)
        goto out;

    char ptype[128];
    if (migrate_payload_type(conn, table, payload_type, ptype, sizeof(ptype), err, errlen) != 0)
        goto out;
    const struct placeholders names = {schema_q, table_q, name, ptype};

    if (check_layout(conn, table, table_q, debezium, err, errlen) != 0)
        goto out;

    for (int i = 0; i < schema_file_count; i++) {
        const struct schema_file *f = &schema_files[i];
        if (!(f->layouts & (debezium ? SCHEMA_DEBEZIUM : SCHEMA_NATIVE)))
            continue;
        char version[16];
        snprintf(version, sizeof(version), "%d", f->version);
        const char *params[2] = {table, version};
        strbuf_reset(&sql);
        strbuf_printf(&sql, "SELECT 1 FROM %s.outbox_relay_schema WHERE " SAME_TABLE
                      " AND version = $2::int",
                      schema_q);
        PGresult *res = PQexecParams(conn, sql.buf, 2, NULL, params, NULL, NULL, 0);
        int done = pgconn_result_ok(res) && PQntuples(res) == 1;
        if (!pgconn_result_ok(res)) {
            char line[512];
            pgconn_error_line(res, line, sizeof(line));
            set_err(err, errlen, "%s", line);
            PQclear(res);
            goto out;
        }
        PQclear(res);
        if (done)
            continue;
        if (apply_migration(conn, f, table, &names, err, errlen) != 0)
            goto out;
        log_info("migrate: applied %s to %s", f->name, table);
        (*applied)++;
    }
    rc = 0;
out:
    if (locked) {
        strbuf_reset(&sql);
        strbuf_printf(&sql, "SELECT pg_advisory_unlock(%lld)", MIGRATE_LOCK_KEY);
        PQclear(PQexec(conn, sql.buf));
    }
    strbuf_destroy(&sql);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}
