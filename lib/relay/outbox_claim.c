/* The claim's SQL (outbox.h): the claim statement over the rows relation, and the row's headers
 * as SQL (the Debezium layout's placement columns, encoded by their types). */
#include "relay/outbox.h"

#include <stdlib.h>
#include <string.h>

#include "relay/schema.h"
#include "core/util.h"

/* A placement column's value as the header text Debezium's event router gives it (its
 * PostgreSQL connector's default adaptive temporal encodings; checked side by side in
 * test/integration/debezium.sh): timestamp as epoch microseconds (milliseconds at a
 * precision of 3 or less), timestamptz as ISO-8601 in UTC with the column's digits of a
 * second (a NULL-safe left() of to_char: 19 characters, then '.' and the digits), date as
 * days since the epoch; any other type as its PostgreSQL text. type is format_type's. */
static void header_value_sql(struct strbuf *sb, const char *type, const char *v)
{
    int precision = 6;
    const char *paren = strchr(type, '(');
    if (paren)
        precision = atoi(paren + 1);
    if (strncmp(type, "timestamp", 9) == 0 && strstr(type, "without time zone"))
        strbuf_printf(sb, "(extract(epoch FROM %s) * %s)::int8::text", v,
                      precision <= 3 ? "1000" : "1000000");
    else if (strncmp(type, "timestamp", 9) == 0 && strstr(type, "with time zone"))
        strbuf_printf(sb, "left(to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), %d) || 'Z'",
                      v, 19 + (precision > 0 ? 1 + precision : 0));
    else if (strcmp(type, "date") == 0)
        strbuf_printf(sb, "(%s - date '1970-01-01')::text", v);
    else
        strbuf_printf(sb, "%s::text", v);
}

char *outbox_headers_sql(const struct config *cfg, const char *alias, const char *types)
{
    struct strbuf sb;
    strbuf_init(&sb);
    if (!cfg->debezium || !cfg->additional_placement || !cfg->additional_placement[0]) {
        strbuf_printf(&sb, "%s.headers", alias);
        return sb.buf;
    }
    /* json, not jsonb: the headers keep the placement's order */
    strbuf_puts(&sb, "json_build_object(");
    const char *cursor = cfg->additional_placement, *type = types ? types : "";
    char column[CONFIG_IDENT_MAX], header[CONFIG_IDENT_MAX], err[256];
    for (int i = 0; config_placement_next(&cursor, column, header, err, sizeof(err)) == 1; i++) {
        const char *bar = strchr(type, '|');
        size_t tlen = bar ? (size_t)(bar - type) : strlen(type);
        char t[128];
        snprintf(t, sizeof(t), "%.*s", (int)(tlen < sizeof(t) ? tlen : sizeof(t) - 1), type);
        type = bar ? bar + 1 : type + tlen;
        char v[CONFIG_IDENT_MAX + 64];
        snprintf(v, sizeof(v), "(%s.source_row).\"%s\"", alias, column);
        strbuf_printf(&sb, "%s'%s', ", i ? ", " : "", header);
        header_value_sql(&sb, t, v);
    }
    strbuf_puts(&sb, ")");
    return sb.buf;
}

/* The types (format_type) of the OUTBOX_ADDITIONAL_PLACEMENT columns of table t, in the
 * setting's order, joined by '|' (no type name has one); '' for a missing column. */
char *outbox_placement_types_sql(const struct config *cfg, const char *t)
{
    char *columns = outbox_placement_columns(cfg);
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "(SELECT string_agg(coalesce((SELECT format_type(a.atttypid, a.atttypmod)"
                       " FROM pg_attribute a WHERE a.attrelid = '%s'::regclass AND a.attname = u.c"
                       " AND NOT a.attisdropped), ''), '|' ORDER BY u.n)"
                       " FROM unnest(%s) WITH ORDINALITY AS u(c, n))", t, columns);
    free(columns);
    return sb.buf;
}

char *outbox_placement_types_query(const struct config *cfg)
{
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    char *expr = outbox_placement_types_sql(cfg, table_q);
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb, "SELECT %s", expr);
    free(expr);
    free(schema_q);
    free(table_q);
    free(name);
    return sb.buf;
}

/* The OUTBOX_ADDITIONAL_PLACEMENT columns as a SQL text[] literal (for the start check). */
char *outbox_placement_columns(const struct config *cfg)
{
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "ARRAY[");
    const char *cursor = cfg->additional_placement ? cfg->additional_placement : "";
    char column[CONFIG_IDENT_MAX], header[CONFIG_IDENT_MAX], err[256];
    for (int i = 0; config_placement_next(&cursor, column, header, err, sizeof(err)) == 1; i++)
        strbuf_printf(&sb, "%s'%s'", i ? ", " : "", column);
    strbuf_puts(&sb, "]::text[]");
    return sb.buf;
}

/* The claim over table t. Bytes: each row's payload size (its stored size while small and
 * not compressed, else the length of what is sent: the text of a jsonb, json or text
 * payload, the bytes of a bytea one); the claim stops where the sum passes $6 (the relay's
 * byte budget left; at least one row), and a payload larger than $7 (the producer's
 * message.max.bytes) is never fetched: its row comes back with payload NULL, to be
 * parked. A bytea payload comes as hex, whatever bytea_output says (claim.c decodes it).
 * Sizes, conversions and created_ms are computed after the LIMIT, for the rows kept only
 * (a quarter less claim time than computing them per candidate row). The last column is
 * the doorbell's count of requeues (schema 5; 0 before), read in the claim's snapshot. */
static char *claim_sql(const char *t, const char *doorbell, const char *parked,
                       const char *topic_expr, const char *headers_expr, int bytea, int requeue_count,
                       const struct keep_claim *keep)
{
    struct strbuf count;
    strbuf_init(&count);
    if (requeue_count)
        strbuf_printf(&count, "(SELECT requeued FROM %s)", doorbell);
    else
        strbuf_puts(&count, "0::int8");
    /* the rows every partition may give: not in flight, no parked key's (policy block), no
     * paused topic's, no held key's. The statement is prepared (pgconn_query_prepared) and
     * runs on a generic plan, where "<> ALL($1)" compares each row with every id in flight
     * (a constant array is hashed, a parameter is not: twice the claim's time in a drain);
     * "NOT IN (SELECT unnest($1))" is a hashed subplan, built once per claim. */
    struct strbuf conds, rows;
    strbuf_init(&conds);
    strbuf_printf(&conds,
                  "   AND p.id NOT IN (SELECT unnest($1::int8[]))%s"
                  "   AND (cardinality($3::text[]) = 0 OR %s <> ALL($3::text[]))"
                  "   AND (cardinality($8::text[]) = 0 OR p.aggregate_id NOT IN (SELECT unnest($8::text[])))",
                  parked, topic_expr);
    strbuf_init(&rows);
    if (!keep) {
        strbuf_printf(&rows, " FROM unnest($4::int2[], $9::int8[]) AS lp(part, floor)"
                             " CROSS JOIN LATERAL ("
                             "  SELECT * FROM %s p"
                             "  WHERE p.status = 'PENDING' AND p.lease_partition = lp.part AND p.id > lp.floor"
                             "%s"
                             "  ORDER BY p.id LIMIT $5) o",
                      t, conds.buf);
    } else {
        /* above the start, what is neither published nor parked; at or below it, requeued rows */
        strbuf_printf(&rows, "%s CROSS JOIN LATERAL (SELECT * FROM ("
                             "  (SELECT p.* FROM %s p"
                             "  WHERE p.status = 'PENDING' AND p.lease_partition = lp.part AND p.id > lp.floor%s%s"
                             "  ORDER BY p.id LIMIT $5)"
                             "  UNION ALL (SELECT p.* FROM %s JOIN %s p ON p.id = k.id WHERE lp.noted"
                             "   AND k.lease_partition = lp.part AND NOT k.failed"
                             "   AND p.status = 'PENDING' AND p.lease_partition = lp.part AND p.id <= lp.floor%s"
                             "   ORDER BY p.id LIMIT $5)) p ORDER BY p.id LIMIT $5) o",
                      keep->from, t, conds.buf, keep->skip, keep->requeued, t, conds.buf);
    }
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "WITH c AS ("
                  " SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type,"
                  "  o.topic, o.payload, %s AS headers, o.created_at, %s, o.lease_partition"
                  "%s"
                  " ORDER BY o.id LIMIT $2),"
                  /* sizes, the budget and the conversions only for the rows kept */
                  " s AS (SELECT c.*, coalesce(CASE WHEN pg_column_compression(c.payload) IS NULL"
                  "   AND pg_column_size(c.payload) < 2000 THEN pg_column_size(c.payload)"
                  "   ELSE octet_length(%s) END, 0) AS sz FROM c),"
                  " w AS (SELECT *, sum(sz) OVER (ORDER BY id) AS upto FROM s)"
                  " SELECT id, event_id, aggregate_type, aggregate_id, event_type, topic,"
                  "  CASE WHEN sz > $7::int8 THEN NULL ELSE %s END, headers::text,"
                  "  " OUTBOX_CREATED_MS("created_at") ", attempts, lease_partition, sz, %s"
                  " FROM w WHERE upto - sz < $6::int8 ORDER BY id",
                  headers_expr, keep ? keep->attempts : "o.attempts", rows.buf,
                  bytea ? "c.payload" : "c.payload::text",
                  bytea ? "encode(payload, 'hex')" : "payload::text", count.buf);
    strbuf_destroy(&count);
    strbuf_destroy(&conds);
    strbuf_destroy(&rows);
    return sb.buf;
}

void outbox_sql_claim(struct outbox_sql *sql, const struct config *cfg, int bytea, int requeue_count)
{
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    char *t = schema_rows_relation(cfg->table, cfg->debezium);
    char *headers_expr = outbox_headers_sql(cfg, "o", sql->placement_types);
    struct strbuf doorbell, parked;
    strbuf_init(&doorbell);
    strbuf_printf(&doorbell, "%s.\"%s_doorbell\"", schema_q, name);
    strbuf_init(&parked);
    /* poison policy block: a row waits behind a parked row of its key with a lower id, never
     * behind a later one (a row parked at once, an invalid topic, while an earlier row of its
     * key was put back by a failed batch: the earlier row stayed PENDING until a requeue) */
    if (strcmp(cfg->poison_policy, "skip") != 0 && cfg->keep)
        strbuf_printf(&parked,
                      "   AND NOT EXISTS (SELECT 1 FROM %s.\"%s_parked\" f"
                      " WHERE f.failed AND f.aggregate_id = p.aggregate_id AND f.id < p.id)", schema_q, name);
    else if (strcmp(cfg->poison_policy, "skip") != 0)
        strbuf_printf(&parked,
                      "   AND NOT EXISTS (SELECT 1 FROM %s f"
                      " WHERE f.status = 'FAILED' AND f.aggregate_id = p.aggregate_id AND f.id < p.id)", t);
    struct strbuf from, skip, requeued, attempts;
    strbuf_init(&from);
    strbuf_init(&skip);
    strbuf_init(&requeued);
    strbuf_init(&attempts);
    struct keep_claim keep = {0};
    if (cfg->keep) {
        keep_sql_claim_parts(schema_q, name, &from, &skip, &requeued);
        strbuf_printf(&attempts, "CASE WHEN lp.noted THEN coalesce((SELECT k.attempts FROM %s.\"%s_parked\" k"
                                 " WHERE k.id = o.id), o.attempts) ELSE o.attempts END AS attempts", schema_q, name);
        keep = (struct keep_claim){from.buf, skip.buf, requeued.buf, attempts.buf};
    }
    free(sql->claim);
    sql->claim = claim_sql(t, doorbell.buf, parked.buf, sql->topic_expr, headers_expr, bytea,
                           requeue_count, cfg->keep ? &keep : NULL);
    strbuf_destroy(&from);
    strbuf_destroy(&skip);
    strbuf_destroy(&requeued);
    strbuf_destroy(&attempts);
    strbuf_destroy(&doorbell);
    strbuf_destroy(&parked);
    free(headers_expr);
    free(schema_q);
    free(table_q);
    free(t);
    free(name);
}
