/* The relay's metrics: plain counters, gauges and histograms owned by the loop thread,
 * rendered to the text exposition format for the HTTP thread's snapshot. */
#ifndef OUTBOX_RELAY_METRICS_H
#define OUTBOX_RELAY_METRICS_H

#include <stdint.h>

#include "core/metrics.h"
#include "sink/sink.h"

const char *failure_reason_name(enum failure_reason r);


#define METRICS_MAX_PAUSED 16

struct metrics {
    /* counters */
    uint64_t claims_total;
    uint64_t claims_from_bottom_total; /* claims that started every partition at the bottom */
    uint64_t floor_resets_total;       /* floors put back to the bottom (floor.h) */
    uint64_t claimed_rows_total;
    uint64_t published_total;
    uint64_t marked_total;
    uint64_t publish_failures_total[FAILURE_REASONS];
    uint64_t parked_total;
    uint64_t possible_duplicates_total;
    uint64_t producer_recreated_total;
    uint64_t resets_total;
    uint64_t retention_deleted_total;
    uint64_t partitions_created_total; /* keep mode, partitioned: partitions made ahead */
    uint64_t partitions_dropped_total; /* keep mode, partitioned: partitions retention dropped */
    uint64_t partitions_lost_total;    /* keep mode, partitioned: partitions found dropped by hand */
    int64_t partitions_ahead;          /* keep mode, partitioned: partitions wholly above the identity (-1: not partitioned) */
    uint64_t pg_reconnects_total;
    uint64_t doorbell_wakeups_total;
    uint64_t lease_rebalances_total;
    uint64_t topic_partition_changes_total;
    uint64_t unconfirmed_deliveries_total;
    uint64_t share_held_back_total; /* rows left PENDING: their Kafka partition held its share */
    uint64_t lease_takeovers_total;
    uint64_t lease_lost_total;
    uint64_t eos_committed_total;   /* exactly-once: transactions committed */
    uint64_t eos_aborted_total;     /* exactly-once: transactions aborted (their rows went again) */
    uint64_t eos_fenced_total;      /* exactly-once: times this relay's producer was fenced */
    uint64_t eos_recovered_total;   /* exactly-once: rows recorded from progress records */
    struct histogram eos_commit;    /* exactly-once: commit latency (the sink's, copied) */
    double eos_open_seconds;        /* exactly-once: age of the open transaction (0: none) */
    int64_t eos_fence_ms;           /* exactly-once: the last fence and progress read took */
    int64_t eos_tail_rows;          /* exactly-once: recorded rows kept in the record for the standbys */
    uint64_t eos_tail_unconfirmed_total; /* exactly-once: rows that left it before every standby had them */
    uint64_t eos_tail_nudges_total;      /* exactly-once: synchronous commits to flush an idle server's WAL */
    uint64_t keep_advances_total;   /* keep mode: watermarks moved */
    uint64_t keep_gaps_total;       /* keep mode: rows the audit found below W, never published */
    uint64_t keep_audited_total;    /* keep mode: partitions audited */
    uint64_t keep_audit_passes_total; /* keep mode: audit passes that reached W */
    double keep_audit_pass_seconds; /* keep mode: how long the last whole pass took */
    uint64_t keep_refused_total;    /* keep mode: acknowledged rows a mark could not record (lease gone) */
    int64_t keep_published_records; /* keep mode: published records above the watermarks (held partitions) */
    int keep_blocked;               /* keep mode: the watermark's proof failed its check */
    double keep_lag_seconds;        /* keep mode: age of the oldest record above a held W */
    int proof_blocked;              /* the identity's CACHE is not 1: the floors prove nothing */
    double proof_held_seconds;      /* how long the oldest candidate of the floors' proof waited */
    int64_t id_beyond_identity;     /* the highest claimed id beyond the identity's value, or 0 */
    int64_t lease_partitions_held;
    int64_t lease_partitions_unowned; /* held by no relay of the table, at the last scan */
    const char *table;                /* the outbox table (borrowed), a label of table-wide gauges */
    int64_t lease_relays;             /* relays of the table, at the last scan */
    /* gauges */
    int64_t pending_rows;        /* exact below the count cap, else an upper bound */
    int pending_rows_exact;
    double oldest_pending_age_seconds;
    int64_t failed_rows;
    int64_t inflight_rows;
    int pg_connected;
    int kafka_brokers_up;
    double notify_queue_usage;
    int degraded;
    const char *stall_reason; /* static string or NULL when flowing */
    char paused_topics[METRICS_MAX_PAUSED][250];
    size_t n_paused_topics;
    /* the oldest long-running transaction, if any */
    double long_tx_age_seconds;
    int long_tx_pid;
    char long_tx_xid[24];
    char long_tx_application[64];
    char long_tx_user[64];
    /* a replication slot or standby that held the xmin horizon back longer than the threshold */
    double xmin_holder_seconds;  /* 0: none */
    char xmin_holder_kind[24];   /* "replication slot" or "standby" */
    char xmin_holder_name[64];
    /* histograms */
    struct histogram latency;    /* created_at -> Kafka acknowledgement, seconds */
    struct histogram batch_rows; /* rows per claim */
};

void metrics_init(struct metrics *m);
/* Appends the exposition text. version is the build's version string. */
void metrics_render(const struct metrics *m, const char *version, struct strbuf *out);

#endif
