/* The relay's metrics: its counters, gauges and histograms, rendered to Prometheus' text
 * exposition format with the core's helpers. */
#include "relay/relay_metrics.h"

#include <stddef.h>
#include <string.h>

/* Fine below 50 ms, where the latency target lives; coarse above. */
static const double latency_bounds[] = {0.001, 0.002,  0.003, 0.004, 0.005, 0.0075, 0.01,
                                        0.0125, 0.015, 0.0175, 0.02, 0.025, 0.03,   0.04,
                                        0.05,  0.075,  0.1,   0.25,  0.5,   1,      2.5,
                                        5,     10,     30,    60,    300};
static const double batch_bounds[] = {1, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

const char *failure_reason_name(enum failure_reason r)
{
    static const char *const names[] = {"row", "topic", "producer", "transient"};
    return r < FAILURE_REASONS ? names[r] : "unknown";
}

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    histogram_init(&m->latency, latency_bounds, ARRAY_LEN(latency_bounds));
    histogram_init(&m->batch_rows, batch_bounds, ARRAY_LEN(batch_bounds));
}

/* The plain counters, in exposition order. */
static const struct counter_def {
    const char *name, *help;
    size_t offset; /* of a uint64_t in struct metrics */
} counters[] = {
    {"outbox_claims_total", "Claim statements run.",
     offsetof(struct metrics, claims_total)},
    {"outbox_claims_from_bottom_total", "Claims that read every lease partition from the bottom of the pending index (the others start at proven floors above the rows already marked).",
     offsetof(struct metrics, claims_from_bottom_total)},
    {"outbox_floor_resets_total", "Times rows were put back below the claim floors (a reset, a lost lease, a held key or paused topic released, a requeue), so that the next claim read from the bottom.",
     offsetof(struct metrics, floor_resets_total)},
    {"outbox_claimed_rows_total", "Rows claimed.",
     offsetof(struct metrics, claimed_rows_total)},
    {"outbox_published_total", "Messages acknowledged by Kafka.",
     offsetof(struct metrics, published_total)},
    {"outbox_marked_total", "Rows marked SENT.",
     offsetof(struct metrics, marked_total)},
    {"outbox_parked_total", "Rows parked as FAILED.",
     offsetof(struct metrics, parked_total)},
    {"outbox_possible_duplicates_total", "Rows that may have been published more than once: after a failed delivery or a producer reset, and after a crash before marking, PENDING rows up to the highest id the last mark recorded as claimed (rows claimed after that mark are not counted).",
     offsetof(struct metrics, possible_duplicates_total)},
    {"outbox_producer_recreated_total", "Producers recreated after fatal errors.",
     offsetof(struct metrics, producer_recreated_total)},
    {"outbox_resets_total", "Pauses to settle in-flight deliveries after a failure.",
     offsetof(struct metrics, resets_total)},
    {"outbox_retention_deleted_total", "SENT rows deleted by retention.",
     offsetof(struct metrics, retention_deleted_total)},
    {"outbox_partitions_created_total", "OUTBOX_ON_SENT=keep, partitioned outbox: partitions made ahead of the identity.",
     offsetof(struct metrics, partitions_created_total)},
    {"outbox_partitions_dropped_total", "OUTBOX_ON_SENT=keep, partitioned outbox: partitions dropped by retention.",
     offsetof(struct metrics, partitions_dropped_total)},
    {"outbox_partitions_lost_total", "OUTBOX_ON_SENT=keep, partitioned outbox: partitions found dropped by someone else than the relay (rows in them above a watermark were never published).",
     offsetof(struct metrics, partitions_lost_total)},
    {"outbox_postgres_reconnects_total", "Lost PostgreSQL worker connections.",
     offsetof(struct metrics, pg_reconnects_total)},
    {"outbox_doorbell_wakeups_total", "Claims woken by a doorbell NOTIFY.",
     offsetof(struct metrics, doorbell_wakeups_total)},
    {"outbox_partition_share_held_back_total", "Claimed rows left PENDING because their Kafka partition held its share of the in-flight window (a partition without a leader, or a slow one).",
     offsetof(struct metrics, share_held_back_total)},
    {"outbox_topic_partition_changes_total", "Times a topic's partition count changed: per-key order across the change is not kept.",
     offsetof(struct metrics, topic_partition_changes_total)},
    {"outbox_unconfirmed_deliveries_total", "Deliveries Kafka's client reported done without an offset (acknowledged implicitly by a later request's success): no proof that the broker wrote them, so their rows were published again; each may be a duplicate (they count in outbox_possible_duplicates_total too).",
     offsetof(struct metrics, unconfirmed_deliveries_total)},
    {"outbox_lease_rebalances_total", "Times this relay handed partitions back to balance.",
     offsetof(struct metrics, lease_rebalances_total)},
    {"outbox_lease_takeovers_total", "Partitions taken over from a relay that did not release them.",
     offsetof(struct metrics, lease_takeovers_total)},
    {"outbox_lease_lost_total", "Partitions lost with the PostgreSQL session or deadline.",
     offsetof(struct metrics, lease_lost_total)},
    {"outbox_transactions_committed_total",
     "OUTBOX_EXACTLY_ONCE: Kafka transactions committed (their rows are recorded after).",
     offsetof(struct metrics, eos_committed_total)},
    {"outbox_transactions_aborted_total",
     "OUTBOX_EXACTLY_ONCE: Kafka transactions aborted (a message failed; their rows go again).",
     offsetof(struct metrics, eos_aborted_total)},
    {"outbox_producers_fenced_total",
     "OUTBOX_EXACTLY_ONCE: times a newer producer of the table's transactional.id fenced this relay's.",
     offsetof(struct metrics, eos_fenced_total)},
    {"outbox_progress_recovered_total",
     "OUTBOX_EXACTLY_ONCE: rows recorded from the progress record on taking the table over (committed "
     "to Kafka by an earlier producer, not recorded in PostgreSQL; not published again).",
     offsetof(struct metrics, eos_recovered_total)},
    {"outbox_progress_unconfirmed_total",
     "OUTBOX_EXACTLY_ONCE: recorded rows that left the progress record before every standby and "
     "physical replication slot had their record (one lagged by more than 6,000 rows): a failover "
     "to it publishes them again.",
     offsetof(struct metrics, eos_tail_unconfirmed_total)},
    {"outbox_progress_flush_nudges_total",
     "OUTBOX_EXACTLY_ONCE: transactions committed synchronously so that an idle server flushes "
     "the WAL past recorded rows still listed in the progress record.",
     offsetof(struct metrics, eos_tail_nudges_total)},
    {"outbox_watermark_gaps_total",
     "OUTBOX_ON_SENT=keep: rows the audit or retention found at or below a watermark that were never "
     "recorded as published (then published): 0 unless a writer broke the rule or the proof failed; alert on any.",
     offsetof(struct metrics, keep_gaps_total)},
    {"outbox_watermark_audits_total", "OUTBOX_ON_SENT=keep: lease partitions audited below their watermark.",
     offsetof(struct metrics, keep_audited_total)},
    {"outbox_watermark_audit_passes_total",
     "OUTBOX_ON_SENT=keep: whole audit passes of a lease partition (from its lowest row to its watermark).",
     offsetof(struct metrics, keep_audit_passes_total)},
    {"outbox_watermark_advances_total", "OUTBOX_ON_SENT=keep: lease partitions' watermarks moved up.",
     offsetof(struct metrics, keep_advances_total)},
    {"outbox_watermark_refused_total",
     "OUTBOX_ON_SENT=keep: acknowledged rows a mark could not record because this session no "
     "longer held their lease partition (fencing; their new holder publishes them again).",
     offsetof(struct metrics, keep_refused_total)},
};

/* The backlog's state: gauges, the stall reason, paused topics. */
static void render_state(const struct metrics *m, struct strbuf *o)
{
    metrics_gauge(o, "outbox_pending_rows",
          "PENDING rows in the outbox (exact up to the count cap, see outbox_pending_rows_exact).",
          (double)m->pending_rows);
    metrics_gauge(o, "outbox_pending_rows_exact",
          "1 if outbox_pending_rows is an exact count, 0 if it is an upper bound from ids.",
          m->pending_rows_exact);
    metrics_gauge(o, "outbox_oldest_pending_age_seconds",
          "Age of the oldest PENDING row (0 when there is none).", m->oldest_pending_age_seconds);
    metrics_gauge(o, "outbox_failed_rows", "Parked (FAILED) rows waiting for requeue.", (double)m->failed_rows);
    metrics_gauge(o, "outbox_inflight_rows", "Rows claimed and not yet marked SENT.", (double)m->inflight_rows);
    metrics_gauge(o, "outbox_postgres_connected", "1 if the worker connection to PostgreSQL is up.",
          m->pg_connected);
    metrics_gauge(o, "outbox_kafka_brokers_up", "Kafka brokers the producer is connected to.",
          m->kafka_brokers_up);
    metrics_gauge(o, "outbox_notify_queue_usage_ratio",
          "pg_notification_queue_usage(): fraction of the cluster-wide NOTIFY queue in use.",
          m->notify_queue_usage);
    metrics_gauge(o, "outbox_degraded",
          "1 if the relay cannot make progress (see outbox_stalled); the process stays alive.",
          m->degraded);

    metrics_head(o, "outbox_stalled", "gauge", "1 for the reason the backlog is not moving, if it is not.");
    static const char *const reasons[] = {"postgres_unreachable", "kafka_unreachable",
                                          "lease_partitions_unowned", "topic_paused",
                                          "parked_key", "long_transaction", "xmin_horizon_held",
                                          "unknown"};
    for (size_t i = 0; i < ARRAY_LEN(reasons); i++)
        strbuf_printf(o, "outbox_stalled{reason=\"%s\"} %d\n", reasons[i],
                      m->stall_reason && strcmp(m->stall_reason, reasons[i]) == 0);

    metrics_head(o, "outbox_topic_paused", "gauge", "1 for each topic paused by a topic-level error.");
    for (size_t i = 0; i < m->n_paused_topics; i++) {
        strbuf_puts(o, "outbox_topic_paused{topic=\"");
        metrics_label_value(o, m->paused_topics[i]);
        strbuf_puts(o, "\"} 1\n");
    }
}

/* What holds vacuum back: the oldest long transaction, a replication slot or standby. */
static void render_holders(const struct metrics *m, struct strbuf *o)
{
    metrics_head(o, "outbox_long_transaction_age_seconds", "gauge",
         "Age of the oldest transaction open longer than the threshold (holds back vacuum).");
    if (m->long_tx_pid || m->long_tx_age_seconds > 0) {
        strbuf_printf(o, "outbox_long_transaction_age_seconds{pid=\"%d\",xid=\"", m->long_tx_pid);
        metrics_label_value(o, m->long_tx_xid);
        strbuf_puts(o, "\",application_name=\"");
        metrics_label_value(o, m->long_tx_application);
        strbuf_puts(o, "\",usename=\"");
        metrics_label_value(o, m->long_tx_user);
        strbuf_printf(o, "\"} %.3f\n", m->long_tx_age_seconds);
    }

    metrics_head(o, "outbox_xmin_horizon_held_seconds", "gauge",
         "How long a replication slot or standby has held the xmin horizon older than any "
         "running transaction (holds back vacuum), once past the long-transaction threshold.");
    if (m->xmin_holder_seconds > 0) {
        strbuf_puts(o, "outbox_xmin_horizon_held_seconds{kind=\"");
        metrics_label_value(o, m->xmin_holder_kind);
        strbuf_puts(o, "\",name=\"");
        metrics_label_value(o, m->xmin_holder_name);
        strbuf_printf(o, "\"} %.3f\n", m->xmin_holder_seconds);
    }
}

static void render_leases(const struct metrics *m, struct strbuf *o)
{
    metrics_gauge(o, "outbox_proof_blocked",
                  "1 while the floors' proof cannot hold: the id's sequence has CACHE above 1 (every claim "
                  "reads from the bottom; keep mode's watermarks stop); see the log.",
                  m->proof_blocked);
    metrics_gauge(o, "outbox_proof_held_seconds",
                  "How long the floors' proof (and keep mode's watermarks) has waited for writers that "
                  "may hold a lower id (0 when nothing waits); the log names the oldest writer after 10 s.",
                  m->proof_held_seconds);
    metrics_gauge(o, "outbox_id_beyond_identity",
                  "The highest claimed id beyond the identity's last value (a row inserted with "
                  "OVERRIDING SYSTEM VALUE, COPY with ids, a restore), 0 when none; the proof stops "
                  "below it.",
                  (double)m->id_beyond_identity);
    metrics_gauge(o, "outbox_watermark_blocked",
                  "OUTBOX_ON_SENT=keep: 1 while the watermark's proof fails its check (see the log).",
                  m->keep_blocked);
    if (m->partitions_ahead >= 0)
        metrics_gauge(o, "outbox_partitions_ahead",
                      "OUTBOX_ON_SENT=keep, partitioned outbox: empty partitions above the identity; "
                      "a writer whose id finds none fails.",
                      (double)m->partitions_ahead);
    /* exported always (0 unless partitioned), so that an alert on it names a metric every relay has */
    metrics_gauge(o, "outbox_partitions_missing",
                  "OUTBOX_ON_SENT=keep, partitioned outbox: how many of the 2 partitions kept ahead of the "
                  "identity are missing (alert above 0: writers fail once none is left); 0 otherwise.",
                  m->partitions_ahead >= 0 && m->partitions_ahead < 2 ? (double)(2 - m->partitions_ahead) : 0.0);
    metrics_gauge(o, "outbox_published_records",
                  "OUTBOX_ON_SENT=keep: records of rows published above the watermarks of the "
                  "partitions this relay holds (they wait for a row below them).",
                  (double)m->keep_published_records);
    metrics_gauge(o, "outbox_watermark_lag_seconds",
                  "OUTBOX_ON_SENT=keep: age of the oldest record of published rows above the watermark "
                  "of a partition this relay holds, at the last advance (how long W has trailed what was "
                  "published; 0 when W has caught up).",
                  m->keep_lag_seconds);
    metrics_gauge(o, "outbox_watermark_audit_pass_seconds",
                  "OUTBOX_ON_SENT=keep: the longest of the last whole audit passes of the lease partitions "
                  "this relay holds (paced to end within a quarter of OUTBOX_RETENTION; 0 before the first).",
                  m->keep_audit_pass_seconds);
    metrics_gauge(o, "outbox_transaction_open_seconds",
                  "OUTBOX_EXACTLY_ONCE: age of the open Kafka transaction (0: none); read_committed "
                  "consumers of the partitions it wrote wait for it.", m->eos_open_seconds);
    metrics_gauge(o, "outbox_transaction_fence_seconds",
                  "OUTBOX_EXACTLY_ONCE: how long the last fence of older producers and read of the "
                  "progress record took (claims wait for it).", (double)m->eos_fence_ms / 1000.0);
    metrics_gauge(o, "outbox_progress_standby_rows",
                  "OUTBOX_EXACTLY_ONCE: rows recorded in PostgreSQL and kept in the progress record "
                  "until every standby and physical replication slot has their record.",
                  (double)m->eos_tail_rows);
    metrics_gauge(o, "outbox_lease_partitions_held", "Lease partitions this relay holds (of 64).",
          (double)m->lease_partitions_held);
    metrics_head(o, "outbox_lease_partitions_unowned", "gauge",
         "Lease partitions no relay of the table held at this relay's last scan (free, or "
         "locked by another session); nobody publishes them meanwhile.");
    strbuf_puts(o, "outbox_lease_partitions_unowned{table=\"");
    metrics_label_value(o, m->table ? m->table : "");
    strbuf_printf(o, "\"} %lld\n", (long long)m->lease_partitions_unowned);
    metrics_gauge(o, "outbox_lease_relays", "Relays of this table at the last scan (membership lock holders).",
          (double)m->lease_relays);
}

void metrics_render(const struct metrics *m, const char *version, struct strbuf *o)
{
    metrics_head(o, "outbox_build_info", "gauge", "Build information; always 1.");
    strbuf_puts(o, "outbox_build_info{version=\"");
    metrics_label_value(o, version);
    strbuf_puts(o, "\"} 1\n");
    render_state(m, o);
    render_holders(m, o);
    for (size_t i = 0; i < ARRAY_LEN(counters); i++)
        metrics_counter(o, counters[i].name, counters[i].help,
                        *(const uint64_t *)(const void *)((const char *)m + counters[i].offset));
    metrics_head(o, "outbox_publish_failures_total", "counter", "Failed deliveries by reason.");
    for (int r = 0; r < FAILURE_REASONS; r++)
        strbuf_printf(o, "outbox_publish_failures_total{reason=\"%s\"} %llu\n",
                      failure_reason_name((enum failure_reason)r),
                      (unsigned long long)m->publish_failures_total[r]);
    render_leases(m, o);
    metrics_histogram(o, "outbox_event_latency_seconds",
                      "Time from the row's created_at to the Kafka acknowledgement.", &m->latency);
    metrics_histogram(o, "outbox_claim_batch_rows", "Rows returned per claim.", &m->batch_rows);
    metrics_histogram(o, "outbox_transaction_commit_seconds",
                      "OUTBOX_EXACTLY_ONCE: from asking a transaction's commit to its end (empty otherwise).",
                      &m->eos_commit);
}
