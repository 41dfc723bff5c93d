/* outbox-inbox's loop: one thread, one message at a time, in the order the consumer
 * delivers them (per partition, offset order). For each message:
 *
 *   BEGIN; INSERT the dedupe record ON CONFLICT DO NOTHING (a FAILED record is retried);
 *   if it is new, SELECT handler(...); COMMIT; then store the offset.
 *
 * The database's unique key, not a lookup, decides what is a duplicate, so two consumers
 * racing on one message (a rebalance) apply it once: the second waits on the first's
 * insert and then finds it. The offset never runs ahead of the database: a crash between
 * the commit and the store redelivers the message, which is then a duplicate. libpq is
 * used blocking: nothing else needs the thread while a message is applied, and the
 * consumer's poll paces the loop. */
#include "inbox.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "dedupe.h"
#include "http.h"
#include "log.h"
#include "metrics.h"
#include "pgconn.h"
#include "schema.h"
#include "sink.h"
#include "util.h"

#ifndef OUTBOX_VERSION
#define OUTBOX_VERSION "dev"
#endif

#define RETENTION_EVERY_MS 60000
#define RETENTION_BATCH 5000
#define PUBLISH_EVERY_MS 1000
#define MAX_LAG_PARTS 512

enum result { APPLIED, DUPLICATE, DEAD_LETTERED, FAILED, RESULTS };
static const char *const result_names[] = {"applied", "duplicate", "dead_lettered", "failed"};

enum outcome { DONE_APPLIED, DONE_DUPLICATE, RETRY_TRANSIENT, RETRY_HANDLER };

struct lag {
    char topic[250];
    int32_t partition;
    int64_t lag;
};

struct inbox {
    const struct inbox_config *cfg;
    volatile sig_atomic_t *stop;
    PGconn *conn;
    char *apply_sql, *fail_sql, *function, *retention_sql;
    int prepared; /* apply_sql is prepared on this connection */
    rd_kafka_t *consumer, *producer;
    char *kafka_secrets_seen; /* the file-read Kafka settings when the clients were made, or NULL */
    int kafka_recreate;       /* an authentication failure after such a file changed */
    struct http *http;
    int64_t last_publish, last_retention;
    long kill_after_commit; /* test builds: SIGKILL after the commit reaching this many messages */
    long committed;         /* messages committed */
    /* metrics */
    uint64_t messages[RESULTS];
    uint64_t handler_failures, transient_errors, pg_reconnects, retention_deleted;
    struct histogram completion, handler_time;
    struct lag lags[MAX_LAG_PARTS];
    int n_lags, assigned;
    char last_error[300];
    /* the producer's delivery report for the dead letter in flight */
    int dlq_done;
    rd_kafka_resp_err_t dlq_err;
};

static const double completion_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
static const double handler_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};

/* ---------------------------------------------------------------- PostgreSQL */

PGconn *inbox_connect(const struct inbox_config *cfg)
{
    /* INBOX_PG_DSN_FILE is read again for every connection: a rotated password is used from
     * the next reconnect on; the handler may rely on the role's search_path (not pinned) */
    char *dsn = config_current_dsn(cfg->pg_dsn, cfg->pg_dsn_file, "INBOX_PG_DSN_FILE");
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

static void build_statements(struct inbox *ib)
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

static void failure(struct inbox *ib, const PGresult *res, int *transient);

/* One statement; NULL on failure with *transient said and last_error filled. */
static PGresult *statement(struct inbox *ib, const char *sql, int n, const char *const *params, int *transient)
{
    PGresult *res = n ? PQexecParams(ib->conn, sql, n, NULL, params, NULL, NULL, 0) : PQexec(ib->conn, sql);
    if (pgconn_result_ok(res))
        return res;
    failure(ib, res, transient);
    PQclear(res);
    return NULL;
}

/* Fills last_error from a failed result (NULL: the connection) and says whether the
 * failure is transient. */
static void failure(struct inbox *ib, const PGresult *res, int *transient)
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

static void rollback(struct inbox *ib)
{
    if (ib->conn && PQstatus(ib->conn) == CONNECTION_OK && PQtransactionStatus(ib->conn) != PQTRANS_IDLE)
        PQclear(PQexec(ib->conn, "ROLLBACK"));
}

/* ---------------------------------------------------------------- metrics, HTTP */

static void publish(struct inbox *ib, int force)
{
    int64_t now = mono_ms();
    if (!ib->http || (!force && now - ib->last_publish < PUBLISH_EVERY_MS))
        return;
    ib->last_publish = now;
    struct strbuf o;
    strbuf_init(&o);
    metrics_head(&o, "inbox_build_info", "gauge", "Build information; always 1.");
    strbuf_printf(&o, "inbox_build_info{version=\"%s\"} 1\n", OUTBOX_VERSION);
    metrics_head(&o, "inbox_messages_total", "counter",
                 "Messages handled, by result: applied, duplicate (an idempotency hit), dead_lettered, failed "
                 "(recorded FAILED without a dead-letter topic).");
    for (int r = 0; r < RESULTS; r++)
        strbuf_printf(&o, "inbox_messages_total{result=\"%s\"} %llu\n", result_names[r],
                      (unsigned long long)ib->messages[r]);
    metrics_head(&o, "inbox_handler_failures_total", "counter", "Handler attempts that failed (each retry counts).");
    strbuf_printf(&o, "inbox_handler_failures_total %llu\n", (unsigned long long)ib->handler_failures);
    metrics_head(&o, "inbox_transient_errors_total", "counter",
                 "Transient database errors (connection lost, serialization failure, deadlock, read-only), retried "
                 "without counting an attempt.");
    strbuf_printf(&o, "inbox_transient_errors_total %llu\n", (unsigned long long)ib->transient_errors);
    metrics_head(&o, "inbox_pg_reconnects_total", "counter", "PostgreSQL connections made after the first.");
    strbuf_printf(&o, "inbox_pg_reconnects_total %llu\n", (unsigned long long)ib->pg_reconnects);
    metrics_head(&o, "inbox_retention_deleted_total", "counter", "Inbox rows deleted by INBOX_RETENTION.");
    strbuf_printf(&o, "inbox_retention_deleted_total %llu\n", (unsigned long long)ib->retention_deleted);
    metrics_head(&o, "inbox_pg_connected", "gauge", "1 while connected to PostgreSQL.");
    strbuf_printf(&o, "inbox_pg_connected %d\n", ib->conn ? 1 : 0);
    metrics_head(&o, "inbox_assigned_partitions", "gauge", "Partitions assigned to this consumer.");
    strbuf_printf(&o, "inbox_assigned_partitions %d\n", ib->assigned);
    metrics_head(&o, "inbox_consumer_lag", "gauge",
                 "Messages behind the high watermark per assigned partition (librdkafka statistics, every 5 s).");
    for (int i = 0; i < ib->n_lags; i++) {
        strbuf_puts(&o, "inbox_consumer_lag{topic=\"");
        metrics_label_value(&o, ib->lags[i].topic);
        strbuf_printf(&o, "\",partition=\"%d\"} %lld\n", (int)ib->lags[i].partition, (long long)ib->lags[i].lag);
    }
    metrics_histogram(&o, "inbox_completion_seconds",
                      "From the message's Kafka timestamp (an outbox row's created_at) to the commit applying it.",
                      &ib->completion);
    metrics_histogram(&o, "inbox_handler_seconds", "Time of the transaction applying one new message.",
                      &ib->handler_time);

    json_t *lags = json_array();
    for (int i = 0; i < ib->n_lags; i++)
        json_array_append_new(lags, json_pack("{s:s,s:i,s:I}", "topic", ib->lags[i].topic, "partition",
                                              (int)ib->lags[i].partition, "lag", (json_int_t)ib->lags[i].lag));
    uint64_t all = ib->messages[APPLIED] + ib->messages[DUPLICATE] + ib->messages[DEAD_LETTERED] + ib->messages[FAILED];
    json_t *doc = json_pack("{s:s,s:s,s:s,s:s,s:b,s:i,s:{s:I,s:I,s:I,s:I},s:f,s:o,s:s}", "table", ib->cfg->table,
                            "handler", ib->cfg->handler, "name", ib->cfg->name, "topics", ib->cfg->topics,
                            "pg_connected", ib->conn != NULL, "assigned_partitions", ib->assigned, "messages",
                            "applied", (json_int_t)ib->messages[APPLIED], "duplicate", (json_int_t)ib->messages[DUPLICATE],
                            "dead_lettered", (json_int_t)ib->messages[DEAD_LETTERED], "failed",
                            (json_int_t)ib->messages[FAILED], "idempotency_hit_rate",
                            all ? (double)ib->messages[DUPLICATE] / (double)all : 0.0, "lag", lags, "last_error",
                            ib->last_error);
    char *status = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(doc);
    http_publish(ib->http, o.buf, status ? status : "{}", ib->conn != NULL);
    free(status);
    strbuf_destroy(&o);
}

/* Sleeps ms in short steps, keeping the HTTP snapshot fresh; 1 if asked to stop. */
static int pause_ms(struct inbox *ib, int ms)
{
    int64_t until = mono_ms() + ms;
    while (!*ib->stop && mono_ms() < until) {
        publish(ib, 0);
        usleep(50000);
    }
    return *ib->stop != 0;
}

/* Connected, or 1 when asked to stop while reconnecting with backoff. */
static int ensure_connected(struct inbox *ib)
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
        if (pause_ms(ib, backoff_next(&b)))
            break;
    }
    return 1;
}

static void retention(struct inbox *ib)
{
    int64_t now = mono_ms();
    if (!ib->cfg->retention_seconds || now - ib->last_retention < RETENTION_EVERY_MS || ensure_connected(ib))
        return;
    ib->last_retention = now;
    char secs[32];
    snprintf(secs, sizeof(secs), "%d", ib->cfg->retention_seconds);
    const char *params[1] = {secs};
    for (int round = 0; round < 20; round++) {
        int transient = 0;
        PGresult *res = statement(ib, ib->retention_sql, 1, params, &transient);
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

/* ---------------------------------------------------------------- Kafka */

static void kafka_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    if (strcmp(fac, "CONFWARN") == 0)
        log_debug("kafka: %s: %s", fac, buf);
    else if (level <= 3)
        log_error("kafka: %s: %s", fac, buf);
    else if (level <= 4)
        log_warn("kafka: %s: %s", fac, buf);
    else
        log_debug("kafka: %s: %s", fac, buf);
}

static void kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct inbox *ib = opaque;
    if (err != RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
        return;
    }
    log_error("kafka: authentication failed: %s%s", reason, sink_auth_hint(rd_kafka_conf(rk)));
    /* a secret read from a file (INBOX_KAFKA_SASL_PASSWORD_FILE) changed since the clients
     * were made: a rotated password; the loop makes them again, reading it anew */
    char *now = ib->kafka_secrets_seen ? config_kafka_file_snapshot(ib->cfg->kafka, ib->cfg->n_kafka) : NULL;
    if (now && strcmp(now, ib->kafka_secrets_seen) != 0 && !ib->kafka_recreate) {
        log_info("kafka: a Kafka setting read from a file changed since the consumer was made: "
                 "making the consumer again with it");
        ib->kafka_recreate = 1;
    }
    free(now);
}

/* Consumer lag per partition from librdkafka's statistics (served on the loop's poll). */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    struct inbox *ib = opaque;
    json_t *doc = json_loadb(json, len, 0, NULL);
    json_t *topics = json_object_get(doc, "topics");
    const char *tname;
    json_t *t;
    ib->n_lags = 0;
    json_object_foreach(topics, tname, t) {
        const char *pname;
        json_t *p;
        json_object_foreach(json_object_get(t, "partitions"), pname, p) {
            json_int_t lag = json_integer_value(json_object_get(p, "consumer_lag"));
            int32_t part = (int32_t)atoi(pname);
            const char *state = json_string_value(json_object_get(p, "fetch_state"));
            if (part < 0 || !state || strcmp(state, "active") != 0 || ib->n_lags == MAX_LAG_PARTS)
                continue;
            struct lag *l = &ib->lags[ib->n_lags++];
            snprintf(l->topic, sizeof(l->topic), "%s", tname);
            l->partition = part;
            l->lag = lag < 0 ? 0 : lag;
        }
    }
    json_decref(doc);
    return 0;
}

/* Eager (classic) rebalancing: offsets stored so far are committed before partitions go. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    struct inbox *ib = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_info("kafka: %d partitions assigned", parts->cnt);
        rd_kafka_assign(rk, parts);
        ib->assigned = parts->cnt;
    } else {
        rd_kafka_resp_err_t c = rd_kafka_commit(rk, NULL, 0);
        if (c && c != RD_KAFKA_RESP_ERR__NO_OFFSET)
            log_warn("kafka: committing offsets before a rebalance: %s", rd_kafka_err2str(c));
        log_info("kafka: %d partitions revoked", parts->cnt);
        rd_kafka_assign(rk, NULL);
        ib->assigned = 0;
        ib->n_lags = 0;
    }
}

static void dlq_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct inbox *ib = opaque;
    ib->dlq_done = 1;
    ib->dlq_err = m->err;
}

static rd_kafka_conf_t *kafka_conf(struct inbox *ib, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (config_kafka_apply(conf, ib->cfg->kafka, ib->cfg->n_kafka, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log);
    rd_kafka_conf_set_error_cb(conf, kafka_error);
    rd_kafka_conf_set_opaque(conf, ib);
    return conf;
}

static int has_prop(const struct inbox_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].name, name) == 0)
            return 1;
    return 0;
}

static int make_kafka(struct inbox *ib, char *err, size_t errlen)
{
    free(ib->kafka_secrets_seen); /* taken before they are read: a change in between recreates once more */
    ib->kafka_secrets_seen = config_kafka_file_snapshot(ib->cfg->kafka, ib->cfg->n_kafka);
    ib->kafka_recreate = 0;
    rd_kafka_conf_t *conf = kafka_conf(ib, err, errlen);
    if (!conf)
        return -1;
    char kerr[512], group[300];
    snprintf(group, sizeof(group), "outbox-inbox.%s", ib->cfg->name);
    if (!has_prop(ib->cfg, "group.id"))
        rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof(kerr));
    if (!has_prop(ib->cfg, "auto.offset.reset")) /* a new group starts at the oldest message kept */
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", kerr, sizeof(kerr));
    /* commits carry only what was applied: offsets are stored by hand, after the commit */
    rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "statistics.interval.ms", "5000", kerr, sizeof(kerr));
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    sink_warn_old_scram(conf);
    if (!(ib->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the consumer: %s", kerr);
    }
    rd_kafka_poll_set_consumer(ib->consumer);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(4);
    char *list = xstrdup(ib->cfg->topics), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        rd_kafka_topic_partition_list_add(subs, t, RD_KAFKA_PARTITION_UA);
    free(list);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(ib->consumer, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (e)
        return set_err(err, errlen, "kafka: cannot subscribe to %s: %s", ib->cfg->topics, rd_kafka_err2str(e));
    if (!ib->cfg->dead_letter_topic[0])
        return 0;
    if (!(conf = kafka_conf(ib, err, errlen)))
        return -1;
    rd_kafka_conf_set(conf, "enable.idempotence", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_report);
    if (!(ib->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the dead-letter producer: %s", kerr);
    }
    return 0;
}

/* Destroys the consumer and the dead-letter producer and makes them again (a rotated
 * secret). The consumer never authenticated, so it is destroyed without the close (which
 * would wait for a group it cannot reach); offsets stored since the last commit are
 * delivered again and counted as duplicates. */
static int remake_kafka(struct inbox *ib, char *err, size_t errlen)
{
    if (ib->consumer) {
        rd_kafka_destroy_flags(ib->consumer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        ib->consumer = NULL;
    }
    if (ib->producer) {
        rd_kafka_destroy(ib->producer);
        ib->producer = NULL;
    }
    ib->n_lags = ib->assigned = 0;
    return make_kafka(ib, err, errlen);
}

/* ---------------------------------------------------------------- one message */

struct incoming {
    rd_kafka_message_t *m;
    rd_kafka_headers_t *hdrs;
    const char *topic;
    char partition[16], offset[24], received[24];
    char *event_id, *event_type;
    char *headers_json; /* all headers as one JSON object (text values; the last one of a name) */
    char *payload;      /* the value as text, NULL for an empty value */
    json_t *payload_doc;
    struct strbuf key;
    const char *unusable; /* why it cannot be applied (no dedupe key, not JSON), or NULL */
    char why[512];
};

static void incoming_init(struct incoming *in, rd_kafka_message_t *m, const struct inbox_config *cfg)
{
    memset(in, 0, sizeof(*in));
    in->m = m;
    strbuf_init(&in->key);
    in->topic = rd_kafka_topic_name(m->rkt);
    snprintf(in->partition, sizeof(in->partition), "%d", (int)m->partition);
    snprintf(in->offset, sizeof(in->offset), "%lld", (long long)m->offset);
    snprintf(in->received, sizeof(in->received), "%lld", (long long)wall_ms());
    if (rd_kafka_message_headers(m, &in->hdrs) != 0)
        in->hdrs = NULL;
    in->event_id = inbox_event_id(cfg, in->hdrs);
    in->event_type = inbox_header(in->hdrs, "event_type");
    if (!in->event_type) /* a CloudEvents producer's */
        in->event_type = inbox_header(in->hdrs, "ce_type");
    json_t *h = json_object();
    const char *name;
    const void *val;
    size_t len;
    for (size_t i = 0; in->hdrs && rd_kafka_header_get_all(in->hdrs, i, &name, &val, &len) == 0; i++) {
        json_t *v = val ? json_stringn(val, len) : json_null();
        json_object_set_new(h, name, v ? v : json_null()); /* not UTF-8: null */
    }
    in->headers_json = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (m->payload && m->len) {
        in->payload = xstrndup(m->payload, m->len);
        in->payload_doc = json_loadb(m->payload, m->len, JSON_DECODE_ANY, NULL);
    }
    if (inbox_dedupe_key(cfg, in->hdrs, in->payload_doc, &in->key, in->why, sizeof(in->why)) != 0)
        in->unusable = in->why;
    else if (in->payload && !in->payload_doc)
        in->unusable = "the value is not JSON (the handler takes jsonb)";
}

static void incoming_destroy(struct incoming *in)
{
    free(in->event_id);
    free(in->event_type);
    free(in->headers_json);
    free(in->payload);
    json_decref(in->payload_doc);
    strbuf_destroy(&in->key);
}

/* The insert's parameters: key, handler, event id, type, topic, partition, offset,
 * attempts, received, error. */
static void insert_params(const struct inbox *ib, const struct incoming *in, const char *attempts, const char *error,
                          const char **params)
{
    params[0] = in->key.buf;
    params[1] = ib->cfg->name;
    params[2] = in->event_id;
    params[3] = in->event_type;
    params[4] = in->topic;
    params[5] = in->partition;
    params[6] = in->offset;
    params[7] = attempts;
    params[8] = in->received;
    params[9] = error;
}

/* One transaction for in[0..n), sent in one pipeline (one round trip, one WAL flush):
 * BEGIN, per message the apply statement (its dedupe record, and the handler if the record
 * is new), COMMIT. DONE_APPLIED: all committed (fresh[i] says which were applied).
 * RETRY_HANDLER: message *bad failed and nothing was committed (the caller commits the
 * ones before it in a shorter run, then retries that one alone: the order of effects stays
 * the order of messages). RETRY_TRANSIENT: nothing committed, nothing said about the
 * messages. */
static enum outcome apply_run(struct inbox *ib, struct incoming *in, int n, int attempt, int *fresh, int *bad)
{
    char attempts[16];
    snprintf(attempts, sizeof(attempts), "%d", attempt + 1);
    int transient = 0;
    int64_t t0 = mono_us();
    if (!ib->prepared) {
        PGresult *res = PQprepare(ib->conn, "inbox_apply", ib->apply_sql, 14, NULL);
        int ok = pgconn_result_ok(res);
        if (!ok)
            failure(ib, res, &transient);
        PQclear(res);
        if (!ok)
            return transient ? RETRY_TRANSIENT : RETRY_HANDLER;
        ib->prepared = 1;
    }
    memset(fresh, 0, (size_t)n * sizeof(*fresh));
    char **keys = xcalloc((size_t)n, sizeof(*keys));
    int sent = PQenterPipelineMode(ib->conn) && PQsendQueryParams(ib->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0);
    for (int i = 0; sent && i < n; i++) {
        const char *params[14];
        insert_params(ib, &in[i], attempts, NULL, params);
        keys[i] = in[i].m->key ? xstrndup(in[i].m->key, in[i].m->key_len) : NULL;
        params[9] = in[i].event_id && inbox_is_uuid(in[i].event_id) ? in[i].event_id : NULL;
        params[10] = in[i].event_type;
        params[11] = keys[i];
        params[12] = in[i].payload_doc ? in[i].payload : NULL;
        params[13] = in[i].headers_json;
        sent = PQsendQueryPrepared(ib->conn, "inbox_apply", 14, params, NULL, NULL, 0);
    }
    sent = sent && PQsendQueryParams(ib->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) && PQpipelineSync(ib->conn);
    for (int i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    /* results: BEGIN, n applies, COMMIT, each followed by NULL; then the sync */
    int failed = !sent, step = 0, synced = 0;
    *bad = -1;
    if (!sent)
        failure(ib, NULL, &transient);
    while (sent && !synced) {
        PGresult *res = PQgetResult(ib->conn);
        if (!res) {
            if (PQstatus(ib->conn) != CONNECTION_OK) {
                failed = 1;
                failure(ib, NULL, &transient);
                break;
            }
            step++;
            continue;
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_PIPELINE_SYNC) {
            synced = 1;
        } else if (st == PGRES_PIPELINE_ABORTED) {
            failed = 1;
        } else if (!pgconn_result_ok(res)) {
            if (!failed) { /* the first error: later statements are aborted */
                failure(ib, res, &transient);
                *bad = step >= 1 && step <= n ? step - 1 : -1;
            }
            failed = 1;
        } else if (step >= 1 && step <= n) {
            fresh[step - 1] = PQntuples(res) == 1 && atoi(PQgetvalue(res, 0, 0)) == 1;
        }
        PQclear(res);
    }
    if (PQpipelineStatus(ib->conn) != PQ_PIPELINE_OFF && !PQexitPipelineMode(ib->conn) && !failed) {
        failed = 1;
        failure(ib, NULL, &transient);
    }
    if (failed) {
        rollback(ib);
        if (*bad < 0) /* BEGIN or COMMIT failed, or the connection: nothing about a message */
            transient = 1;
        return transient ? RETRY_TRANSIENT : RETRY_HANDLER;
    }
    ib->committed += n;
#ifdef OUTBOX_TEST_HOOKS
    if (ib->kill_after_commit && ib->committed >= ib->kill_after_commit) {
        log_warn("test hook: SIGKILL after a commit (%ld messages committed), before storing the offsets",
                 ib->committed);
        raise(SIGKILL);
    }
#endif
    double per_message = (double)(mono_us() - t0) / 1e6 / n;
    for (int i = 0; i < n; i++) {
        ib->messages[fresh[i] ? APPLIED : DUPLICATE]++;
        if (!fresh[i]) {
            log_debug("inbox: %s/%s/%s key %s: duplicate", in[i].topic, in[i].partition, in[i].offset, in[i].key.buf);
            continue;
        }
        histogram_observe(&ib->handler_time, per_message);
        rd_kafka_timestamp_type_t tstype;
        int64_t ts = rd_kafka_message_timestamp(in[i].m, &tstype);
        if (ts > 0)
            histogram_observe(&ib->completion, (double)(wall_ms() - ts) / 1000.0);
    }
    return DONE_APPLIED;
}

/* Sends the message to the dead-letter topic (when set) and records it FAILED. 0, or 1
 * when asked to stop first (the message is then delivered again after a restart). */
static int dead_letter(struct inbox *ib, struct incoming *in, const char *error, int attempts)
{
    if (ib->producer) {
        for (;;) {
            rd_kafka_headers_t *h = in->hdrs ? rd_kafka_headers_copy(in->hdrs) : rd_kafka_headers_new(4);
            rd_kafka_header_add(h, "inbox_error", -1, error, -1);
            rd_kafka_header_add(h, "inbox_source", -1, in->topic, -1);
            char where[64], n[16];
            snprintf(where, sizeof(where), "%s/%s", in->partition, in->offset);
            snprintf(n, sizeof(n), "%d", attempts);
            rd_kafka_header_add(h, "inbox_source_offset", -1, where, -1);
            rd_kafka_header_add(h, "inbox_attempts", -1, n, -1);
            ib->dlq_done = 0;
            rd_kafka_resp_err_t e = rd_kafka_producev(
                ib->producer, RD_KAFKA_V_TOPIC(ib->cfg->dead_letter_topic),
                RD_KAFKA_V_KEY(in->m->key, in->m->key_len), RD_KAFKA_V_VALUE(in->m->payload, in->m->len),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
            if (e) {
                rd_kafka_headers_destroy(h);
                ib->dlq_err = e;
            } else {
                while (!ib->dlq_done && !*ib->stop) {
                    rd_kafka_poll(ib->producer, 100);
                    publish(ib, 0);
                }
            }
            if (*ib->stop && !ib->dlq_done)
                return 1;
            if (!ib->dlq_err)
                break;
            log_warn("dead letter: %s/%s/%s to %s failed: %s; retrying", in->topic, in->partition, in->offset,
                     ib->cfg->dead_letter_topic, rd_kafka_err2str(ib->dlq_err));
            if (pause_ms(ib, ib->cfg->retry_backoff_max_ms))
                return 1;
        }
    }
    char n[16];
    snprintf(n, sizeof(n), "%d", attempts);
    if (!in->key.len) /* no dedupe key: recorded under the message's position */
        strbuf_printf(&in->key, "%s/%s/%s", in->topic, in->partition, in->offset);
    const char *params[10];
    insert_params(ib, in, n, error, params);
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    for (;;) {
        if (ensure_connected(ib))
            return 1;
        int transient = 0;
        PGresult *res = statement(ib, ib->fail_sql, 10, params, &transient);
        if (res) {
            PQclear(res);
            break;
        }
        log_warn("dead letter: recording %s/%s/%s as FAILED: %s", in->topic, in->partition, in->offset, ib->last_error);
        if (pause_ms(ib, backoff_next(&b)))
            return 1;
    }
    ib->messages[ib->producer ? DEAD_LETTERED : FAILED]++;
    log_error("inbox: %s/%s/%s (key %s) %s after %d attempt%s: %s", in->topic, in->partition, in->offset,
              in->key.buf, ib->producer ? "dead-lettered" : "recorded FAILED", attempts, attempts == 1 ? "" : "s",
              error);
    return 0;
}

/* Applies one message alone, with retries and backoff, dead-lettering it after
 * INBOX_MAX_ATTEMPTS handler failures (its first failure, in a run, counts). 0 when done,
 * 1 when asked to stop first. */
static int handle_one(struct inbox *ib, struct incoming *in, int attempt)
{
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    for (;;) {
        if (attempt > 0) {
            ib->handler_failures++;
            log_warn("inbox: %s/%s/%s key %s: attempt %d of %d failed: %s", in->topic, in->partition, in->offset,
                     in->key.buf, attempt, ib->cfg->max_attempts, ib->last_error);
            if (attempt >= ib->cfg->max_attempts)
                return dead_letter(ib, in, ib->last_error, attempt);
            if (pause_ms(ib, backoff_next(&b)))
                return 1;
        }
        for (;;) {
            if (ensure_connected(ib))
                return 1;
            int fresh, bad;
            enum outcome o = apply_run(ib, in, 1, attempt, &fresh, &bad);
            if (o == DONE_APPLIED)
                return 0;
            if (o == RETRY_HANDLER)
                break;
            ib->transient_errors++;
            log_warn("inbox: %s/%s/%s: transient error, retrying: %s", in->topic, in->partition, in->offset,
                     ib->last_error);
            if (pause_ms(ib, backoff_next(&b)))
                return 1;
        }
        attempt++;
    }
}

/* Applies a batch of messages in order: runs of good messages in one transaction each, a
 * message without a dedupe key or with a value that is not JSON dead-lettered in its
 * place. Returns how many (a prefix) are done: their offsets may be stored. */
static int handle_batch(struct inbox *ib, struct incoming *in, int n)
{
    int fresh[INBOX_BATCH_MAX];
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    int i = 0;
    while (i < n && !*ib->stop) {
        if (in[i].unusable) {
            if (dead_letter(ib, &in[i], in[i].unusable, 0))
                return i;
            i++;
            continue;
        }
        int j = i;
        while (j < n && !in[j].unusable)
            j++;
        if (ensure_connected(ib))
            return i;
        int bad;
        enum outcome o = apply_run(ib, &in[i], j - i, 0, fresh, &bad);
        if (o == DONE_APPLIED) {
            i = j;
            backoff_reset(&b);
        } else if (o == RETRY_TRANSIENT) {
            ib->transient_errors++;
            log_warn("inbox: transient error, retrying %d messages: %s", j - i, ib->last_error);
            if (pause_ms(ib, backoff_next(&b)))
                return i;
        } else {
            /* commit the ones before it (if that fails, start over from i), then take it
             * alone: its failure in the run was its first attempt */
            if (bad > 0) {
                int upto = bad;
                if (apply_run(ib, &in[i], upto, 0, fresh, &bad) != DONE_APPLIED)
                    continue;
                i += upto;
            }
            if (handle_one(ib, &in[i], 1))
                return i;
            i++;
        }
    }
    return i;
}

/* The offsets after msgs[0..n), all applied: a partition's later message stores over an
 * earlier one. A partition revoked meanwhile refuses: its new owner reads the message
 * again, a duplicate. */
static void store_offsets(struct inbox *ib, rd_kafka_message_t **msgs, int n)
{
    if (n == 0)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(msgs[i]->rkt), msgs[i]->partition)->offset =
            msgs[i]->offset + 1;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(ib->consumer, l);
    if (e)
        log_debug("kafka: offsets not stored: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

/* ---------------------------------------------------------------- run */

int inbox_run(const struct inbox_config *cfg, volatile sig_atomic_t *stop)
{
    struct inbox *ib = xcalloc(1, sizeof(*ib));
    ib->cfg = cfg;
    ib->stop = stop;
    histogram_init(&ib->completion, completion_bounds, ARRAY_LEN(completion_bounds));
    histogram_init(&ib->handler_time, handler_bounds, ARRAY_LEN(handler_bounds));
#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("INBOX_TESTHOOK_KILL_AFTER_COMMIT");
    ib->kill_after_commit = hook ? atol(hook) : 0;
#endif
    char err[1024];
    int code = OUTBOX_EXIT_OK;
    if (cfg->http_addr[0] && !(ib->http = http_new(cfg->http_addr, err, sizeof(err)))) {
        log_error("http: %s", err);
        code = OUTBOX_EXIT_USAGE;
        goto out;
    }
    publish(ib, 1);
    if (ensure_connected(ib))
        goto out;
    ib->pg_reconnects = 0;
    if (inbox_resolve(ib->conn, cfg, &ib->function, err, sizeof(err)) != 0) {
        log_error("%s", err);
        code = OUTBOX_EXIT_FAILED;
        goto out;
    }
    build_statements(ib);
    if (make_kafka(ib, err, sizeof(err)) != 0) {
        log_error("%s", err);
        code = OUTBOX_EXIT_USAGE;
        goto out;
    }
    log_info("inbox: consuming %s in group %s into %s with %s (dedupe key: %s)", cfg->topics,
             has_prop(cfg, "group.id") ? "(INBOX_KAFKA_GROUP_ID)" : "outbox-inbox.<INBOX_NAME>", cfg->table,
             cfg->handler, cfg->n_key_parts ? cfg->dedupe_key
                           : strcmp(cfg->event_id_header, "auto") == 0 ? "event_id, else id, else ce_source + ce_id"
                                                                        : cfg->event_id_header);
    ib->last_retention = mono_ms() - RETENTION_EVERY_MS + 5000;
    rd_kafka_message_t *batch[INBOX_BATCH_MAX];
    struct incoming *in = xcalloc(INBOX_BATCH_MAX, sizeof(*in));
    while (!*stop) {
        if (ib->kafka_recreate && remake_kafka(ib, err, sizeof(err)) != 0) {
            log_error("%s", err);
            code = OUTBOX_EXIT_USAGE;
            break;
        }
        publish(ib, 0);
        retention(ib);
        /* a batch: what the consumer has ready, up to INBOX_BATCH_SIZE, waiting only for the first */
        int n = 0;
        for (rd_kafka_message_t *m; n < cfg->batch_size && (m = rd_kafka_consumer_poll(ib->consumer, n ? 0 : 200));) {
            if (!m->err) {
                batch[n++] = m;
                continue;
            }
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                log_warn("kafka: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
        }
        for (int i = 0; i < n; i++)
            incoming_init(&in[i], batch[i], cfg);
        int done = handle_batch(ib, in, n);
        store_offsets(ib, batch, done);
        for (int i = 0; i < n; i++) {
            incoming_destroy(&in[i]);
            rd_kafka_message_destroy(batch[i]);
        }
    }
    free(in);
    log_info("inbox: stopping: committing offsets and leaving the group");
out:
    if (ib->consumer) {
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(ib->consumer);
        if (e)
            log_warn("kafka: closing the consumer: %s", rd_kafka_err2str(e));
        rd_kafka_destroy(ib->consumer);
    }
    if (ib->producer) {
        rd_kafka_flush(ib->producer, 5000);
        rd_kafka_destroy(ib->producer);
    }
    log_info("inbox stopped: %llu applied, %llu duplicates, %llu dead-lettered, %llu failed",
             (unsigned long long)ib->messages[APPLIED], (unsigned long long)ib->messages[DUPLICATE],
             (unsigned long long)ib->messages[DEAD_LETTERED], (unsigned long long)ib->messages[FAILED]);
    if (ib->conn)
        PQfinish(ib->conn);
    http_free(ib->http);
    free(ib->apply_sql);
    free(ib->fail_sql);
    free(ib->function);
    free(ib->retention_sql);
    free(ib->kafka_secrets_seen);
    free(ib);
    return code;
}
