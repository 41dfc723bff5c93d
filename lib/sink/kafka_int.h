/* Private to the Kafka sink: its state, shared by kafka.c (the producer on the loop) and
 * kafka_txn.c (exactly-once: transactions, their thread and the progress record). */
#ifndef OUTBOX_SINK_KAFKA_INT_H
#define OUTBOX_SINK_KAFKA_INT_H

#include <pthread.h>

#include "core/log.h"
#include "core/util.h"
#include "sink/kafka.h"
#include "sink/progress.h"

/* A message of the open transaction whose report waits for its end. */
struct txn_held {
    int64_t row_id;
    char *event_id; /* NULL for a dead-letter copy (row_id < 0): not in the progress record */
    int err;           /* its delivery failed (0: delivered or no report yet) */
    const char *topic; /* borrowed from its topic handle (they live as long as the producer) */
    int maybe_persisted;
};

enum txn_state {
    TXN_CLOSED,  /* the producer has not fenced its id yet: txn_open */
    TXN_OPENING, /* init_transactions and the progress read on the thread */
    TXN_IDLE,    /* may produce: the next message begins a transaction */
    TXN_OPEN,    /* a transaction takes messages */
    TXN_ENDING   /* its commit or abort runs on the thread */
};

enum txn_job { JOB_NONE, JOB_INIT, JOB_COMMIT, JOB_ABORT };

struct kafka_txn {
    enum txn_state state;
    uint64_t epoch, epochs; /* the session that may produce (0: none); sessions so far */
    int ready;              /* the relay recorded the session's progress record: produces go */
    int fence_counted;      /* this producer's fence is counted */
    int policy_warned;      /* the progress topic's cleanup.policy could not be read (logged once) */
    int replicas_warned;    /* the progress topic: replicas below 3 or min.insync.replicas below 2 (logged once) */
    int32_t progress_part;  /* the progress topic's partition of this table's key (kafka_txn_read) */
    rd_kafka_topic_t *progress_rkt; /* its handle on the producer (made once fenced) */
    struct txn_held *held;
    size_t n_held, cap_held;
    size_t outstanding; /* messages of the transaction (the progress one too) without a report */
    int failed;         /* one of them failed: the transaction is aborted */
    struct log_limit progress_err_log; /* a progress record's delivery failed (said every 30 s) */
    int64_t opened_ms;  /* monotonic */
    int64_t ending_ms;
    int64_t ended_ms; /* when the last commit or abort call returned (written by the thread
                         under mu before done_job; read once done_cb took the job under mu) */
    struct progress_rows committed; /* committed to Kafka, not seen recorded in PostgreSQL (or
                                       recorded and kept until the standbys have the record) */
    size_t kept;                    /* how many of them are recorded and kept (eos_tail.c) */
    struct sink_txn_stats stats;
    /* the thread: one job at a time, asked and answered under mu; done wakes the loop */
    pthread_t thread;
    int thread_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum txn_job job;           /* asked and not finished */
    enum txn_job done_job;      /* finished, its result not yet taken by the loop */
    int cancel, quit;           /* the init's read stops early; the thread ends */
    int initialized;            /* init_transactions done on this producer (the thread's; 0 when the
                                   producer goes: kafka_txn_drop) */
    rd_kafka_error_t *done_err; /* the job's error, or NULL */
    char done_msg[1024];       /* JOB_INIT's failure */
    int64_t *rec_id;            /* JOB_INIT's progress record */
    char **rec_event_id;
    size_t n_rec;
    int wake[2];
    ev_io wake_io;
    uint64_t rows_produced;
    int hold;              /* more rows are on their way (kafka_txn_hold) */
    ev_timer hold_timer;   /* a transaction held open ends by TXN_MAX_MS */
    struct log_limit retry_log; /* a commit or abort called again and again */
#ifdef OUTBOX_TEST_HOOKS
    long long test_kill_before_commit; /* SIGKILL before a commit once this many rows were produced */
#endif
};

struct topic_parts {
    char *topic;
    int count;
};

struct kafka_sink {
    struct sink base; /* first: a struct sink * is a struct kafka_sink * */
    struct ev_loop *loop;
    const struct sink_config *cfg;
    struct sink_callbacks cb;
    void *ctx;
    rd_kafka_t *rk;
    rd_kafka_queue_t *mainq; /* its reports, served as events on the loop */
    int wake[2]; /* librdkafka writes to wake[1] when the main queue becomes non-empty */
    ev_io wake_io;
    int brokers_down;
    int brokers_up; /* from the last statistics report; -1 before the first */
    struct topic_parts *parts; /* partition count of each topic produced to, as first seen */
    size_t n_parts;
    uint64_t partition_changes;
    long long max_message_bytes; /* the producer's message.max.bytes, read when it is made */
    int fatal_reported;
    char *secrets_seen; /* the file-read Kafka properties when the producer was made, or NULL */
    struct topic_handle *handles; /* open addressing by name; cap a power of two or 0 */
    size_t n_handles, cap_handles;
    int acks_none;        /* acks=0 (a user's override): deliveries carry no broker offset */
    uint64_t unconfirmed; /* deliveries without an offset, failed to the relay */
    struct log_limit unconfirmed_log;
    struct kafka_txn *txn; /* exactly-once, or NULL */
    int closing;           /* k_free: errors and statistics no longer reach the owner */
    /* kafka.c's: serves the producer's events now, or waits up to wait_ms for the first
     * (kafka_txn.c's abort waits for reports the loop must serve) */
    void (*serve_wait)(struct kafka_sink *sk, int wait_ms);
};

/* A delivery report as the relay takes it (err may be the sink's own codes). */
static inline void kafka_report(struct kafka_sink *sk, int64_t row_id, int err, const char *topic,
                                int maybe_persisted)
{
    sk->cb.on_delivery(sk->ctx, row_id, err, topic, maybe_persisted);
}

/* kafka_stats.c: a statistics report; the partition counts' memory. */
void kafka_stats(struct kafka_sink *sk, const char *json);
void kafka_stats_free(struct kafka_sink *sk);

/* The relay's own error codes, outside librdkafka's range. */
#define KAFKA_ERR_UNCONFIRMED (-100001)
#define KAFKA_ERR_TXN_ABORTED (-100002) /* its transaction was aborted: not the row's fault */
#define TXN_MAX_MS 100 /* a transaction takes messages for at most this long */

/* kafka_txn.c: everything exactly-once; called by kafka.c where a transaction changes
 * what it does. */
int kafka_txn_new(struct kafka_sink *sk, char *err, size_t errlen);
/* The transactions' thread: whether the job under way is to stop early. */
static inline int kafka_txn_cancelled(struct kafka_txn *t)
{
    pthread_mutex_lock(&t->mu);
    int c = t->cancel || t->quit;
    pthread_mutex_unlock(&t->mu);
    return c;
}

/* Whether the thread has a job or a result the loop has not taken; a fence and read under
 * way is asked to stop (kafka_txn_drop's wait clears that). */
static inline int kafka_txn_busy(struct kafka_txn *t)
{
    pthread_mutex_lock(&t->mu);
    int busy = t->job != JOB_NONE || t->done_job != JOB_NONE;
    if (t->job == JOB_INIT)
        t->cancel = 1;
    pthread_mutex_unlock(&t->mu);
    return busy;
}

/* kafka_txn_read.c (on the transactions' thread): this table's last progress record, read
 * with read_committed into t->rec_*. 0, or -1 with msg. */
int kafka_txn_read(struct kafka_sink *sk, char *msg, size_t msglen);
/* What a broker's error code met in exactly-once mode asks of the operator (the ACLs the
 * relay's principal lacks, a broker without a transaction coordinator), as "; ..." to
 * append to the error's own text, or "". Returns buf. */
const char *kafka_txn_hint(const struct sink_config *cfg, int code, char *buf, size_t len);
void kafka_txn_free(struct kafka_sink *sk);
/* kafka_txn_conf.c: the producer's settings in this mode (transactional.id, the timeouts;
 * refused with a librdkafka older than 2.0.2). */
int kafka_txn_conf(const struct sink_config *cfg, const char *id, rd_kafka_conf_t *conf, char *err, size_t errlen);
/* --check-config: init_transactions with the relay's transactional.id + ".check" (its ACL,
 * a transaction coordinator) without fencing the relay's. 0, or -1 with err. */
int kafka_txn_probe(const struct sink_config *cfg, char *err, size_t errlen);
/* Whether a message may go into the open transaction (beginning one if none is open):
 * SINK_QUEUED with the opaque to produce it with, or why not (*errp on SINK_FAILED). */
enum sink_queued kafka_txn_admit(struct kafka_sink *sk, int64_t row_id, void **opaque, int *errp);
/* The admitted message was produced: its report waits for the transaction's end. */
void kafka_txn_held(struct kafka_sink *sk, rd_kafka_topic_t *rkt, int64_t row_id, const char *event_id);
/* A report of a message produced in a transaction (opaque as given to produce). */
void kafka_txn_report(struct kafka_sink *sk, void *opaque, int err, const char *topic, int maybe_persisted);
/* Before the producer goes: the thread's job ends first, the open transaction is aborted
 * (within timeout_ms) and its messages fail (reported when report is 1); the next producer
 * fences again before it produces. */
void kafka_txn_drop(struct kafka_sink *sk, int timeout_ms, int report);
int kafka_txn_open(struct sink *base, int group);
uint64_t kafka_txn_epoch(const struct sink *base, int group);
void kafka_txn_ready(struct sink *base, int group, uint64_t epoch);
/* A fatal error of the producer (counted when it is a fence). */
void kafka_txn_note_fatal(struct kafka_sink *sk, int code);
void kafka_txn_carry(struct sink *base, int group, uint64_t epoch, int64_t row_id, const char *event_id);
uint64_t kafka_txn_version(const struct sink *base, int group, int64_t row_id);
void kafka_txn_release(struct sink *base, int group, int64_t row_id, uint64_t version);
void kafka_txn_kept(struct sink *base, int group, size_t n);
/* Commits (or aborts) the open transaction, its messages all reported on. */
void kafka_txn_end(struct kafka_sink *sk);
/* kafka_txn_rows.c: the relay's hold (more rows on their way). */
void kafka_txn_hold(struct sink *base, int on);
/* Whether the open transaction, its messages all acknowledged, waits for more: held, before
 * TXN_MAX_MS from its first message (its timer then ends it). Not one bound to abort, nor a
 * dead-letter copy's (claimed rows cannot join it), nor one that holds a quarter of the
 * in-flight window: its rows count against their Kafka partition's share until the commit
 * (at least that quarter), which a held transaction would otherwise fill. */
static inline int kafka_txn_held_open(struct kafka_sink *sk)
{
    struct kafka_txn *t = sk->txn;
    int64_t left = t->opened_ms + TXN_MAX_MS - mono_ms();
    if (!t->hold || left <= 0 || t->failed || !t->n_held || t->held[0].row_id < 0 ||
        t->n_held >= (size_t)sk->cfg->max_inflight / 4)
        return 0;
    ev_timer_stop(sk->loop, &t->hold_timer);
    ev_timer_set(&t->hold_timer, (double)left / 1000.0, 0.0);
    ev_timer_start(sk->loop, &t->hold_timer);
    return 1;
}
void kafka_txn_stats(const struct sink *base, struct sink_txn_stats *out);

#endif
