/* `outbox-relay migrate --partition IDS` (keep mode, stage 2): the outbox becomes a table
 * partitioned by id range, IDS ids per partition, so that retention drops whole partitions
 * (schema 9's <table>_partitions, called by the relay) instead of deleting rows.
 *
 * A table cannot become partitioned in place. The table as it is becomes the first partition,
 * from MINVALUE to a bound B at least IDS ids above the identity's last value (so writers
 * go on inserting into it while the step runs), under a new partitioned parent of the same
 * name, with two partitions of IDS ids above B. What would make the switch slow under its
 * lock is done before it, while writers go on: a CHECK (id < B), added NOT VALID and then
 * validated (SHARE UPDATE EXCLUSIVE), lets ATTACH skip its scan; a plain index on event_id,
 * built CONCURRENTLY, is the one the parent's index adopts (the parent cannot have a unique
 * index on event_id: a unique index must include the partition key).
 * The switch is one transaction holding the table in ACCESS EXCLUSIVE mode (writers wait
 * while it runs; it waits at most 1 s for the lock, then rolls back and tries again, 30
 * times): rename, the parent with the same columns, defaults, constraints, identity (a new
 * sequence, set to the old one's last value, with its grants; the old one goes), indexes,
 * grants, the doorbell trigger, the <table>_kept view, and the writers' function, which
 * keeps event_id idempotent without the unique index (below). Nothing is copied row by row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "pg/pgutil.h"
#include "core/util.h"
#include "admin/admin.h"
#include "relay/schema.h"

#define SWITCH_ATTEMPTS 30

/* The writers' function on a partitioned outbox. Without a unique index on event_id, a
 * caller-supplied event_id is serialised by a transaction advisory lock on its hash: a
 * second caller with the same event_id waits for the first one's transaction, then (a new
 * statement, a new snapshot under READ COMMITTED) finds its row and returns its id. Under
 * SERIALIZABLE, two callers that cannot see each other conflict on the index read and one
 * fails with 40001; under REPEATABLE READ a duplicate committed after the caller's snapshot
 * is not seen (the README says so). A call without an event_id takes no lock. */
static const char enqueue_sql[] =
    "CREATE OR REPLACE FUNCTION @SCHEMA@.\"@NAME@_enqueue\"(\n"
    "    aggregate_type text, aggregate_id text, event_type text, payload @PAYLOAD_TYPE@,\n"
    "    headers jsonb DEFAULT NULL, event_id uuid DEFAULT NULL, topic text DEFAULT NULL,\n"
    "    traceparent text DEFAULT NULL, tracestate text DEFAULT NULL\n"
    ") RETURNS bigint\n"
    "LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$\n"
    "#variable_conflict use_column\n"
    "DECLARE\n"
    "    h   jsonb := \"@NAME@_enqueue\".headers;\n"
    "    eid uuid  := \"@NAME@_enqueue\".event_id;\n"
    "    new_id bigint;\n"
    "BEGIN\n"
    "    IF \"@NAME@_enqueue\".traceparent IS NOT NULL THEN\n"
    "        h := coalesce(h, '{}'::jsonb) || jsonb_build_object('traceparent', \"@NAME@_enqueue\".traceparent);\n"
    "    END IF;\n"
    "    IF \"@NAME@_enqueue\".tracestate IS NOT NULL THEN\n"
    "        h := coalesce(h, '{}'::jsonb) || jsonb_build_object('tracestate', \"@NAME@_enqueue\".tracestate);\n"
    "    END IF;\n"
    "    IF eid IS NULL THEN\n"
    "        eid := gen_random_uuid();\n"
    "    ELSE\n"
    "        PERFORM pg_advisory_xact_lock(hashtext('@SCHEMA@.@NAME@ event_id'), hashtext(eid::text));\n"
    "        SELECT o.id INTO new_id FROM @TABLE@ o WHERE o.event_id = eid;\n"
    "        IF new_id IS NOT NULL THEN\n"
    "            RETURN new_id;\n"
    "        END IF;\n"
    "    END IF;\n"
    "    INSERT INTO @TABLE@ AS o (event_id, aggregate_type, aggregate_id, event_type, topic, payload, headers)\n"
    "    VALUES (eid, \"@NAME@_enqueue\".aggregate_type, \"@NAME@_enqueue\".aggregate_id,\n"
    "            \"@NAME@_enqueue\".event_type, \"@NAME@_enqueue\".topic, \"@NAME@_enqueue\".payload, h)\n"
    "    RETURNING o.id INTO new_id;\n"
    "    RETURN new_id;\n"
    "END\n"
    "$$";

/* Runs sql; 0, or -1 with err (and the SQLSTATE in state, when there is one). */
static int run(PGconn *conn, const char *sql, char state[6], char *err, size_t errlen)
{
    PGresult *res = PQexec(conn, sql);
    if (state)
        state[0] = 0;
    if (pgconn_result_ok(res)) {
        PQclear(res);
        return 0;
    }
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state && s)
        snprintf(state, 6, "%s", s);
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    set_err(err, errlen, "%s", line);
    PQclear(res);
    return -1;
}

/* The first value of a one-row query, copied (NULL on error, err set); "" for SQL NULL. */
static char *value(PGconn *conn, const char *sql, char *err, size_t errlen)
{
    PGresult *res = pgconn_exec(conn, sql, 0, NULL, err, errlen);
    if (!res)
        return NULL;
    char *v = xstrdup(PQntuples(res) ? PQgetvalue(res, 0, 0) : "");
    PQclear(res);
    return v;
}

/* The table's relkind and the identity's last value, as "r 1234" (NULL on error, err set). */
static char *table_state(PGconn *conn, const char *table_q, char *err, size_t errlen)
{
    char *q = xasprintf("SELECT c.relkind::text || ' ' || coalesce(pg_catalog.pg_sequence_last_value("
                        "pg_catalog.pg_get_serial_sequence('%s', 'id')::regclass), 0)"
                        " FROM pg_catalog.pg_class c WHERE c.oid = '%s'::regclass",
                        table_q, table_q);
    char *v = value(conn, q, err, errlen);
    free(q);
    return v;
}

/* A DO block granting on `to` what the ACL of `from` grants (kind: TABLE or SEQUENCE; from
 * and to: SQL expressions of the relations' names). */
static void copy_grants(struct strbuf *sb, const char *kind, const char *from, const char *to)
{
    strbuf_printf(sb, "DO $g$ DECLARE a record; BEGIN"
                      " FOR a IN SELECT x.privilege_type, x.grantee, x.is_grantable"
                      "  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x"
                      "  WHERE c.oid = (%s)::regclass LOOP"
                      "  EXECUTE pg_catalog.format('GRANT %%s ON %s %%s TO %%s%%s', a.privilege_type, %s,"
                      "   CASE WHEN a.grantee = 0 THEN 'PUBLIC'"
                      "    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END,"
                      "   CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);"
                      " END LOOP; END $g$;\n",
                  from, kind, to);
}

/* Before the switch, with writers going on: the CHECK (id < bound) and the event_id index. */
static int prepare(PGconn *conn, const char *schema_q, const char *table_q, const char *name, long long bound,
                   char *err, size_t errlen)
{
    /* added NOT VALID (a moment of ACCESS EXCLUSIVE, waited for at most 1 s at a time), then
     * validated by a scan under SHARE UPDATE EXCLUSIVE, which writers do not wait for: three
     * statements, three transactions */
    char *q = xasprintf("ALTER TABLE %s DROP CONSTRAINT IF EXISTS \"%s_ids_below\","
                        " ADD CONSTRAINT \"%s_ids_below\" CHECK (id < %lld) NOT VALID",
                        table_q, name, name, bound);
    int rc = -1;
    for (int attempt = 1; attempt <= SWITCH_ATTEMPTS && rc != 0; attempt++) {
        char state[6];
        if (run(conn, "SET lock_timeout = '1s'", NULL, err, errlen) != 0)
            break;
        rc = run(conn, q, state, err, errlen);
        if (rc != 0 && strcmp(state, "55P03") != 0)
            break;
        if (rc != 0) {
            log_warn("migrate --partition: the outbox was busy (attempt %d of %d: %s); trying again", attempt,
                     SWITCH_ATTEMPTS, err);
            sleep(1);
        }
    }
    free(q);
    if (rc != 0 || run(conn, "RESET lock_timeout", NULL, err, errlen) != 0)
        return -1;
    q = xasprintf("ALTER TABLE %s VALIDATE CONSTRAINT \"%s_ids_below\"", table_q, name);
    rc = run(conn, q, NULL, err, errlen);
    free(q);
    if (rc != 0)
        return -1;
    /* an invalid leftover of an interrupted build is dropped and built again */
    q = xasprintf("SELECT i.indisvalid FROM pg_catalog.pg_index i WHERE i.indexrelid ="
                  " pg_catalog.to_regclass('%s.\"%s_event_id_idx\"')", schema_q, name);
    char *valid = value(conn, q, err, errlen);
    free(q);
    if (!valid)
        return -1;
    if (strcmp(valid, "f") == 0) {
        q = xasprintf("DROP INDEX CONCURRENTLY %s.\"%s_event_id_idx\"", schema_q, name);
        rc = run(conn, q, NULL, err, errlen);
        free(q);
    }
    if (rc == 0 && strcmp(valid, "t") != 0) {
        q = xasprintf("CREATE INDEX CONCURRENTLY \"%s_event_id_idx\" ON %s (event_id)", name, table_q);
        rc = run(conn, q, NULL, err, errlen);
        free(q);
    }
    free(valid);
    return rc;
}

/* The switch-over's script, run in the step's transaction: the plain table renamed to the
 * first partition (and its indexes), a partitioned parent like it with the identity going on
 * from the old one's last value (grants copied, owners kept), two partitions ahead from bound,
 * and what hangs on the parent made again (the doorbell's trigger, the kept view, the enqueue
 * function); first: the first partition's qualified name; old_seq: the old identity's. */
static void switch_script(struct strbuf *sb, const char *schema_q, const char *table_q, const char *name,
                          const char *first, const char *old_seq, const char *trigger, const char *view,
                          const char *enqueue, long long width, long long bound)
{
    strbuf_printf(sb, "ALTER TABLE %s RENAME TO \"%s_p0\";\n", table_q, name);
    static const char *const idx[] = {"pkey", "pending_idx", "failed_idx", "event_id_idx"};
    for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++)
        strbuf_printf(sb, "ALTER INDEX %s.\"%s_%s\" RENAME TO \"%s_p0_%s\";\n", schema_q, name, idx[i], name, idx[i]);
    strbuf_printf(sb,
                  "CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS"
                  " INCLUDING IDENTITY INCLUDING STORAGE) PARTITION BY RANGE (id);\n"
                  "ALTER TABLE %s DROP CONSTRAINT \"%s_ids_below\";\n"
                  "ALTER TABLE %s ADD CONSTRAINT \"%s_pkey\" PRIMARY KEY (id);\n"
                  "CREATE INDEX \"%s_pending_idx\" ON %s (lease_partition, id) WHERE status = 'PENDING';\n"
                  "CREATE INDEX \"%s_failed_idx\" ON %s (aggregate_id) WHERE status = 'FAILED';\n"
                  "CREATE INDEX \"%s_event_id_idx\" ON %s (event_id);\n",
                  table_q, first, table_q, name, table_q, name, name, table_q, name, table_q, name, table_q);
    /* the identity goes on from the old one's last value, with its grants; the old one goes */
    char seq_expr[400], old_expr[400], table_expr[400], first_expr[400];
    snprintf(seq_expr, sizeof(seq_expr), "pg_catalog.pg_get_serial_sequence('%s', 'id')", table_q);
    snprintf(old_expr, sizeof(old_expr), "'%s'", old_seq);
    snprintf(table_expr, sizeof(table_expr), "'%s'", table_q);
    snprintf(first_expr, sizeof(first_expr), "'%s'", first);
    strbuf_printf(sb, "SELECT setval(%s::regclass, coalesce(pg_sequence_last_value('%s'::regclass), 1),"
                       " pg_sequence_last_value('%s'::regclass) IS NOT NULL);\n",
                  seq_expr, old_seq, old_seq);
    copy_grants(sb, "SEQUENCE", old_expr, seq_expr);
    copy_grants(sb, "TABLE", first_expr, table_expr);
    strbuf_printf(sb, "ALTER TABLE %s ALTER COLUMN id DROP IDENTITY;\n"
                       "DO $r$ BEGIN EXECUTE format('ALTER SEQUENCE %%s RENAME TO %%I', %s, '%s_id_seq'); END $r$;\n"
                       "ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (MINVALUE) TO (%lld);\n"
                       "ALTER TABLE %s DROP CONSTRAINT \"%s_ids_below\";\n",
                  first, seq_expr, name, table_q, first, bound, first, name);
    for (int i = 0; i < 2; i++)
        strbuf_printf(sb, "CREATE TABLE %s.\"%s_p%lld\" PARTITION OF %s FOR VALUES FROM (%lld) TO (%lld)"
                           " WITH (fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0,"
                           " autovacuum_vacuum_insert_threshold = 20000, autovacuum_analyze_scale_factor = 0.02,"
                           " autovacuum_vacuum_cost_delay = 0);\n",
                      schema_q, name, bound + i * width, table_q, bound + i * width, bound + (i + 1) * width);
    /* owned by the table's owner, whoever runs the step (a superuser, say) */
    strbuf_printf(sb, "DO $o$ DECLARE o text := (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = '%s'::regclass);"
                       " BEGIN EXECUTE format('ALTER TABLE %%s OWNER TO %%I', '%s', o);", first, table_q);
    for (int i = 0; i < 2; i++)
        strbuf_printf(sb, " EXECUTE format('ALTER TABLE %%s OWNER TO %%I', '%s.\"%s_p%lld\"', o);", schema_q, name,
                      bound + i * width);
    strbuf_puts(sb, " END $o$;\n");
    if (trigger[0])
        strbuf_printf(sb, "DROP TRIGGER \"%s_doorbell\" ON %s;\n%s;\n", name, first, trigger);
    if (view[0])
        strbuf_printf(sb, "CREATE OR REPLACE VIEW %s.\"%s_kept\" AS %s\n", schema_q, name, view);
    strbuf_printf(sb, "%s;\n", enqueue);
    /* the partitions' ranges recorded (what tells a partition dropped by hand later) */
    strbuf_printf(sb, "SELECT count(*) FROM %s.\"%s_partitions\"(NULL);\n", schema_q, name);
}

/* The switch, in the open transaction: 0, 1 when another migrate partitioned the table
 * meanwhile, -1 with err (state: its SQLSTATE). */
static int switch_over(PGconn *conn, const struct config *cfg, const char *schema_q, const char *table_q,
                       const char *name, long long width, long long bound, char state[6], char *err, size_t errlen)
{
    char first[300];
    snprintf(first, sizeof(first), "%s.\"%s_p0\"", schema_q, name);
    char *kind = NULL, *trigger = NULL, *view = NULL, *old_seq = NULL, *enqueue = NULL, *q = NULL;
    struct strbuf sb;
    strbuf_init(&sb);
    int rc = -1;
    q = xasprintf("SET LOCAL lock_timeout = '1s'; LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", table_q);
    if (run(conn, q, state, err, errlen) != 0)
        goto out;
    if (!(kind = table_state(conn, table_q, err, errlen)))
        goto out;
    if (kind[0] == 'p') { /* another migrate --partition did it meanwhile */
        rc = 1;
        goto out;
    }
    if (kind[0] != 'r') {
        set_err(err, errlen, "%s is not a plain table (relkind %c): nothing to partition", table_q, kind[0]);
        goto out;
    }
    if (atoll(kind + 2) >= bound - 1) {
        set_err(err, errlen, "the identity of %s reached %lld while the step prepared: run it again", table_q,
                bound - 1);
        goto out;
    }
    /* what is made again on the parent, written out with every name qualified */
    if (run(conn, "SET LOCAL search_path = pg_catalog, pg_temp", state, err, errlen) != 0)
        goto out;
    free(q);
    q = xasprintf("SELECT coalesce((SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE t.tgrelid ="
                  " '%s'::regclass AND t.tgname = '%s_doorbell'), '')", table_q, name);
    if (!(trigger = value(conn, q, err, errlen)))
        goto out;
    free(q);
    q = xasprintf("SELECT coalesce(pg_get_viewdef(to_regclass('%s.\"%s_kept\"')), '')", schema_q, name);
    if (!(view = value(conn, q, err, errlen)))
        goto out;
    free(q);
    q = xasprintf("SELECT pg_get_serial_sequence('%s', 'id')", table_q);
    if (!(old_seq = value(conn, q, err, errlen)))
        goto out;
    if (!old_seq[0]) {
        set_err(err, errlen, "%s.id is not an identity column: nothing to partition by", table_q);
        goto out;
    }
    char payload_type[64];
    if (schema_payload_type(conn, cfg->table, payload_type, sizeof(payload_type), err, errlen) != 0)
        goto out;
    enqueue = schema_expand(enqueue_sql, cfg->table, payload_type);
    switch_script(&sb, schema_q, table_q, name, first, old_seq, trigger, view, enqueue, width, bound);
    rc = run(conn, sb.buf, state, err, errlen);
out:
    strbuf_destroy(&sb);
    free(q);
    free(kind);
    free(trigger);
    free(view);
    free(old_seq);
    free(enqueue);
    return rc;
}

int keep_partition(PGconn *conn, const struct config *cfg, long long width, char *err, size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    int rc = -1;
    char *q = NULL, *kind = NULL;
    /* one at a time (sidecars running it together): the preparation changes the plain table */
    if (schema_lock(conn, err, errlen) != 0) {
        free(schema_q);
        free(table_q);
        free(name);
        return -1;
    }
    kind = table_state(conn, table_q, err, errlen);
    if (!kind)
        goto out;
    if (kind[0] == 'p') {
        log_info("migrate: %s is partitioned by id already; making sure partitions of %lld ids are ready ahead",
                 table_q, width);
        q = xasprintf("SELECT created, ahead_now FROM %s.\"%s_partitions\"(NULL, 2, %lld)", schema_q, name, width);
        char *v = value(conn, q, err, errlen);
        rc = v ? 0 : -1;
        free(v);
        goto out;
    }
    long long last = atoll(kind + 2), bound = (last / width + 2) * width;
    log_info("migrate: partitioning %s by id: the table as it is becomes %s.\"%s_p0\" (ids below %lld), "
             "then partitions of %lld ids", table_q, schema_q, name, bound, width);
    if (prepare(conn, schema_q, table_q, name, bound, err, errlen) != 0)
        goto out;
    for (int attempt = 1; attempt <= SWITCH_ATTEMPTS; attempt++) {
        char state[6];
        if (run(conn, "BEGIN", NULL, err, errlen) != 0)
            goto out;
        int done = switch_over(conn, cfg, schema_q, table_q, name, width, bound, state, err, errlen);
        if (done == 1) {
            run(conn, "ROLLBACK", NULL, err, errlen);
            log_info("migrate: %s was partitioned by another migrate meanwhile", table_q);
            rc = 0;
            goto out;
        }
        if (done == 0) {
            if (run(conn, "COMMIT", NULL, err, errlen) != 0)
                goto out;
            log_info("migrate: %s is partitioned by id (%s.\"%s_p0\" below %lld, then %lld ids per partition); "
                     "retention drops whole partitions", table_q, schema_q, name, bound, width);
            rc = 0;
            goto out;
        }
        char why[1024];
        snprintf(why, sizeof(why), "%s", err);
        run(conn, "ROLLBACK", NULL, err, errlen);
        snprintf(err, errlen, "--partition: %s", why);
        if (strcmp(state, "55P03") != 0)
            goto out;
        log_warn("migrate --partition: the outbox was busy (attempt %d of %d: %s); trying again", attempt,
                 SWITCH_ATTEMPTS, why);
        sleep(1);
    }
out:
    schema_unlock(conn);
    free(q);
    free(kind);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}
