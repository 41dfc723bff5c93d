/* outbox-relay audit: compares the outbox table with what Kafka holds.
 *
 * Bounded memory: the messages read are streamed into a temporary table of this session
 * (COPY, 10,000 rows at a time) and compared there by PostgreSQL; the rows of the window
 * are copied once into another temporary table, so every figure comes from one snapshot.
 * Only what fits a line (topics, partitions, the first lost rows) is kept here.
 *
 * No long transaction is held while Kafka is read (it would hold the xmin horizon back
 * for the relay): instead the audit takes the server's clock first ("the start") and
 * judges only rows marked SENT before it. Such a row was acknowledged by Kafka before the
 * start, so its message lies below the high watermarks read after the start. Rows marked
 * later, and PENDING rows, are counted but never called lost. */
#include "admin/audit.h"

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/kafka.h"
#include "sink/message.h"
#include "relay/outbox.h"
#include "pg/pgconn.h"
#include "relay/schema.h"
#include "core/util.h"

#include "admin/audit_int.h"

static PGresult *exec(struct audit *a, const char *sql, int nparams, const char *const *params)
{
    return pgconn_exec(a->conn, sql, nparams, params, a->err, a->errlen);
}

/* Runs a statement whose result is not needed; 0 or -1 with err. */
static int run(struct audit *a, const char *sql)
{
    PGresult *res = exec(a, sql, 0, NULL);
    PQclear(res);
    return res ? 0 : -1;
}

static struct topic *topic_find(struct audit *a, const char *name)
{
    for (int i = 0; i < a->n_topics; i++)
        if (strcmp(a->topics[i].name, name) == 0)
            return &a->topics[i];
    return NULL;
}

/* The topic a row is published to: its own column, or the template. Caller frees. */
static char *row_topic(const struct config *cfg, const char *topic, const char *aggregate_type,
                       const char *event_type)
{
    return topic ? xstrdup(topic) : message_topic(cfg->topic_template, aggregate_type, event_type);
}

/* The distinct topics the window's rows name (invalid names are parked rows: skipped). */
static int load_topics(struct audit *a, const char *table_q, const char *const *window)
{
    struct strbuf q;
    strbuf_init(&q);
    strbuf_printf(&q,
                  "SELECT DISTINCT topic, CASE WHEN topic IS NULL THEN aggregate_type END,"
                  " CASE WHEN topic IS NULL THEN event_type END FROM %s WHERE " WINDOW,
                  table_q);
    PGresult *res = exec(a, q.buf, 2, window);
    strbuf_destroy(&q);
    if (!res)
        return -1;
    for (int i = 0; i < PQntuples(res); i++) {
        char *name = row_topic(a->cfg, PQgetisnull(res, i, 0) ? NULL : PQgetvalue(res, i, 0),
                               PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
        if (!message_topic_valid(name) || topic_find(a, name)) {
            free(name);
            continue;
        }
        if (a->n_topics == MAX_TOPICS) {
            free(name);
            PQclear(res);
            return set_err(a->err, a->errlen, "the window's rows name more than %d topics: audit a "
                           "shorter window (--since/--until)", MAX_TOPICS);
        }
        a->topics[a->n_topics++].name = name;
    }
    PQclear(res);
    return 0;
}

static int make_consumer(struct audit *a)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char kerr[512];
    if (settings_kafka_apply(conf, a->cfg->kafka, a->cfg->n_kafka, a->err, a->errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    static const char *const consumer[][2] = {
        {"group.id", "outbox-relay-audit"}, /* assign() only: the group is never joined */
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "true"},
        {"auto.offset.reset", "earliest"},
        /* prefetch: librdkafka's defaults (64 MB queued per partition, 50 MB fetches) would
         * make memory grow with the partition count; 4 MB keeps the reader ahead of COPY */
        {"queued.max.messages.kbytes", "4096"},
        {"fetch.max.bytes", "4194304"},
    };
    for (size_t i = 0; i < ARRAY_LEN(consumer); i++)
        rd_kafka_conf_set(conf, consumer[i][0], consumer[i][1], kerr, sizeof(kerr));
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    if (!(a->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(a->err, a->errlen, "kafka: cannot create a consumer: %s", kerr);
    }
    return 0;
}

/* Partitions and watermarks of every topic, and where reading starts: the first offset
 * at or after --since (Kafka timestamps are the rows' created_at, or later with
 * LogAppendTime), else the low watermark. A partition whose low watermark is above 0 and
 * where reading starts at it may have lost messages of the window to retention. */
static int plan_partitions(struct audit *a, int64_t since_ms)
{
    for (int t = 0; t < a->n_topics; t++) {
        struct topic *tp = &a->topics[t];
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(a->rk, tp->name, NULL);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(a->rk, 0, rkt, &md, 10000);
        rd_kafka_topic_destroy(rkt);
        if (e)
            return set_err(a->err, a->errlen, "kafka: metadata of %s: %s", tp->name, rd_kafka_err2str(e));
        e = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
        tp->n_parts = e ? 0 : md->topics[0].partition_cnt;
        rd_kafka_metadata_destroy(md);
        if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || e == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
            log_warn("audit: topic %s does not exist: its SENT rows are lost", tp->name);
            continue;
        }
        if (e)
            return set_err(a->err, a->errlen, "kafka: topic %s: %s", tp->name, rd_kafka_err2str(e));
        tp->parts = xcalloc((size_t)tp->n_parts, sizeof(*tp->parts));
        rd_kafka_topic_partition_list_t *times = rd_kafka_topic_partition_list_new(tp->n_parts);
        for (int p = 0; p < tp->n_parts; p++) {
            struct part *pp = &tp->parts[p];
            e = rd_kafka_query_watermark_offsets(a->rk, tp->name, p, &pp->low, &pp->high, 10000);
            if (e) {
                rd_kafka_topic_partition_list_destroy(times);
                return set_err(a->err, a->errlen, "kafka: watermarks of %s/%d: %s", tp->name, p,
                               rd_kafka_err2str(e));
            }
            pp->start = pp->low;
            rd_kafka_topic_partition_list_add(times, tp->name, p)->offset = since_ms;
        }
        if (since_ms > 0 && tp->n_parts > 0) {
            e = rd_kafka_offsets_for_times(a->rk, times, 10000);
            for (int i = 0; !e && i < times->cnt; i++) {
                struct part *pp = &tp->parts[times->elems[i].partition];
                int64_t off = times->elems[i].offset; /* -1: no message that late */
                pp->start = off < 0 ? pp->high : off < pp->low ? pp->low : off;
            }
        }
        rd_kafka_topic_partition_list_destroy(times);
        if (e)
            return set_err(a->err, a->errlen, "kafka: offsets for --since in %s: %s", tp->name,
                           rd_kafka_err2str(e));
        for (int p = 0; p < tp->n_parts; p++) {
            struct part *pp = &tp->parts[p];
            pp->truncated = pp->low > 0 && pp->start == pp->low;
            pp->done = pp->start >= pp->high;
            a->to_read += pp->high - pp->start;
        }
    }
    return 0;
}

static int copy_flush(struct audit *a)
{
    if (!a->copy_rows)
        return 0;
    PGresult *res = PQexec(a->conn, "COPY outbox_audit_seen FROM STDIN");
    int ok = PQresultStatus(res) == PGRES_COPY_IN;
    PQclear(res);
    if (ok)
        ok = PQputCopyData(a->conn, a->copy.buf, (int)a->copy.len) == 1 && PQputCopyEnd(a->conn, NULL) == 1;
    while ((res = PQgetResult(a->conn))) {
        ok = ok && pgconn_result_ok(res);
        PQclear(res);
    }
    strbuf_reset(&a->copy);
    a->copy_rows = 0;
    if (!ok)
        return set_err(a->err, a->errlen, "cannot store the messages read: %s", PQerrorMessage(a->conn));
    return 0;
}

/* One message into the COPY buffer: event_id (a UUID, lower case; \N otherwise), topic,
 * partition, offset, timestamp, and whether it is the broker's append time. */
static int copy_message(struct audit *a, const rd_kafka_message_t *m, const char *topic)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val = NULL;
    size_t len = 0;
    char event_id[37] = "\\N";
    if (rd_kafka_message_headers(m, &hdrs) == 0 &&
        rd_kafka_header_get_last(hdrs, a->cfg->debezium ? "id" : "event_id", &val, &len) == 0 &&
        len == 36) {
        const char *v = val;
        int ok = 1;
        for (size_t i = 0; i < 36 && ok; i++) {
            char c = v[i] >= 'A' && v[i] <= 'F' ? (char)(v[i] - 'A' + 'a') : v[i];
            ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-';
            event_id[i] = c;
        }
        event_id[36] = '\0';
        if (!ok)
            strcpy(event_id, "\\N");
    }
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    strbuf_printf(&a->copy, "%s\t%s\t%d\t%lld\t%lld\t%s\n", event_id, topic, (int)m->partition,
                  (long long)m->offset, (long long)ts, tstype == RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME ? "t" : "f");
    return ++a->copy_rows >= COPY_ROWS ? copy_flush(a) : 0;
}

/* Reads every planned partition from its start up to its high watermark. */
static int read_topics(struct audit *a)
{
    rd_kafka_topic_partition_list_t *assign = rd_kafka_topic_partition_list_new(64);
    int left = 0;
    for (int t = 0; t < a->n_topics; t++)
        for (int p = 0; p < a->topics[t].n_parts; p++) {
            struct part *pp = &a->topics[t].parts[p];
            if (pp->done)
                continue;
            rd_kafka_topic_partition_list_add(assign, a->topics[t].name, p)->offset = pp->start;
            left++;
        }
    log_info("audit: reading %lld messages from %d partitions of %d topics", a->to_read, left, a->n_topics);
    rd_kafka_resp_err_t e = left ? rd_kafka_assign(a->rk, assign) : RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_topic_partition_list_destroy(assign);
    if (e)
        return set_err(a->err, a->errlen, "kafka: assign: %s", rd_kafka_err2str(e));
    int64_t last_msg = mono_ms(), last_progress = mono_ms();
    while (left > 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(a->rk, 1000);
        int64_t now = mono_ms();
        if (now - last_progress >= PROGRESS_S * 1000) {
            log_info("audit: read %lld of %lld messages (%lld%%)", a->read, a->to_read,
                     a->to_read ? a->read * 100 / a->to_read : 100);
            last_progress = now;
        }
        if (!m) {
            if (now - last_msg > STALL_S * 1000) {
                rd_kafka_assign(a->rk, NULL);
                return set_err(a->err, a->errlen, "kafka: no message for %d s with %d partitions "
                               "unread (%lld of %lld messages read)", STALL_S, left, a->read, a->to_read);
            }
            continue;
        }
        last_msg = now;
        struct topic *tp = m->rkt ? topic_find(a, rd_kafka_topic_name(m->rkt)) : NULL;
        struct part *pp = tp && m->partition >= 0 && m->partition < tp->n_parts ? &tp->parts[m->partition] : NULL;
        int rc = 0;
        if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            log_warn("audit: kafka: %s", rd_kafka_message_errstr(m));
        } else if (pp && !pp->done) {
            if (!m->err && m->offset < pp->high) { /* later messages came after the start */
                if (pp->truncated && m->offset - pp->start < a->cfg->max_inflight) {
                    rd_kafka_timestamp_type_t tstype;
                    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
                    pp->bound_ts = ts > pp->bound_ts ? ts : pp->bound_ts;
                    pp->read_any = 1;
                }
                tp->read++;
                a->read++;
                rc = copy_message(a, m, tp->name);
            }
            /* EOF carries the next offset to read; a message, its own */
            if ((m->err ? m->offset : m->offset + 1) >= pp->high) {
                pp->done = 1;
                left--;
            }
        }
        rd_kafka_message_destroy(m);
        if (rc)
            return -1;
    }
    rd_kafka_assign(a->rk, NULL);
    return copy_flush(a);
}

/* Per topic, the creation time after which it can verify. Rows created at or before it
 * whose message is missing are unverifiable: their message may have been among those
 * retention deleted. A partition's messages are in creation order only roughly (claims
 * run ahead by up to OUTBOX_MAX_INFLIGHT rows; late commits and replays come late), so the
 * bound is the latest timestamp among the first OUTBOX_MAX_INFLIGHT messages kept; the
 * topic takes the latest bound of its truncated partitions (the audit's start when such a
 * partition kept nothing). */
static void verified_windows(struct audit *a, int64_t start_ms)
{
    for (int t = 0; t < a->n_topics; t++) {
        struct topic *tp = &a->topics[t];
        for (int p = 0; p < tp->n_parts; p++) {
            const struct part *pp = &tp->parts[p];
            if (!pp->truncated)
                continue;
            int64_t from = pp->read_any ? pp->bound_ts : start_ms;
            if (from > tp->verified_from_ms)
                tp->verified_from_ms = from;
        }
    }
}

static int judge_missing(struct audit *a, struct report *r, const char *start)
{
    if (run(a, "BEGIN") != 0)
        return -1;
    const char *params[1] = {start};
    PGresult *res = exec(a, "DECLARE missing NO SCROLL CURSOR FOR SELECT id, ev, aggregate_id,"
                            " aggregate_type, event_type, topic, " OUTBOX_CREATED_MS("created_at") ", sent_at"
                            " FROM outbox_audit_rows r WHERE status = 'SENT' AND sent_at < $1::timestamptz"
                            " AND NOT EXISTS (SELECT 1 FROM outbox_audit_seen s WHERE s.event_id = r.ev)"
                            " ORDER BY id", 1, params);
    if (!res)
        return -1;
    PQclear(res);
    for (;;) {
        if (!(res = exec(a, "FETCH 1000 FROM missing", 0, NULL)))
            return -1;
        int n = PQntuples(res);
        for (int i = 0; i < n; i++) {
            char *name = row_topic(a->cfg, PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5),
                                   PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
            const struct topic *tp = topic_find(a, name);
            if (tp && pg_int(PQgetvalue(res, i, 6)) <= tp->verified_from_ms) {
                r->unverifiable++;
            } else {
                if (r->lost < SHOW_LOST)
                    log_error("audit: lost: row %s (event_id %s, key '%s') was marked SENT at %s and is "
                              "in no partition of %s", PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                              PQgetvalue(res, i, 2), PQgetvalue(res, i, 7), name);
                if (r->lost < LIST_LOST)
                    json_array_append_new(r->lost_rows,
                                          json_pack("{s:I,s:s,s:s,s:s}", "id", (json_int_t)pg_int(PQgetvalue(res, i, 0)),
                                                    "event_id", PQgetvalue(res, i, 1), "key",
                                                    PQgetvalue(res, i, 2), "topic", name));
                r->lost++;
            }
            free(name);
        }
        PQclear(res);
        if (n < 1000)
            break;
    }
    return run(a, "COMMIT");
}

static double number(PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? -1 : strtod(PQgetvalue(res, 0, col), NULL);
}

/* Every figure of the report, from the two temporary tables. */
static int compare(struct audit *a, struct report *r, const char *start)
{
    const char *params[1] = {start};
    PGresult *res = exec(a, "SELECT count(*), count(*) FILTER (WHERE status = 'SENT'),"
                            " count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'FAILED'),"
                            " count(*) FILTER (WHERE status = 'SENT' AND sent_at >= $1::timestamptz)"
                            " FROM outbox_audit_rows", 1, params);
    if (!res)
        return -1;
    r->committed = pg_int(PQgetvalue(res, 0, 0));
    r->sent = pg_int(PQgetvalue(res, 0, 1));
    r->pending = pg_int(PQgetvalue(res, 0, 2));
    r->parked = pg_int(PQgetvalue(res, 0, 3));
    r->sent_after_start = pg_int(PQgetvalue(res, 0, 4));
    PQclear(res);

    if (!(res = exec(a, "SELECT count(DISTINCT s.event_id), count(*) FROM outbox_audit_rows r"
                        " JOIN outbox_audit_seen s ON s.event_id = r.ev", 0, NULL)))
        return -1;
    r->delivered = pg_int(PQgetvalue(res, 0, 0));
    r->messages = pg_int(PQgetvalue(res, 0, 1));
    PQclear(res);
    a->other = a->read - r->messages;

    /* First delivery of each row (lowest partition, offset); per topic and key, first
     * deliveries must come in id order. */
    if (run(a, "CREATE TEMP TABLE outbox_audit_first AS SELECT DISTINCT ON (r.id) r.id, r.aggregate_id,"
               " r.created_at, r.sent_at, s.topic, s.part, s.off, s.ts, s.append_time"
               " FROM outbox_audit_rows r JOIN outbox_audit_seen s ON s.event_id = r.ev"
               " ORDER BY r.id, s.part, s.off") != 0)
        return -1;
    if (!(res = exec(a, "SELECT id, prev, aggregate_id, topic, count(*) OVER () FROM (SELECT id, topic,"
                        " aggregate_id, lag(id) OVER (PARTITION BY topic, aggregate_id ORDER BY part, off)"
                        " AS prev FROM outbox_audit_first) o WHERE prev > id ORDER BY id LIMIT 10", 0, NULL)))
        return -1;
    for (int i = 0; i < PQntuples(res); i++) {
        log_error("audit: order: row %s of key '%s' was first delivered to %s after row %s",
                  PQgetvalue(res, i, 0), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3), PQgetvalue(res, i, 1));
        r->order_violations = pg_int(PQgetvalue(res, i, 4));
    }
    PQclear(res);

    /* Completion: to the broker's append time when every first delivery carries one (a
     * topic with message.timestamp.type=LogAppendTime), else to the mark (an upper bound:
     * a row is marked SENT after Kafka acknowledged it). The relay sets the message's
     * CreateTime to created_at, which cannot measure it. */
    if (!(res = exec(a, "SELECT bool_and(append_time),"
                        " percentile_cont(0.5) WITHIN GROUP (ORDER BY ts - extract(epoch FROM created_at) * 1000),"
                        " percentile_cont(0.99) WITHIN GROUP (ORDER BY ts - extract(epoch FROM created_at) * 1000)"
                        " FROM outbox_audit_first", 0, NULL)))
        return -1;
    int append = !PQgetisnull(res, 0, 0) && PQgetvalue(res, 0, 0)[0] == 't';
    if (append) {
        r->p50 = number(res, 1);
        r->p99 = number(res, 2);
        r->measured_to = "kafka_append_time";
    }
    PQclear(res);
    if (!append) {
        if (!(res = exec(a, "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d),"
                            " percentile_cont(0.99) WITHIN GROUP (ORDER BY d) FROM (SELECT"
                            " extract(epoch FROM sent_at - created_at) * 1000 AS d FROM outbox_audit_rows"
                            " WHERE status = 'SENT' AND sent_at IS NOT NULL) x", 0, NULL)))
            return -1;
        r->p50 = number(res, 0);
        r->p99 = number(res, 1);
        r->measured_to = "marked_sent";
        PQclear(res);
    }
    return judge_missing(a, r, start);
}

/* The audit's consumer closed and its state freed. */
static void audit_free(struct audit *a)
{
    if (a->rk) {
        rd_kafka_consumer_close(a->rk);
        rd_kafka_destroy(a->rk);
    }
    for (int t = 0; t < a->n_topics; t++) {
        free(a->topics[t].name);
        free(a->topics[t].parts);
    }
    strbuf_destroy(&a->copy);
    free(a);
}

int audit_run(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen)
{
    struct audit *a = xcalloc(1, sizeof(*a));
    a->conn = conn;
    a->cfg = cfg;
    a->cmd = cmd;
    a->err = err;
    a->errlen = errlen;
    strbuf_init(&a->copy);
    struct report r = {.p50 = -1, .p99 = -1, .measured_to = "marked_sent", .lost_rows = json_array()};
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    free(table_q); /* rows are read through the layout's relation */
    table_q = schema_read_relation(cfg->table, cfg->debezium, cfg->keep);
    const char *window[2] = {cmd->since, cmd->until};
    char start[64] = "";
    int64_t start_ms = 0, since_ms = 0;
    int rc = OUTBOX_EXIT_USAGE; /* it cannot tell, until it can */
    struct strbuf q;
    strbuf_init(&q);

    /* The start first: every row marked SENT before it is acknowledged below the high
     * watermarks read next, and its topic is among those the next query finds. */
    PGresult *res = exec(a, "SELECT clock_timestamp()::text, (extract(epoch FROM clock_timestamp()) * 1000)::int8,"
                            " (extract(epoch FROM $1::timestamptz) * 1000)::int8", 1, window);
    if (!res)
        goto out;
    snprintf(start, sizeof(start), "%s", PQgetvalue(res, 0, 0));
    start_ms = pg_int(PQgetvalue(res, 0, 1));
    since_ms = PQgetisnull(res, 0, 2) ? 0 : pg_int(PQgetvalue(res, 0, 2));
    PQclear(res);
    if (load_topics(a, table_q, window) != 0 || make_consumer(a) != 0 || plan_partitions(a, since_ms) != 0)
        goto out;
    if (run(a, "DROP TABLE IF EXISTS pg_temp.outbox_audit_seen, pg_temp.outbox_audit_rows,"
               " pg_temp.outbox_audit_first;"
               "CREATE TEMP TABLE outbox_audit_seen (event_id text, topic text, part int, off int8, ts int8,"
               " append_time bool)") != 0)
        goto out;
    if (read_topics(a) != 0)
        goto out;
    verified_windows(a, start_ms);
    log_info("audit: read %lld messages; comparing with the table", a->read);
    if (run(a, "CREATE INDEX ON outbox_audit_seen (event_id); ANALYZE outbox_audit_seen") != 0)
        goto out;
    strbuf_printf(&q, "CREATE TEMP TABLE outbox_audit_rows AS SELECT id, event_id::text AS ev, aggregate_type,"
                      " aggregate_id, event_type, topic, status, created_at, sent_at FROM %s WHERE " WINDOW,
                  table_q);
    if (!(res = exec(a, q.buf, 2, window)))
        goto out;
    PQclear(res);
    if (run(a, "CREATE INDEX ON outbox_audit_rows (ev); ANALYZE outbox_audit_rows") != 0 ||
        compare(a, &r, start) != 0)
        goto out;
    audit_print_report(a, &r, out);
    log_info("audit: %s: %lld committed, %lld delivered, %lld lost, %lld unverifiable, %lld duplicates, "
             "%lld order violations", cfg->table, r.committed, r.delivered, r.lost, r.unverifiable,
             r.messages - r.delivered, r.order_violations);
    rc = r.lost || r.order_violations ? OUTBOX_EXIT_FAILED : OUTBOX_EXIT_OK;
    if (rc)
        set_err(err, errlen, "%lld row%s marked SENT in no partition, %lld first deliver%s out of its key's "
                "order", r.lost, r.lost == 1 ? "" : "s", r.order_violations, r.order_violations == 1 ? "y" : "ies");
out:
    if (rc == OUTBOX_EXIT_USAGE && PQtransactionStatus(conn) != PQTRANS_IDLE)
        PQclear(PQexec(conn, "ROLLBACK"));
    PQclear(PQexec(conn, "DROP TABLE IF EXISTS pg_temp.outbox_audit_seen, pg_temp.outbox_audit_rows,"
                         " pg_temp.outbox_audit_first"));
    json_decref(r.lost_rows);
    audit_free(a);
    strbuf_destroy(&q);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}
