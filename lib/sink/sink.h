/* The seam between the relay and a broker. A sink publishes one message at a time with a
 * completion for each (served on the libev loop thread), tells which of its errors belong to
 * the row, the topic, the producer or nobody in particular, and says how it partitions keys
 * when it has partitions. The claim, the in-flight window, the shares and the resets know
 * only this interface; each broker is one file behind it (kafka.c, rabbitmq.c).
 *
 * A sink's errors are its own small integers (0: none) that only it can name and classify
 * (sink_err_str, sink_classify). */
#ifndef OUTBOX_SINK_H
#define OUTBOX_SINK_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "core/metrics.h"
#include "core/settings.h"
#include "sink/message.h"

/* What a sink is told (the relay fills one from its settings: config_sink in relay/config.h),
 * as librdkafka's rd_kafka_new takes a conf of its own rather than its application's. The
 * strings and the Kafka properties are borrowed. */
struct sink_config {
    int rabbitmq;           /* OUTBOX_SINK=rabbitmq: the RabbitMQ sink, else Kafka */
    const char *relay_name; /* RabbitMQ: each message's app_id */
    int max_inflight;       /* the relay's window: the sink's own queue holds this + 1000 */
    int max_inflight_bytes;
    int reconnect_max_ms;   /* RabbitMQ: the longest wait between connection attempts */
    const struct kafka_prop *kafka; /* OUTBOX_KAFKA_* and --kafka */
    size_t n_kafka;
    const char *rabbitmq_url, *rabbitmq_exchange;
    const char *rabbitmq_ca_file, *rabbitmq_cert_file, *rabbitmq_key_file;
    int rabbitmq_confirm_timeout_ms;
    int rabbitmq_max_message_bytes;
    int rabbitmq_strict_key_order;
    /* Kafka, exactly-once (OUTBOX_EXACTLY_ONCE): each group of messages goes in a Kafka
     * transaction with the progress record (kafka_txn.c); NULL transactional_id: off. */
    const char *transactional_id;
    const char *progress_topic;
    const char *progress_key;       /* this table's key in it (group 0's) */
    int transaction_groups;         /* OUTBOX_TRANSACTION_GROUPS: producers, one per group (1..64);
                                     * group g's id and key are group 0's with .g0 made .g<g> */
    int transaction_timeout_ms;
    int transaction_gap_ms; /* the pause after each commit (kafka_txn.c) */
};

/* Exactly-once: what the sink has done in transactions (a Kafka sink in that mode). */
struct sink_txn_stats {
    uint64_t committed, aborted, fenced;
    int64_t open_since_ms; /* monotonic start of the open transaction, 0: none */
    struct histogram commit; /* seconds from asking the commit to its end */
};

/* What a failure means to the relay, as counted in outbox_publish_failures_total{reason}. */
enum failure_reason {
    FAILURE_ROW,       /* the message itself (too large, invalid): counts towards attempts */
    FAILURE_TOPIC,     /* the topic (authorization, unknown): the topic is paused */
    FAILURE_PRODUCER,  /* purged by a fatal producer error or a reset; not the row's fault */
    FAILURE_TRANSIENT, /* anything else */
    FAILURE_REASONS
};

/* What became of a message handed to sink_produce. */
enum sink_queued {
    SINK_QUEUED, /* on its way: its completion follows */
    SINK_FULL,   /* backpressure: try again after a completion */
    SINK_UNFIT,  /* this message can never be published (too large, refused outright): park it */
    SINK_FAILED  /* this attempt failed (*err): classify it */
};

struct sink_callbacks {
    /* One per queued message; row_id is the id given to sink_produce, err 0 on success. On
     * failure topic names the message's topic and maybe_persisted says whether it may have
     * reached the broker anyway. */
    void (*on_delivery)(void *ctx, int64_t row_id, int err, const char *topic, int maybe_persisted);
    /* The sink cannot go on (a fatal producer error, rotated credentials): the owner must
     * call sink_recreate. */
    void (*on_fatal)(void *ctx, const char *reason);
    /* A topic's partition count, when first seen and whenever it changes (sinks with
     * partitions only). */
    void (*on_partitions)(void *ctx, const char *topic, int count);
    /* Exactly-once: the producer fenced every older one of its transactional id and read
     * the progress record: n rows committed to Kafka that PostgreSQL may not have recorded
     * (by id and event_id, borrowed for the call), epoch the producer's session that may
     * now produce (sink_txn_epoch); or err (n 0, epoch 0) when it could not, to be asked
     * again later. */
    void (*on_recovered)(void *ctx, int group, uint64_t epoch, const int64_t *ids,
                         char *const *event_ids, size_t n, const char *err);
};

struct sink;

/* Each sink's operations; a sink's state begins with a struct sink. */
struct sink_ops {
    const char *name; /* "kafka" */
    const char *max_message_name; /* what max_message_bytes is, in the words of a parked row's reason */
    void (*free)(struct sink *sk);
    enum sink_queued (*produce)(struct sink *sk, const struct message *msg, const char *key,
                                const char *value, size_t value_len, int64_t timestamp_ms,
                                int64_t row_id, int *err);
    int (*recreate)(struct sink *sk, char *err, size_t errlen);
    void (*poll)(struct sink *sk);
    int (*outq_len)(struct sink *sk);
    int (*brokers_up)(struct sink *sk);
    long long (*max_message_bytes)(const struct sink *sk);
    uint64_t (*partition_changes)(const struct sink *sk);
    /* Deliveries the broker's client reported done without proof that the broker wrote them
     * (Kafka: no offset), failed to the relay instead. */
    uint64_t (*unconfirmed)(const struct sink *sk);
    void (*abandon)(struct sink *sk, int timeout_ms);
    enum failure_reason (*classify)(int err);
    const char *(*err_str)(int err);
    /* The partition of a key among count, as the broker's producer picks it; NULL when the
     * sink has no partitions (then no partition shares apply). */
    int32_t (*partition)(const char *key, size_t keylen, int count);
    /* Exactly-once only (NULL in other sinks). The table's lease partitions form
     * transaction groups (OUTBOX_TRANSACTION_GROUPS), each with a producer, a
     * transactional.id and a progress record of its own; group picks one (0 when there is
     * one). txn_open starts fencing and reading the group's progress record (on_recovered
     * reports; 0 started, -1 already under way or not possible now); txn_epoch is the
     * group's producer session that may produce (0: none yet); txn_carry puts a row an
     * earlier producer committed into this session's record; txn_version is the version of
     * a row's entry in the record (0: none), and txn_release takes it out only if it still
     * has that version (a row recorded and kept until the standbys have its record: a later
     * row given the same id stays); txn_kept says how many rows of the record are such
     * recorded rows (they do not count against the cap on rows committed and not recorded);
     * txn_close ends the group's session (its lease partitions were handed back: nothing of
     * it is in flight), so that holding it again fences and reads anew: 0, or -1 while a
     * fence and read (asked to stop) or a commit still runs, to be called again (the loop
     * never waits for them). txn_hold: more rows are on their way (a claim under way after
     * a full one): an open transaction whose messages are all acknowledged waits for them,
     * for at most its 100 ms, instead of ending. */
    int (*txn_open)(struct sink *sk, int group);
    uint64_t (*txn_epoch)(const struct sink *sk, int group);
    void (*txn_ready)(struct sink *sk, int group, uint64_t epoch);
    void (*txn_carry)(struct sink *sk, int group, uint64_t epoch, int64_t row_id, const char *event_id);
    uint64_t (*txn_version)(const struct sink *sk, int group, int64_t row_id);
    void (*txn_release)(struct sink *sk, int group, int64_t row_id, uint64_t version);
    void (*txn_kept)(struct sink *sk, int group, size_t n);
    int (*txn_close)(struct sink *sk, int group);
    void (*txn_hold)(struct sink *sk, int on);
    void (*txn_stats)(const struct sink *sk, struct sink_txn_stats *out);
#ifdef OUTBOX_TEST_HOOKS
    void (*test_fatal)(struct sink *sk); /* raise a fatal producer error as a broker would */
#endif
};

struct sink {
    const struct sink_ops *ops;
};

/* The sink cfg asks for (cfg is borrowed and must outlive it). NULL with err on failure. */
struct sink *sink_new(struct ev_loop *loop, const struct sink_config *cfg,
                      const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen);

static inline void sink_free(struct sink *sk)
{
    if (sk)
        sk->ops->free(sk);
}

/* Queues one message (value copied). */
static inline enum sink_queued sink_produce(struct sink *sk, const struct message *msg, const char *key,
                                            const char *value, size_t value_len, int64_t timestamp_ms,
                                            int64_t row_id, int *err)
{
    return sk->ops->produce(sk, msg, key, value, value_len, timestamp_ms, row_id, err);
}

/* Fails everything queued or in flight (their completions report a FAILURE_PRODUCER
 * error), serves those completions, and builds the connection or producer anew. 0, or -1
 * with err. */
static inline int sink_recreate(struct sink *sk, char *err, size_t errlen)
{
    return sk->ops->recreate(sk, err, errlen);
}

/* Serves completions and errors now (also done whenever the sink wakes the loop). */
static inline void sink_poll(struct sink *sk)
{
    sk->ops->poll(sk);
}

/* Messages queued whose completion has not been served. */
static inline int sink_outq_len(struct sink *sk)
{
    return sk->ops->outq_len(sk);
}

/* Brokers connected (0 when none is). */
static inline int sink_brokers_up(struct sink *sk)
{
    return sk->ops->brokers_up(sk);
}

/* The largest message the sink can publish. */
static inline long long sink_max_message_bytes(const struct sink *sk)
{
    return sk->ops->max_message_bytes(sk);
}

/* Times a topic's partition count was seen to change. */
static inline uint64_t sink_partition_changes(const struct sink *sk)
{
    return sk->ops->partition_changes(sk);
}

/* Deliveries reported done without proof, failed instead (their rows go again). */
static inline uint64_t sink_unconfirmed(const struct sink *sk)
{
    return sk->ops->unconfirmed(sk);
}

/* Fails everything still queued or in flight and serves the failure reports (shutdown
 * after its timeout). Bounded by timeout_ms. */
static inline void sink_abandon(struct sink *sk, int timeout_ms)
{
    sk->ops->abandon(sk, timeout_ms);
}

static inline enum failure_reason sink_classify(const struct sink *sk, int err)
{
    return sk->ops->classify(err);
}

static inline const char *sink_err_str(const struct sink *sk, int err)
{
    return sk->ops->err_str(err);
}

static inline int sink_txn_open(struct sink *sk, int group)
{
    return sk->ops->txn_open ? sk->ops->txn_open(sk, group) : -1;
}

static inline uint64_t sink_txn_epoch(const struct sink *sk, int group)
{
    return sk->ops->txn_epoch ? sk->ops->txn_epoch(sk, group) : 0;
}

static inline void sink_txn_ready(struct sink *sk, int group, uint64_t epoch)
{
    if (sk->ops->txn_ready)
        sk->ops->txn_ready(sk, group, epoch);
}

static inline void sink_txn_carry(struct sink *sk, int group, uint64_t epoch, int64_t row_id,
                                  const char *event_id)
{
    if (sk->ops->txn_carry)
        sk->ops->txn_carry(sk, group, epoch, row_id, event_id);
}

static inline uint64_t sink_txn_version(const struct sink *sk, int group, int64_t row_id)
{
    return sk->ops->txn_version ? sk->ops->txn_version(sk, group, row_id) : 0;
}

static inline void sink_txn_release(struct sink *sk, int group, int64_t row_id, uint64_t version)
{
    if (sk->ops->txn_release)
        sk->ops->txn_release(sk, group, row_id, version);
}

static inline void sink_txn_kept(struct sink *sk, int group, size_t n)
{
    if (sk->ops->txn_kept)
        sk->ops->txn_kept(sk, group, n);
}

static inline void sink_txn_hold(struct sink *sk, int on)
{
    if (sk->ops->txn_hold)
        sk->ops->txn_hold(sk, on);
}

static inline int sink_txn_close(struct sink *sk, int group)
{
    return sk->ops->txn_close ? sk->ops->txn_close(sk, group) : 0;
}

static inline void sink_txn_stats(const struct sink *sk, struct sink_txn_stats *out)
{
    *out = (struct sink_txn_stats){0};
    if (sk->ops->txn_stats)
        sk->ops->txn_stats(sk, out);
}

#ifdef OUTBOX_TEST_HOOKS
static inline void sink_test_fatal(struct sink *sk)
{
    sk->ops->test_fatal(sk);
}
#endif

#endif
