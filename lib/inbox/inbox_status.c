/* outbox-inbox's /metrics and /status, and the pauses that keep them fresh (inbox_int.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inbox/inbox_int.h"
#include "core/log.h"

static const char *const result_names[] = {"applied", "duplicate", "dead_lettered", "failed"};

void inbox_publish(struct inbox *ib, int force)
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
    for (int r = 0; r < INBOX_RESULTS; r++)
        strbuf_printf(&o, "inbox_messages_total{result=\"%s\"} %llu\n", result_names[r],
                      (unsigned long long)ib->messages[r]);
    metrics_counter(&o, "inbox_handler_failures_total", "Handler attempts that failed (each retry counts).",
                    ib->handler_failures);
    metrics_counter(&o, "inbox_transient_errors_total",
                    "Transient database errors (connection lost, serialization failure, deadlock, read-only), "
                    "retried without counting an attempt.",
                    ib->transient_errors);
    metrics_counter(&o, "inbox_pg_reconnects_total", "PostgreSQL connections made after the first.",
                    ib->pg_reconnects);
    metrics_counter(&o, "inbox_retention_deleted_total", "Inbox rows deleted by INBOX_RETENTION.",
                    ib->retention_deleted);
    metrics_gauge(&o, "inbox_pg_connected", "1 while connected to PostgreSQL.", ib->conn ? 1 : 0);
    int n_lags = 0, assigned = ib->src ? ib->src->ops->assigned(ib->src) : 0;
    const struct source_lag *lag = ib->src ? ib->src->ops->lags(ib->src, &n_lags) : NULL;
    metrics_gauge(&o, "inbox_assigned_partitions", "Partitions assigned to this consumer.", assigned);
    metrics_head(&o, "inbox_consumer_lag", "gauge",
                 "Messages behind the high watermark per assigned partition (librdkafka statistics, every 5 s).");
    for (int i = 0; i < n_lags; i++) {
        strbuf_puts(&o, "inbox_consumer_lag{topic=\"");
        metrics_label_value(&o, lag[i].topic);
        strbuf_printf(&o, "\",partition=\"%d\"} %lld\n", (int)lag[i].partition, (long long)lag[i].lag);
    }
    metrics_histogram(&o, "inbox_completion_seconds",
                      "From the message's Kafka timestamp (an outbox row's created_at) to the commit applying it.",
                      &ib->completion);
    metrics_histogram(&o, "inbox_handler_seconds", "Time of the transaction applying one new message.",
                      &ib->handler_time);

    json_t *lags = json_array();
    for (int i = 0; i < n_lags; i++)
        json_array_append_new(lags, json_pack("{s:s,s:i,s:I}", "topic", lag[i].topic, "partition",
                                              (int)lag[i].partition, "lag", (json_int_t)lag[i].lag));
    uint64_t all = ib->messages[INBOX_APPLIED] + ib->messages[INBOX_DUPLICATE] + ib->messages[INBOX_DEAD_LETTERED] + ib->messages[INBOX_FAILED];
    json_t *doc = json_pack("{s:s,s:s,s:s,s:s,s:b,s:i,s:{s:I,s:I,s:I,s:I},s:f,s:o,s:s}", "table", ib->cfg->table,
                            "handler", ib->cfg->handler, "name", ib->cfg->name, "topics", ib->cfg->topics,
                            "pg_connected", ib->conn != NULL, "assigned_partitions", assigned, "messages",
                            "applied", (json_int_t)ib->messages[INBOX_APPLIED], "duplicate", (json_int_t)ib->messages[INBOX_DUPLICATE],
                            "dead_lettered", (json_int_t)ib->messages[INBOX_DEAD_LETTERED], "failed",
                            (json_int_t)ib->messages[INBOX_FAILED], "idempotency_hit_rate",
                            all ? (double)ib->messages[INBOX_DUPLICATE] / (double)all : 0.0, "lag", lags, "last_error",
                            ib->last_error);
    char *status = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(doc);
    http_publish(ib->http, o.buf, status ? status : "{}", ib->conn != NULL);
    free(status);
    strbuf_destroy(&o);
}

/* Sleeps ms in short steps, keeping the HTTP snapshot fresh; 1 if asked to stop. */
int inbox_pause_ms(struct inbox *ib, int ms)
{
    int64_t until = mono_ms() + ms;
    while (!*ib->stop && mono_ms() < until) {
        inbox_publish(ib, 0);
        usleep(50000);
    }
    return *ib->stop != 0;
}
