/* The Kafka sink (kafka.h): an idempotent librdkafka producer on the libev loop. */
#include "sink/kafka_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/kafka.h"
#include "core/log.h"
#include "core/util.h"

/* A delivery librdkafka reports as persisted that carries no offset: nothing the broker
 * said places it in a partition. librdkafka reports a request's messages delivered when a
 * later request of the same partition succeeds while the request is unanswered or failed
 * ("implicitly acked", offset -1001), on the reasoning that the broker would have refused
 * the later sequence numbers otherwise. But a broker that holds no state for the producer
 * on that partition accepts any sequence: a partition just created, a producer just made
 * (a new producer id: every relay start, every recreate), a producer silent there for
 * longer than the broker's producer.id.expiration.ms, or whose batches retention or
 * DeleteRecords removed. Seen with Apache Kafka 4.1.1 and librdkafka 2.0.2 when three
 * relays first produced to a topic they had auto-created: a partition's first request
 * failed, its second was written at offset 0, and the first's row was reported delivered
 * and is in no partition (the leases test lost it about once in 30 runs). Such a report
 * counts as a failure that may have been persisted: the row stays PENDING and goes again
 * (a duplicate when the implicit ack was sound): KAFKA_ERR_UNCONFIRMED (kafka_int.h). */

#define UNCONFIRMED_LOG_MS 10000

/* A topic handle per topic produced to, made the first time a row names the topic. Making
 * it asks the cluster for the topic's leaders at once: a message produced by name to a topic
 * the producer has not met waits for librdkafka's once-a-second topic scan to ask (measured:
 * the first row to an existing topic acknowledged after about 1 s, the next after 9 ms). */
struct topic_handle {
    char *name;
    rd_kafka_topic_t *rkt;
};

static const struct sink_ops kafka_ops;

/* Producer settings the relay's guarantees rest on; every one may be overridden. */
static const char *const producer_defaults[][2] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"partitioner", "murmur2_random"},
    {"enable.gapless.guarantee", "true"},
    {"message.timeout.ms", "0"},
    {"linger.ms", "2"},
    /* Nagle's algorithm off, as the Java client and librdkafka 2.10 do: a small request
     * (AddPartitionsToTxn, EndTxn, a progress record) sent behind one not yet answered on
     * the same connection would otherwise wait for that answer */
    {"socket.nagle.disable", "true"},
    {"batch.num.messages", "10000"},
    {"compression.codec", "lz4"},
    {"client.id", "outbox-relay"},
    {"statistics.interval.ms", "5000"},
    /* partition count changes are seen within this (librdkafka's default is 5 minutes) */
    {"topic.metadata.refresh.interval.ms", "30000"},
};

static void on_report(struct kafka_sink *sk, const rd_kafka_message_t *m)
{
    int err = (int)m->err;
    if (!err)
        sk->brokers_down = 0;
    if (!err && m->offset < 0 && !sk->acks_none) {
        err = KAFKA_ERR_UNCONFIRMED;
        sk->unconfirmed++;
        long held;
        if (log_limit_due(&sk->unconfirmed_log, UNCONFIRMED_LOG_MS, &held))
            log_warn("kafka: a message to %s [%d] was reported delivered without an offset (acknowledged "
                     "by a later request's success, or as a duplicate sequence): no proof that the broker "
                     "wrote it, so it is published again (%ld more such since the last line)",
                     rd_kafka_topic_name(m->rkt), (int)m->partition, held);
    }
    const char *topic = err ? rd_kafka_topic_name(m->rkt) : NULL;
    int maybe = rd_kafka_message_status(m) != RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
    if (sk->txn)
        kafka_txn_report(sk, m->_private, err, topic, maybe);
    else
        kafka_report(sk, (int64_t)(intptr_t)m->_private, err, topic, maybe);
}

static void on_error(struct kafka_sink *sk, int err, const char *reason)
{
    rd_kafka_t *rk = sk->rk;
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        log_error("kafka: authentication failed: %s%s", reason, kafka_auth_hint(rd_kafka_conf(rk)));
        /* a secret read from a file (OUTBOX_KAFKA_SASL_PASSWORD_FILE) that changed since the
         * producer was made: a rotated password. Recreate the producer, which reads it anew
         * (librdkafka keeps retrying with the old one otherwise). */
        if (!sk->fatal_reported && settings_kafka_files_changed(sk->cfg->kafka, sk->cfg->n_kafka, sk->secrets_seen)) {
            log_info("kafka: a Kafka setting read from a file changed since the producer was made: "
                     "recreating the producer with it");
            sk->fatal_reported = 1;
            sk->cb.on_fatal(sk->ctx, "authentication failed, and the credentials file changed");
        }
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fatal[512];
        rd_kafka_resp_err_t ferr = rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
        char hint[400] = "";
        if (sk->txn) /* (exactly-once: what it asks of the operator, an ACL say) */
            kafka_txn_hint(sk->cfg, ferr, hint, sizeof(hint));
        log_error("kafka: fatal producer error %s: %s%s", rd_kafka_err2name(ferr), fatal, hint);
        if (sk->txn)
            kafka_txn_note_fatal(sk, ferr);
        if (!sk->fatal_reported) {
            sk->fatal_reported = 1;
            sk->cb.on_fatal(sk->ctx, fatal);
        }
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        if (!sk->brokers_down)
            log_warn("kafka: all brokers down: %s", reason);
        sk->brokers_down = 1;
        return;
    }
    log_warn("kafka: %s: %s", rd_kafka_err2name(err), reason);
}

/* One event of the main queue: reports, errors, statistics. The producer takes them as
 * events rather than callbacks, so that a commit's flush on the transactions' thread
 * (kafka_txn.c) waits for the loop to serve them instead of serving them itself. */
static void dispatch(struct kafka_sink *sk, rd_kafka_event_t *ev)
{
    const rd_kafka_message_t *m;
    switch (rd_kafka_event_type(ev)) {
    case RD_KAFKA_EVENT_DR:
        while ((m = rd_kafka_event_message_next(ev)))
            on_report(sk, m);
        break;
    case RD_KAFKA_EVENT_ERROR:
        if (!sk->closing)
            on_error(sk, rd_kafka_event_error_is_fatal(ev) ? RD_KAFKA_RESP_ERR__FATAL : rd_kafka_event_error(ev),
                     rd_kafka_event_error_string(ev));
        break;
    case RD_KAFKA_EVENT_STATS:
        if (!sk->closing)
            kafka_stats(sk, rd_kafka_event_stats(ev));
        break;
    default:
        break;
    }
}

/* Serves delivery reports and errors now, or waits up to wait_ms for the first. */
static void serve_wait(struct kafka_sink *sk, int wait_ms)
{
    rd_kafka_event_t *ev;
    while (sk->rk && (ev = rd_kafka_queue_poll(sk->mainq, wait_ms))) {
        dispatch(sk, ev);
        rd_kafka_event_destroy(ev);
        wait_ms = 0;
    }
}

static void serve(struct kafka_sink *sk)
{
    serve_wait(sk, 0);
}

static void wake_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kafka_sink *sk = w->data;
    wake_pipe_drain(sk->wake[0]);
    serve(sk);
}

static rd_kafka_t *make_producer(struct kafka_sink *sk, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char kerr[512];
    for (size_t i = 0; i < ARRAY_LEN(producer_defaults); i++)
        if (rd_kafka_conf_set(conf, producer_defaults[i][0], producer_defaults[i][1], kerr,
                              sizeof(kerr)) != RD_KAFKA_CONF_OK) {
            rd_kafka_conf_destroy(conf);
            set_err(err, errlen, "kafka default %s: %s", producer_defaults[i][0], kerr);
            return NULL;
        }
    /* librdkafka's queue must hold the whole in-flight window, and no more bytes than the
     * relay's budget (its default is 1 GiB). */
    char qmax[32];
    snprintf(qmax, sizeof(qmax), "%d", sk->cfg->max_inflight + 1000);
    rd_kafka_conf_set(conf, "queue.buffering.max.messages", qmax, kerr, sizeof(kerr));
    snprintf(qmax, sizeof(qmax), "%d", sk->cfg->max_inflight_bytes / 1024);
    rd_kafka_conf_set(conf, "queue.buffering.max.kbytes", qmax, kerr, sizeof(kerr));
    free(sk->secrets_seen); /* taken before they are read: a change in between recreates once more */
    sk->secrets_seen = settings_kafka_file_snapshot(sk->cfg->kafka, sk->cfg->n_kafka);
    if (settings_kafka_apply(conf, sk->cfg->kafka, sk->cfg->n_kafka, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    kafka_warn_old_scram(conf);
    if (sk->txn && kafka_txn_conf(sk->cfg, sk->cfg->transactional_id, conf, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_events(conf, RD_KAFKA_EVENT_DR | RD_KAFKA_EVENT_ERROR | RD_KAFKA_EVENT_STATS);
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    rd_kafka_conf_set_opaque(conf, sk);
    char max[32];
    size_t maxlen = sizeof(max);
    sk->max_message_bytes = rd_kafka_conf_get(conf, "message.max.bytes", max, &maxlen) == RD_KAFKA_CONF_OK
                                ? atoll(max) : 1000000;
    char acks[16];
    size_t ackslen = sizeof(acks);
    sk->acks_none = rd_kafka_conf_get(conf, "acks", acks, &ackslen) == RD_KAFKA_CONF_OK && strcmp(acks, "0") == 0;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        set_err(err, errlen, "kafka: cannot create producer: %s", kerr);
        return NULL;
    }
    sk->mainq = rd_kafka_queue_get_main(rk);
    rd_kafka_queue_io_event_enable(sk->mainq, sk->wake[1], "1", 1);
    sk->brokers_down = 0;
    sk->brokers_up = -1;
    sk->fatal_reported = 0;
    return rk;
}

struct sink *sink_kafka_new(struct ev_loop *loop, const struct sink_config *cfg,
                            const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen)
{
    struct kafka_sink *sk = xcalloc(1, sizeof(*sk));
    sk->base.ops = &kafka_ops;
    sk->loop = loop;
    sk->cfg = cfg;
    sk->cb = *cb;
    sk->ctx = ctx;
    sk->serve_wait = serve_wait;
    if (wake_pipe_open(sk->wake) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        free(sk);
        return NULL;
    }
    if (cfg->transactional_id && kafka_txn_new(sk, err, errlen) != 0) {
        close(sk->wake[0]);
        close(sk->wake[1]);
        free(sk);
        return NULL;
    }
    sk->rk = make_producer(sk, err, errlen);
    if (!sk->rk) {
        kafka_txn_free(sk);
        close(sk->wake[0]);
        close(sk->wake[1]);
        free(sk->secrets_seen);
        free(sk);
        return NULL;
    }
    ev_io_init(&sk->wake_io, wake_cb, sk->wake[0], EV_READ);
    sk->wake_io.data = sk;
    ev_io_start(loop, &sk->wake_io);
    return &sk->base;
}

static void k_poll(struct sink *base)
{
    serve((struct kafka_sink *)base);
}

static int k_outq_len(struct sink *base)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    return sk->rk ? rd_kafka_outq_len(sk->rk) : 0;
}

static uint64_t k_partition_changes(const struct sink *base)
{
    const struct kafka_sink *sk = (const struct kafka_sink *)base;
    return sk->partition_changes;
}

static uint64_t k_unconfirmed(const struct sink *base)
{
    return ((const struct kafka_sink *)base)->unconfirmed;
}

static long long k_max_message_bytes(const struct sink *base)
{
    const struct kafka_sink *sk = (const struct kafka_sink *)base;
    return sk->max_message_bytes;
}

static int k_brokers_up(struct sink *base)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    if (sk->brokers_down)
        return 0;
    return sk->brokers_up >= 0 ? sk->brokers_up : 1;
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void handles_clear(struct kafka_sink *sk)
{
    for (size_t i = 0; i < sk->cap_handles; i++) {
        if (sk->handles[i].name) {
            rd_kafka_topic_destroy(sk->handles[i].rkt);
            free(sk->handles[i].name);
        }
    }
    free(sk->handles);
    sk->handles = NULL;
    sk->n_handles = sk->cap_handles = 0;
}

static void handles_put(struct topic_handle *tab, size_t cap, struct topic_handle th)
{
    size_t i = name_hash(th.name) & (cap - 1);
    while (tab[i].name)
        i = (i + 1) & (cap - 1);
    tab[i] = th;
}

/* The producer's handle of topic, made (and its leaders asked for) on first use; NULL if
 * librdkafka refuses the name. */
static rd_kafka_topic_t *topic_handle(struct kafka_sink *sk, const char *topic)
{
    if (sk->cap_handles) {
        for (size_t i = name_hash(topic) & (sk->cap_handles - 1); sk->handles[i].name;
             i = (i + 1) & (sk->cap_handles - 1))
            if (strcmp(sk->handles[i].name, topic) == 0)
                return sk->handles[i].rkt;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(sk->rk, topic, NULL);
    if (!rkt)
        return NULL;
    if ((sk->n_handles + 1) * 2 > sk->cap_handles) { /* keep it at most half full */
        size_t cap = sk->cap_handles ? sk->cap_handles * 2 : 16;
        struct topic_handle *tab = xcalloc(cap, sizeof(*tab));
        for (size_t i = 0; i < sk->cap_handles; i++)
            if (sk->handles[i].name)
                handles_put(tab, cap, sk->handles[i]);
        free(sk->handles);
        sk->handles = tab;
        sk->cap_handles = cap;
    }
    handles_put(sk->handles, sk->cap_handles, (struct topic_handle){xstrdup(topic), rkt});
    sk->n_handles++;
    return rkt;
}

static enum sink_queued k_produce(struct sink *base, const struct message *msg, const char *key,
                                  const char *value, size_t value_len, int64_t timestamp_ms,
                                  int64_t row_id, int *errp)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__STATE;
    rd_kafka_topic_t *rkt = sk->rk ? topic_handle(sk, msg->topic) : NULL;
    if (sk->rk && !rkt)
        err = rd_kafka_last_error();
    if (rkt) {
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new(msg->n_headers);
        for (size_t i = 0; i < msg->n_headers; i++)
            rd_kafka_header_add(hdrs, msg->headers[i].name, -1, msg->headers[i].value, -1);
        void *opaque = (void *)(intptr_t)row_id;
        if (sk->txn) { /* exactly-once: into the open transaction, reported at its end */
            enum sink_queued q = kafka_txn_admit(sk, row_id, &opaque, errp);
            if (q != SINK_QUEUED) {
                rd_kafka_headers_destroy(hdrs);
                return q;
            }
        }
        err = rd_kafka_producev(
            sk->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE((void *)value, value_len),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_TIMESTAMP(timestamp_ms),
            RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
        if (err)
            rd_kafka_headers_destroy(hdrs); /* owned by the message only on success */
        else if (sk->txn)
            kafka_txn_held(sk, rkt, row_id, msg->event_id);
    }
    *errp = (int)err;
    switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        return SINK_QUEUED;
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
        return SINK_FULL;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return SINK_UNFIT;
    default:
        return SINK_FAILED;
    }
}

/* Purges the producer and serves the resulting failure reports, bounded by timeout_ms. */
static void purge_and_drain(struct kafka_sink *sk, int timeout_ms)
{
    if (sk->txn) { /* the open transaction is aborted, its messages fail */
        kafka_txn_drop(sk, timeout_ms, 1);
        return;
    }
    rd_kafka_purge(sk->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    int64_t deadline = mono_ms() + timeout_ms;
    while (rd_kafka_outq_len(sk->rk) > 0 && mono_ms() < deadline)
        serve_wait(sk, 50);
    serve(sk);
}

/* The producer goes; no report is served after this. */
static void destroy_producer(struct kafka_sink *sk)
{
    handles_clear(sk);
    rd_kafka_queue_destroy(sk->mainq);
    sk->mainq = NULL;
    rd_kafka_destroy(sk->rk);
    sk->rk = NULL;
}

static void k_abandon(struct sink *base, int timeout_ms)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    if (!sk->rk)
        return;
    purge_and_drain(sk, timeout_ms);
    if (sk->txn) { /* a new producer, whose reports cannot be the old one's; it fences again */
        char err[512];
        destroy_producer(sk);
        sk->rk = make_producer(sk, err, sizeof(err));
        if (!sk->rk) {
            log_error("kafka: %s", err);
            sk->fatal_reported = 1;
            sk->cb.on_fatal(sk->ctx, err);
        }
    }
}

/* Exactly-once: the group's lease partitions were handed back, nothing of them in flight:
 * a new producer, which fences and reads the record again when the group is held again.
 * Not while the transactions' thread has a job (a fence and read is asked to stop): the
 * loop does not wait for it. */
static int k_txn_close(struct sink *base, int group)
{
    (void)group; /* one producer: its group */
    struct kafka_sink *sk = (struct kafka_sink *)base;
    if (sk->txn && kafka_txn_busy(sk->txn))
        return -1;
    k_abandon(base, 200);
    return 0;
}

static int k_recreate(struct sink *base, char *err, size_t errlen)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    if (sk->rk) {
        purge_and_drain(sk, 2000);
        destroy_producer(sk);
    }
    sk->rk = make_producer(sk, err, errlen);
    if (sk->rk)
        log_info("kafka: producer recreated");
    return sk->rk ? 0 : -1;
}

static void k_free(struct sink *base)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    if (!sk)
        return;
    ev_io_stop(sk->loop, &sk->wake_io);
    sk->closing = 1;
    if (sk->rk) {
        /* No callbacks from here on: the owner is going away. */
        if (sk->txn)
            kafka_txn_drop(sk, 2000, 0);
        rd_kafka_purge(sk->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        destroy_producer(sk);
    }
    kafka_txn_free(sk);
    close(sk->wake[0]);
    close(sk->wake[1]);
    kafka_stats_free(sk);
    free(sk->secrets_seen);
    free(sk);
}

#ifdef OUTBOX_TEST_HOOKS
static void k_test_fatal(struct sink *base)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    rd_kafka_test_fatal_error(sk->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                              "test hook: injected fatal error");
}
#endif

enum failure_reason sink_kafka_classify(int err)
{
    switch ((rd_kafka_resp_err_t)err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP: /* beyond the broker's timestamp bounds */
        return FAILURE_ROW;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_COMPRESSION_TYPE: /* the topic's compression.type */
        return FAILURE_TOPIC;
#if RD_KAFKA_VERSION >= 0x020400ff
    /* librdkafka 2.4.0 and later (KIP-467): when the broker names the culprit records of a
     * batch, they fail with INVALID_RECORD (the row's) and the rest of the batch with this
     * one — theirs is no fault of their own, so they are retried as transient failures */
    case RD_KAFKA_RESP_ERR__INVALID_DIFFERENT_RECORD:
        return FAILURE_TRANSIENT;
#endif
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__FATAL:
        return FAILURE_PRODUCER;
    default: /* _MSG_TIMED_OUT and everything else */
        return FAILURE_TRANSIENT;
    }
}

const char *sink_kafka_err_str(int err)
{
    if (err == KAFKA_ERR_UNCONFIRMED)
        return "reported delivered without an offset: no proof that the broker wrote it";
    if (err == KAFKA_ERR_TXN_ABORTED)
        return "its transaction was aborted (exactly-once): not the row's fault, it goes again";
    return rd_kafka_err2str((rd_kafka_resp_err_t)err);
}

int32_t sink_kafka_partition(const char *key, size_t keylen, int count)
{
    return rd_kafka_msg_partitioner_murmur2_random(NULL, key, keylen, count, NULL, NULL);
}

static const struct sink_ops kafka_ops = {
    .name = "kafka",
    .max_message_name = "the producer's message.max.bytes",
    .free = k_free,
    .produce = k_produce,
    .recreate = k_recreate,
    .poll = k_poll,
    .outq_len = k_outq_len,
    .brokers_up = k_brokers_up,
    .max_message_bytes = k_max_message_bytes,
    .partition_changes = k_partition_changes,
    .unconfirmed = k_unconfirmed,
    .abandon = k_abandon,
    .classify = sink_kafka_classify,
    .err_str = sink_kafka_err_str,
    .partition = sink_kafka_partition,
    .txn_open = kafka_txn_open,
    .txn_epoch = kafka_txn_epoch,
    .txn_ready = kafka_txn_ready,
    .txn_carry = kafka_txn_carry,
    .txn_version = kafka_txn_version,
    .txn_release = kafka_txn_release,
    .txn_kept = kafka_txn_kept,
    .txn_hold = kafka_txn_hold,
    .txn_close = k_txn_close,
    .txn_stats = kafka_txn_stats,
#ifdef OUTBOX_TEST_HOOKS
    .test_fatal = k_test_fatal,
#endif
};
