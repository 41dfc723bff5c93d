/* Reporting: why the backlog is not moving (stall diagnosis), the metrics and /status
 * document published to the HTTP endpoint, and the periodic log line. */
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

#ifndef OUTBOX_VERSION
#define OUTBOX_VERSION "dev"
#endif

#define LOG_INTERVAL_S 10.0
#define PUBLISH_INTERVAL_S 0.5
#define STALL_AFTER_MS 30000

/* Why the backlog is not moving, or NULL. */
static const char *stall_reason(struct relay *r)
{
    int64_t now = mono_ms();
    if (r->m.marked_total != r->report.last_progress_marked ||
        (r->m.pending_rows == 0 && r->win.n == 0)) {
        r->report.last_progress_marked = r->m.marked_total;
        r->report.last_progress_ms = now;
        return NULL;
    }
    if (now - r->report.last_progress_ms < STALL_AFTER_MS)
        return NULL;
    if (!pgconn_connected(r->worker))
        return "postgres_unreachable";
    if (sink_brokers_up(r->sink) == 0)
        return "kafka_unreachable";
    if (r->m.lease_partitions_unowned > 0)
        return "lease_partitions_unowned";
    if (r->paused.n)
        return "topic_paused";
    if (r->m.failed_rows > 0)
        return "parked_key";
    if (r->m.long_tx_pid || r->m.long_tx_xid[0])
        return "long_transaction";
    if (r->m.xmin_holder_seconds > 0)
        return "xmin_horizon_held";
    return "unknown";
}

static void render_status(struct relay *r, struct strbuf *o)
{
    struct metrics *m = &r->m;
    strbuf_printf(o, "{\"version\":\"%s\",\"relay\":", OUTBOX_VERSION);
    strbuf_json_string(o, r->cfg->relay_name, strlen(r->cfg->relay_name));
    strbuf_puts(o, ",\"table\":");
    strbuf_json_string(o, r->cfg->table, strlen(r->cfg->table));
    strbuf_printf(o,
                  ",\"state\":{\"postgres_connected\":%s,\"kafka_brokers_up\":%d,"
                  "\"degraded\":%s,\"stall_reason\":%s%s%s,\"shutting_down\":%s},",
                  m->pg_connected ? "true" : "false", m->kafka_brokers_up,
                  m->degraded ? "true" : "false", m->stall_reason ? "\"" : "",
                  m->stall_reason ? m->stall_reason : "null", m->stall_reason ? "\"" : "",
                  r->mode == MODE_DRAINING ? "true" : "false");
    strbuf_printf(o,
                  "\"backlog\":{\"pending_rows\":%lld,\"pending_rows_exact\":%s,"
                  "\"oldest_pending_age_seconds\":%.3f,\"failed_rows\":%lld,\"inflight_rows\":%lld},",
                  (long long)m->pending_rows, m->pending_rows_exact ? "true" : "false",
                  m->oldest_pending_age_seconds, (long long)m->failed_rows,
                  (long long)m->inflight_rows);
    strbuf_printf(o,
                  "\"flow\":{\"published_total\":%llu,\"marked_total\":%llu,\"parked_total\":%llu,"
                  "\"possible_duplicates_total\":%llu,\"latency_p50_seconds\":%.4f,"
                  "\"latency_p99_seconds\":%.4f},",
                  (unsigned long long)m->published_total, (unsigned long long)m->marked_total,
                  (unsigned long long)m->parked_total,
                  (unsigned long long)m->possible_duplicates_total,
                  histogram_quantile(&m->latency, 0.5), histogram_quantile(&m->latency, 0.99));
    strbuf_puts(o, "\"paused_topics\":[");
    for (size_t i = 0; i < r->paused.n; i++) {
        if (i)
            strbuf_puts(o, ",");
        strbuf_json_string(o, r->paused.topic[i].name, strlen(r->paused.topic[i].name));
    }
    strbuf_puts(o, "],\"long_transaction\":");
    if (m->long_tx_pid || m->long_tx_xid[0]) {
        strbuf_printf(o, "{\"pid\":%d,\"age_seconds\":%.1f,\"xid\":", m->long_tx_pid,
                      m->long_tx_age_seconds);
        strbuf_json_string(o, m->long_tx_xid, strlen(m->long_tx_xid));
        strbuf_puts(o, ",\"application_name\":");
        strbuf_json_string(o, m->long_tx_application, strlen(m->long_tx_application));
        strbuf_puts(o, "}");
    } else {
        strbuf_puts(o, "null");
    }
    strbuf_puts(o, ",\"xmin_horizon_held\":");
    if (m->xmin_holder_seconds > 0) {
        strbuf_puts(o, "{\"kind\":");
        strbuf_json_string(o, m->xmin_holder_kind, strlen(m->xmin_holder_kind));
        strbuf_puts(o, ",\"name\":");
        strbuf_json_string(o, m->xmin_holder_name, strlen(m->xmin_holder_name));
        strbuf_printf(o, ",\"seconds\":%.1f}", m->xmin_holder_seconds);
    } else {
        strbuf_puts(o, "null");
    }
    /* keep mode: W of each partition the relay holds and knows, live (the table's lags by up
     * to KEEP_SAVE_MS) */
    strbuf_puts(o, ",\"watermarks\":");
    if (r->cfg->keep) {
        strbuf_puts(o, "{");
        int64_t w;
        for (int p = 0, n = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
            if (keep_w_known(r, p, &w))
                strbuf_printf(o, "%s\"%d\":%lld", n++ ? "," : "", p, (long long)w);
        strbuf_puts(o, "}");
    } else {
        strbuf_puts(o, "null");
    }
    strbuf_puts(o, "}\n");
}

static void publish_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    struct metrics *m = &r->m;
    m->inflight_rows = (int64_t)r->win.n;
    m->lease_partitions_held = lease_held(r);
    m->pg_connected = pgconn_connected(r->worker);
    m->kafka_brokers_up = sink_brokers_up(r->sink);
    m->topic_partition_changes_total = sink_partition_changes(r->sink);
    m->unconfirmed_deliveries_total = sink_unconfirmed(r->sink);
    struct sink_txn_stats ts;
    sink_txn_stats(r->sink, &ts);
    m->eos_committed_total = ts.committed;
    m->eos_aborted_total = ts.aborted;
    m->eos_fenced_total = ts.fenced;
    if (ts.commit.n_bounds)
        m->eos_commit = ts.commit;
    m->eos_open_seconds = ts.open_since_ms ? (double)(mono_ms() - ts.open_since_ms) / 1000.0 : 0.0;
    m->n_paused_topics = r->paused.n < METRICS_MAX_PAUSED ? r->paused.n : METRICS_MAX_PAUSED;
    for (size_t i = 0; i < m->n_paused_topics; i++)
        snprintf(m->paused_topics[i], sizeof(m->paused_topics[i]), "%s", r->paused.topic[i].name);
    m->stall_reason = stall_reason(r);
    m->degraded = m->stall_reason != NULL || !m->pg_connected || m->kafka_brokers_up == 0;
    if (m->stall_reason != r->report.stall_logged) {
        if (m->stall_reason)
            log_warn("stalled: the backlog (%lld pending, oldest %.0fs) has not moved for %d s: %s",
                     (long long)m->pending_rows, m->oldest_pending_age_seconds,
                     STALL_AFTER_MS / 1000, m->stall_reason);
        else if (r->report.stall_logged)
            log_info("flowing again (was stalled: %s)", r->report.stall_logged);
        r->report.stall_logged = m->stall_reason;
    }
    if (!r->http)
        return;
    struct strbuf text, status;
    strbuf_init(&text);
    strbuf_init(&status);
    metrics_render(m, OUTBOX_VERSION, &text);
    render_status(r, &status);
    int ready = r->schema_logged && r->mode != MODE_DRAINING;
    if (r->cfg->ready_strict)
        ready = ready && m->pg_connected && m->kafka_brokers_up > 0;
    http_publish(r->http, text.buf, status.buf, ready);
    strbuf_destroy(&text);
    strbuf_destroy(&status);
}

static void log_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    if (r->m.marked_total == r->report.marked_logged && r->win.n == 0)
        return;
    log_info("relay: %llu rows recorded as sent (+%llu in %.0fs), %zu in flight, %lld pending, "
             "%llu parked, brokers up %d, postgres %s",
             (unsigned long long)r->m.marked_total,
             (unsigned long long)(r->m.marked_total - r->report.marked_logged), LOG_INTERVAL_S, r->win.n,
             (long long)r->m.pending_rows, (unsigned long long)r->m.parked_total,
             sink_brokers_up(r->sink), pgconn_connected(r->worker) ? "connected" : "disconnected");
    r->report.marked_logged = r->m.marked_total;
}

void status_init(struct relay *r)
{
    ev_timer_init(&r->report.log_timer, log_cb, LOG_INTERVAL_S, LOG_INTERVAL_S);
    r->report.log_timer.data = r;
    ev_timer_init(&r->report.publish_timer, publish_cb, 0.0, PUBLISH_INTERVAL_S);
    r->report.publish_timer.data = r;
}

void status_start(struct relay *r)
{
    r->report.last_progress_ms = mono_ms();
    ev_timer_start(r->loop, &r->report.log_timer);
    ev_timer_start(r->loop, &r->report.publish_timer);
}

void status_stop(struct relay *r)
{
    ev_timer_stop(r->loop, &r->report.log_timer);
    ev_timer_stop(r->loop, &r->report.publish_timer);
}
