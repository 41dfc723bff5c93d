/* SQL statements over the outbox table. */
#include "relay/outbox.h"

#include <stdlib.h>
#include <string.h>

#include "relay/schema.h"
#include "core/util.h"

/* "status = 'PENDING'" for statements that find their rows by id (see outbox_sql_init). */
#define BY_ID_PENDING "(status || '') = 'PENDING'"

/* The topic template as a SQL expression over row alias p, so claims can skip paused
 * topics: 'outbox.event.' || p.aggregate_type. The template was validated (no quotes). */
static char *topic_expression(const char *tmpl)
{
    struct strbuf sb;
    strbuf_init(&sb);
    strbuf_puts(&sb, "coalesce(p.topic, ''");
    const char *lit = tmpl;
    for (const char *p = tmpl;; p++) {
        int agg = strncmp(p, "{aggregate_type}", 16) == 0;
        int evt = strncmp(p, "{event_type}", 12) == 0;
        if (*p == '\0' || agg || evt) {
            if (p > lit)
                strbuf_printf(&sb, " || '%.*s'", (int)(p - lit), lit);
            if (*p == '\0')
                break;
            strbuf_puts(&sb, agg ? " || p.aggregate_type" : " || p.event_type");
            p += agg ? 15 : 11;
            lit = p + 1;
        }
    }
    strbuf_puts(&sb, ")");
    return sb.buf;
}

void outbox_sql_arm(struct outbox_sql *sql, const struct config *cfg, int bell)
{
    char *schema_q, *t, *name;
    schema_names(cfg->table, &schema_q, &t, &name);
    struct strbuf sb;
    strbuf_init(&sb);
    if (bell) {
        /* Schema 6: the bell is a sequence, armed by setval(bell, 1, true), which the
         * trigger's WHEN condition reads (schema/006_bell.sql); the channel it rings lives in
         * the doorbell row, written only when it differs. Nothing here waits for a writer. */
        strbuf_printf(&sb,
                      "WITH c AS (UPDATE %s.\"%s_doorbell\" SET channel = $1"
                      "  WHERE only_row IN (SELECT only_row FROM %s.\"%s_doorbell\""
                      "   WHERE channel IS DISTINCT FROM $1 FOR UPDATE SKIP LOCKED))"
                      " SELECT setval('%s.\"%s_bell\"'::regclass, 1, true)",
                      schema_q, name, schema_q, name, schema_q, name);
    } else {
        /* Schema 5 and before. Arming never waits: the doorbell row is locked by a writer
         * that is disarming it (and rings at its commit, however late) or by another relay
         * arming it; either way it is as good as armed, and the poll covers the rest.
         * Waiting would stop the worker for as long as that writer's transaction stays open. */
        strbuf_printf(&sb, "UPDATE %s.\"%s_doorbell\" SET armed = true, channel = $1"
                           " WHERE only_row IN (SELECT only_row FROM %s.\"%s_doorbell\" FOR UPDATE SKIP LOCKED)",
                      schema_q, name, schema_q, name);
    }
    free(sql->arm);
    sql->arm = sb.buf;
    free(schema_q);
    free(t);
    free(name);
}

/* The names every statement is written with: the schema, the table (quoted), its bare name,
 * and the relation rows are read and written through (the table, or the Debezium layout's
 * view). */
struct names {
    char *schema_q, *table_q, *name, *t;
};

/* Statements on claimed rows: the mark (or delete), parking, failures. */
static void sql_rows(struct outbox_sql *sql, const struct config *cfg, const struct names *n)
{
    struct strbuf sb;
    strbuf_init(&sb);
    /* The mark also records the highest id this relay has claimed so far (rows in flight
     * included), for the duplicates estimate after a crash: one upsert of a small row per
     * mark, in the same statement, so no extra round trip or WAL flush. */
    /* Statements on rows by id test PENDING as BY_ID_PENDING, which the planner cannot match
     * with the pending index's predicate: they go through the primary key. With a plain
     * status = 'PENDING' the planner may pick the pending index (few live entries in its
     * statistics) and scan all of it, every dead entry of its head included: measured with a
     * REPEATABLE READ transaction open for 80 s, a mark of a few hundred rows took 1-4 s. */
    if (cfg->on_sent && strcmp(cfg->on_sent, "delete") == 0) /* OUTBOX_ON_SENT=delete: no SENT row is kept */
        strbuf_printf(&sb, "WITH m AS (DELETE FROM %s"
                           "  WHERE id = ANY($1::int8[]) AND " BY_ID_PENDING " RETURNING 1),", n->t);
    else
        strbuf_printf(&sb, "WITH m AS (UPDATE %s SET status = 'SENT', sent_at = clock_timestamp()"
                           "  WHERE id = ANY($1::int8[]) AND " BY_ID_PENDING " RETURNING 1),", n->t);
    strbuf_printf(&sb,
                  OUTBOX_RELAY_STATE_CTE
                  " SELECT count(*) FROM m", n->schema_q, n->name);
    sql->mark = sb.buf;

    /* Exactly-once: rows the progress record says were committed to Kafka, recorded if the
     * row with that id is still the one published (same event id) and still PENDING. */
    if (cfg->on_sent && strcmp(cfg->on_sent, "delete") == 0)
        sql->recover = xasprintf("WITH m AS (DELETE FROM %s t USING unnest($1::int8[], $2::text[]) AS u(id, event_id)"
            "  WHERE t.id = u.id AND t.event_id::text = u.event_id AND (t.status || '') = 'PENDING' RETURNING 1)"
            " SELECT count(*) FROM m", n->t);
    else
        sql->recover = xasprintf("WITH m AS (UPDATE %s t SET status = 'SENT', sent_at = clock_timestamp()"
            "  FROM unnest($1::int8[], $2::text[]) AS u(id, event_id)"
            "  WHERE t.id = u.id AND t.event_id::text = u.event_id AND (t.status || '') = 'PENDING' RETURNING 1)"
            " SELECT count(*) FROM m", n->t);

    sql->park = xasprintf("UPDATE %s SET status = 'FAILED', attempts = attempts + 1, last_error = $2 "
        "WHERE id = $1::int8 AND " BY_ID_PENDING, n->t);

    sql->note_failed = xasprintf("UPDATE %s SET last_error = $2 WHERE id = ANY($1::int8[]) AND " BY_ID_PENDING, n->t);

    sql->row_failed = xasprintf("UPDATE %s SET attempts = attempts + 1, last_error = $2,"
        " status = CASE WHEN attempts + 1 >= $3::int THEN 'FAILED' ELSE status END "
        "WHERE id = $1::int8 AND " BY_ID_PENDING " RETURNING status, attempts, event_id,"
        " aggregate_id, aggregate_type, event_type,"
        " " OUTBOX_CREATED_MS("created_at"), n->t);
}

/* The floors' probe and the start-up check. */
static void sql_checks(struct outbox_sql *sql, const struct config *cfg, const struct names *n)
{
    struct strbuf sb;
    /* The floors' proof (floor.h): the transactions holding ROW EXCLUSIVE on the table or
     * any of its partitions (every INSERT takes it on the relation it names before drawing
     * its id, until its transaction ends; an INSERT straight into a partition locks that
     * partition alone; readers hold only ACCESS SHARE), read after the identity's last value
     * (the proof uses the value of the probe before, read before this probe started, so the
     * order of the reads within the statement does not matter; NULL when this role may not read the
     * sequence) and its CACHE (ids drawn in time order only with 1; ALTER SEQUENCE makes every
     * session drop the ids it had drawn ahead, so CACHE 1 again is at once enough: proof_cache
     * checks it); the oldest of the writers in $1 (those holding the oldest candidate back,
     * '{}' unless it waited long), named for the log; and the doorbell's requeue count
     * (schema 5: the probe runs only there), for requeues that no claim saw (a claim that
     * finds no row cannot tell). Prepared transactions have no pid. */
    const char *id_col = cfg->debezium ? "relay_seq" : "id";
    sql->floor_probe = xasprintf(
        "SELECT coalesce(w.writers, '{}'),"
        " (SELECT CASE WHEN a.pid IS NULL THEN 'a prepared transaction (virtual id ' || h.virtualtransaction || ')'"
        "   ELSE format('pid %%s (application_name \"%%s\", user %%s), open %%s s', a.pid, a.application_name,"
        "    a.usename, round(extract(epoch FROM clock_timestamp() - a.xact_start))) END"
        "  FROM pg_locks h LEFT JOIN pg_stat_activity a ON a.pid = h.pid"
        "  WHERE h.virtualtransaction = ANY($1::text[]) AND h.locktype = 'relation'"
        "  AND h.mode = 'RowExclusiveLock' ORDER BY a.xact_start NULLS FIRST LIMIT 1),"
        " (SELECT requeued FROM %s.\"%s_doorbell\"),"
        " s.last_value, s.cache"
        " FROM (SELECT CASE WHEN has_sequence_privilege(q, 'SELECT,USAGE') THEN coalesce(pg_sequence_last_value(q), 0)"
        "  END AS last_value, (SELECT seqcache FROM pg_sequence WHERE seqrelid = q::regclass) AS cache"
        "  FROM (SELECT pg_get_serial_sequence('%s', '%s') AS q) q OFFSET 0) s"
        " CROSS JOIN LATERAL (SELECT array_agg(DISTINCT l.virtualtransaction) AS writers"
        "  FROM pg_locks l WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock'"
        "  AND l.pid IS DISTINCT FROM pg_backend_pid() AND s.last_value IS NOT DISTINCT FROM s.last_value"
        "  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        "  AND l.relation IN (SELECT '%s'::regclass UNION SELECT relid FROM pg_partition_tree('%s'))) w",
        n->schema_q, n->name, n->table_q, id_col, n->table_q, n->table_q);

    sql->version = schema_version_query(cfg->table);
    char *placement = outbox_placement_columns(cfg), *types = outbox_placement_types_sql(cfg, n->table_q);
    /* At start-up: the version, the layout (and the columns OUTBOX_ADDITIONAL_PLACEMENT
     * names that the table lacks), whether row-level security would hide rows from this role
     * (enabled, not bypassed by the role, not the owner's unless forced), and the payload
     * column's type (bytea is claimed as hex). */
    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "SELECT (%s) AS version,"
                  " (SELECT c.relrowsecurity AND NOT (r.rolsuper OR r.rolbypassrls)"
                  "   AND (c.relforcerowsecurity OR NOT pg_has_role(c.relowner, 'MEMBER'))"
                  "  FROM pg_class c, pg_roles r WHERE c.oid = '%s'::regclass"
                  "  AND r.rolname = current_user) AS rls_hides_rows,"
                  " (SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                  "  WHERE attrelid = '%s'::regclass AND attname = 'payload' AND NOT attisdropped)"
                  "  AS payload_type,"
                  " EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '%s'::regclass"
                  "  AND attname = 'relay_seq' AND NOT attisdropped) AS debezium_layout,"
                  " (SELECT string_agg(c, ', ') FROM unnest(%s) c WHERE NOT EXISTS (SELECT 1"
                  "  FROM pg_attribute WHERE attrelid = '%s'::regclass AND attname = c"
                  "  AND NOT attisdropped)) AS missing_columns,"
                  " %s AS placement_types,"
                  /* the table is in keep mode once a watermark was set: read through
                   * query_to_xml, so that a table without the watermark table (schema < 7,
                   * the Debezium layout) or a role that may not read it answers NULL */
                  " (SELECT CASE WHEN has_table_privilege(w, 'SELECT') THEN (xpath('/row/n/text()',"
                  "   query_to_xml(format('SELECT count(*) AS n FROM (SELECT 1 FROM %%s LIMIT 1) s', w),"
                  "   false, true, '')))[1]::text::int > 0 END"
                  "  FROM to_regclass('%s.\"%s_watermark\"') w WHERE w IS NOT NULL) AS keep_table,"
                  /* JIT off for this session: the claim's plan (a lateral over the held lease
                   * partitions; in keep mode its records and parked subplans) costs more than
                   * jit_above_cost, so PostgreSQL compiled every claim for a statement that reads
                   * a few thousand index entries: 60 ms of a 67 ms keep-mode claim (auto_explain,
                   * docs/PERFORMANCE.md). A SET here costs no round trip of its own. */
                  " set_config('jit', 'off', false) AS jit",
                  sql->version, n->table_q, n->table_q, n->table_q, placement, n->table_q, types,
                  n->schema_q, n->name);
    free(placement);
    free(types);
    sql->start_check = sb.buf;
}

/* The monitor's: backlog, long transactions, xmin holders, retention, duplicates. */
static void sql_monitor(struct outbox_sql *sql, const struct config *cfg, const struct names *n)
{
    /* Each partition read from its bound ($2, one per partition: monitor_heads_bounds), not
     * from the bottom of the pending index: a long transaction keeps the index entries of
     * every row marked or deleted since it began, and the statement from the bottom grew to
     * 23 s under a REPEATABLE READ reader at 3,000 events/s in delete mode (the backlog
     * gauges then went minutes without a refresh). The last column: each partition's first
     * pending row, 0 when none, for the next statement's bounds. */
    sql->stats = xasprintf("WITH heads AS (SELECT lp, h.id, h.created_at FROM generate_series(0, %d) lp"
        "  LEFT JOIN LATERAL (SELECT id, created_at FROM %s WHERE status = 'PENDING'"
        "   AND lease_partition = lp AND id >= ($2::int8[])[lp + 1] ORDER BY id LIMIT 1) h ON true)"
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM generate_series(0, %d) lp CROSS JOIN LATERAL"
        "  (SELECT 1 FROM %s WHERE status = 'PENDING' AND lease_partition = lp"
        "   AND id >= ($2::int8[])[lp + 1] LIMIT $1) x LIMIT $1) s),"
        " (SELECT min(id) FROM heads),"
        " (SELECT " OUTBOX_OLDEST_AGE("created_at") " FROM heads),"
        " (SELECT max(id) FROM %s),"
        " (SELECT count(*) FROM %s WHERE status = 'FAILED'),"
        " pg_notification_queue_usage(),"
        " (SELECT string_agg(coalesce(id, 0)::text, ',' ORDER BY lp) FROM heads)",
        OUTBOX_LEASE_PARTITIONS - 1, n->t, OUTBOX_LEASE_PARTITIONS - 1, n->t, n->t, n->t);

    sql->long_tx = xstrdup(
        "SELECT pid, xid, age, application_name, usename, query_start FROM ("
        " SELECT pid, coalesce(backend_xid::text, backend_xmin::text, '') AS xid,"
        "  extract(epoch FROM clock_timestamp() - xact_start) AS age,"
        "  coalesce(application_name, '') AS application_name, coalesce(usename::text, '') AS usename,"
        "  coalesce(to_char(query_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '') AS query_start"
        " FROM pg_stat_activity"
        " WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        "  AND datname = current_database()"
        "  AND clock_timestamp() - xact_start > make_interval(secs => $1::int)"
        " UNION ALL"
        " SELECT 0, transaction::text, extract(epoch FROM clock_timestamp() - prepared),"
        "  'prepared transaction ' || gid, owner::text, ''"
        " FROM pg_prepared_xacts WHERE clock_timestamp() - prepared > make_interval(secs => $1::int)"
        "  AND database = current_database()"
        ") l ORDER BY age DESC LIMIT 1");

    /* A replication slot (physical, or logical of this database) or a standby's feedback
     * whose xmin is older than the oldest transaction running now holds back vacuum as a
     * long transaction would; its age in time is not recorded anywhere, so the monitor
     * times how long the same xmin stays. */
    sql->xmin_holder = xstrdup(
        "SELECT kind, name, xmin::text, pid, age(xmin) FROM ("
        " SELECT 'replication slot' AS kind, slot_name::text AS name, xmin,"
        "  coalesce(active_pid, 0) AS pid"
        " FROM pg_replication_slots WHERE xmin IS NOT NULL"
        "  AND (database IS NULL OR database = current_database())"
        " UNION ALL"
        " SELECT 'standby', coalesce(nullif(application_name, ''), host(client_addr), 'walsender'),"
        "  backend_xmin, pid FROM pg_stat_replication WHERE backend_xmin IS NOT NULL"
        ") h WHERE age(xmin) > (SELECT age(backend_xmin) FROM pg_stat_activity"
        "  WHERE pid = pg_backend_pid())"
        " ORDER BY age(xmin) DESC, kind, name LIMIT 1");

    sql->purge = xasprintf("WITH w AS (SELECT id, status, sent_at FROM %s WHERE id > $1::int8 ORDER BY id LIMIT $2),"
        " d AS (DELETE FROM %s WHERE id IN (SELECT id FROM w WHERE status = 'SENT'"
        "   AND sent_at < clock_timestamp() - make_interval(secs => $3::int)) RETURNING 1)"
        " SELECT (SELECT count(*) FROM d), (SELECT max(id) FROM w),"
        " (SELECT count(*) FROM w WHERE status = 'PENDING' OR (status = 'SENT'"
        "   AND sent_at >= clock_timestamp() - make_interval(secs => $3::int))),"
        /* the first row it leaves that may be deleted later (monitor.c starts most cycles
         * there): PENDING or too young; not a FAILED row, which may stay for months (a later
         * requeue and send is found by a cycle from the bottom) */
        " (SELECT coalesce(min(id), 0) FROM w WHERE status = 'PENDING' OR (status = 'SENT'"
        "   AND sent_at >= clock_timestamp() - make_interval(secs => $3::int)))",
        n->t, n->t);

    sql->duplicates = xasprintf("SELECT count(*) FROM %s WHERE status = 'PENDING' AND id <= "
        "(SELECT coalesce(max(claimed_high), 0) FROM %s.\"%s_relay_state\")",
        n->t, n->schema_q, n->name);
}

/* Leases: scan, acquire, release, log. */
static void sql_leases(struct outbox_sql *sql, const struct config *cfg, const struct names *n)
{
    /* Leases: session advisory locks (key, partition) on the worker connection, the key
     * derived from the table's name with its schema ("outbox" is "public.outbox"). Every
     * relay's worker session also holds the table's membership lock (key, MEMBER) in
     * shared mode: the relays of this table are its holders, whatever their names. */
    sql->lease_key = outbox_lease_key(cfg->table);
    sql->lease_scan = xasprintf("WITH l AS (SELECT objid::int AS p, pid FROM pg_locks WHERE locktype = 'advisory'"
        "  AND classid = $1::int::oid AND objsubid = 2 AND granted"
        "  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())),"
        " m AS (SELECT pid FROM l WHERE p = %d)"
        " SELECT (SELECT count(*) FROM m),"
        "  array(SELECT p FROM l WHERE p < %d AND pid IN (SELECT pid FROM m))::text,"
        "  array(SELECT p FROM l WHERE p < %d AND pid NOT IN (SELECT pid FROM m))::text,"
        "  (SELECT string_agg(DISTINCT 'pid ' || l.pid || coalesce(' (' || nullif(a.application_name, '')"
        "   || ')', ''), ', ') FROM l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
        "   WHERE l.p < %d AND l.pid NOT IN (SELECT pid FROM m)),"
        "  (SELECT count(*) FROM l WHERE p = %d AND pid IN (SELECT pid FROM m)),"
        /* exactly-once relays whose groups lock is not this relay's (1 group: any such lock) */
        "  (SELECT count(*) FROM m WHERE pid IN (SELECT pid FROM l WHERE p = %d)"
        "   AND pid NOT IN (SELECT pid FROM l WHERE p = %d)"
        "   AND (%d > 1 OR pid IN (SELECT pid FROM l WHERE p BETWEEN %d AND %d)))",
        OUTBOX_MEMBER_LOCK, OUTBOX_LEASE_PARTITIONS, OUTBOX_LEASE_PARTITIONS, OUTBOX_LEASE_PARTITIONS,
        OUTBOX_EOS_LOCK, OUTBOX_EOS_LOCK, OUTBOX_EOS_GROUPS_LOCK + cfg->transaction_groups,
        cfg->transaction_groups, OUTBOX_EOS_GROUPS_LOCK + 2, OUTBOX_EOS_GROUPS_LOCK + OUTBOX_LEASE_PARTITIONS);
    /* The acquisition's fencing token: the server's clock in microseconds when the lock was
     * taken, after the previous holder's session let it go; carried in every message. */
    sql->lease_acquire = xasprintf("SELECT p, pg_try_advisory_lock($1::int, p), last.event, last.relay,"
        "  (extract(epoch FROM clock_timestamp()) * 1000000)::int8"
        " FROM unnest($2::int[]) p"
        " LEFT JOIN LATERAL (SELECT event, relay FROM %s.\"%s_lease_log\" l"
        "  WHERE l.lease_partition = p ORDER BY id DESC LIMIT 1) last ON true",
        n->schema_q, n->name);
    sql->lease_release = xstrdup("SELECT pg_advisory_unlock($1::int, p) FROM unnest($2::int[]) p");
    sql->lease_log = xasprintf("INSERT INTO %s.\"%s_lease_log\" (lease_partition, relay, event, at, publish_from,"
        " publish_until) SELECT p, $2, e, to_timestamp(a / 1000.0),"
        " to_timestamp(nullif(f, 0) / 1000.0), to_timestamp(nullif(u, 0) / 1000.0)"
        " FROM unnest($1::int[], $3::text[], $4::int8[], $5::int8[], $6::int8[])"
        "  AS l(p, e, a, f, u)",
        n->schema_q, n->name);
}

/* The worker's and the listener's session settings. */
static void sql_sessions(struct outbox_sql *sql, const struct config *cfg, const struct names *n)
{
    struct strbuf sb;
    /* Session settings: the worker's statement timeout and keepalives follow the lease
     * timeout (the server must notice a dead relay before the lease grace ends). A frozen
     * process (SIGSTOP, a paused container) still answers keepalives from its kernel, so
     * the session also ends when it sent nothing for 30% of the lease timeout (a live
     * relay scans its leases every 20%; its own deadline is 30% too). */
    strbuf_init(&sb);
    strbuf_printf(&sb,
                  "SET statement_timeout = %d; SET idle_in_transaction_session_timeout = 60000; "
                  "SET idle_session_timeout = %d; "
                  "SET synchronous_commit = off; SET tcp_keepalives_idle = 1; "
                  "SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = %d; "
                  "SET tcp_user_timeout = %d; SELECT pg_advisory_lock_shared(%d, %d); "
                  "SELECT pg_advisory_lock_shared(%d, %d) WHERE %s; "
                  "SELECT pg_advisory_lock_shared(%d, %d) WHERE %s; "
                  "SET application_name = 'outbox-relay ",
                  cfg->statement_timeout_ms, cfg->lease_timeout_ms * 3 / 10,
                  cfg->lease_timeout_ms / 2000 > 0 ? cfg->lease_timeout_ms / 2000 : 1,
                  cfg->lease_timeout_ms / 2, sql->lease_key, OUTBOX_MEMBER_LOCK,
                  /* exactly-once relays say so: relays in the other mode refuse the table */
                  sql->lease_key, OUTBOX_EOS_LOCK, cfg->exactly_once ? "true" : "false",
                  /* and their transaction groups, when more than one */
                  sql->lease_key, OUTBOX_EOS_GROUPS_LOCK + cfg->transaction_groups,
                  cfg->exactly_once && cfg->transaction_groups > 1 ? "true" : "false");
    /* the name was validated: at most 50 printable ASCII characters; quotes are dropped */
    for (const char *c = cfg->relay_name ? cfg->relay_name : ""; *c; c++)
        if (*c != '\'' && *c != '\\')
            strbuf_append(&sb, c, 1);
    strbuf_puts(&sb, "'");
    sql->worker_setup = sb.buf;
    if (cfg->notify_channel && cfg->notify_channel[0]) {
        strbuf_init(&sb);
        strbuf_printf(&sb, "SET application_name = 'outbox-relay listen'; LISTEN \"%s\"",
                      cfg->notify_channel);
        sql->listen_setup = sb.buf;
    }
}

/* Keep mode's statements in place of mark mode's (keep_sql.h). */
static void use_keep_statements(struct outbox_sql *sql, const char *schema_q, const char *table_q, const char *name)
{
    struct keep_statements k;
    keep_sql_init(&k, schema_q, table_q, name, sql->lease_key);
    struct {
        char **to, *from;
    } moves[] = {{&sql->mark, k.mark}, {&sql->recover, k.recover}, {&sql->park, k.park}, {&sql->note_failed, k.note_failed},
                 {&sql->row_failed, k.row_failed}, {&sql->stats, k.stats}, {&sql->purge, k.purge},
                 {&sql->duplicates, k.duplicates}, {&sql->orphans, k.orphans}, {&sql->partitions, k.partitions},
                 {&sql->keep_advance, k.keep_advance}, {&sql->keep_audit, k.keep_audit},
                 {&sql->keep_check, k.keep_check}};
    for (size_t i = 0; i < ARRAY_LEN(moves); i++) {
        free(*moves[i].to);
        *moves[i].to = moves[i].from;
    }
}

void outbox_sql_init(struct outbox_sql *sql, const struct config *cfg)
{
    struct names n;
    schema_names(cfg->table, &n.schema_q, &n.table_q, &n.name);
    n.t = schema_rows_relation(cfg->table, cfg->debezium);
    memset(sql, 0, sizeof(*sql));
    sql->topic_expr = topic_expression(cfg->topic_template);
    /* Every claim starts in each held lease partition of the pending index at that
     * partition's proven floor ($9, aligned with $4; 0 is the bottom: floor.c) and skips
     * only the rows in flight ($1, a hashed NOT IN), so a row that commits late below rows
     * already published is still found, in id order with the later rows of its key (a key
     * never changes partition). At most $5 rows per partition, $2 in all. Keys with a
     * parked row wait (unless the poison policy is skip); paused topics wait; keys held
     * back because their Kafka partition holds its share wait ($8, kshare.h). The claim
     * is read-only: it needs no transaction id and no WAL flush. */
    outbox_sql_claim(sql, cfg, 0, 0);
    sql_rows(sql, cfg, &n);
    outbox_sql_arm(sql, cfg, 0);
    sql_checks(sql, cfg, &n);
    sql_monitor(sql, cfg, &n);
    sql_leases(sql, cfg, &n);
    sql_sessions(sql, cfg, &n);
    if (cfg->keep)
        use_keep_statements(sql, n.schema_q, n.table_q, n.name);
    free(n.schema_q);
    free(n.table_q);
    free(n.t);
    free(n.name);
}

int outbox_lease_key(const char *table)
{
    struct strbuf full;
    strbuf_init(&full);
    if (!strchr(table, '.'))
        strbuf_puts(&full, "public.");
    strbuf_puts(&full, table);
    uint32_t h = 2166136261u;
    for (const char *c = full.buf; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    strbuf_destroy(&full);
    return (int)(h & 0x7fffffff);
}

void outbox_sql_destroy(struct outbox_sql *sql)
{
    char **all[] = {&sql->claim, &sql->floor_probe, &sql->mark, &sql->park, &sql->note_failed,
                    &sql->row_failed, &sql->arm, &sql->version, &sql->start_check, &sql->stats, &sql->long_tx, &sql->xmin_holder,
                    &sql->purge,
                    &sql->partitions,
                    &sql->orphans,
                    &sql->duplicates, &sql->topic_expr, &sql->lease_scan, &sql->lease_acquire,
                    &sql->lease_release, &sql->lease_log, &sql->worker_setup, &sql->listen_setup,
                    &sql->placement_types, &sql->keep_advance, &sql->keep_check, &sql->keep_audit,
                    &sql->recover};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}
