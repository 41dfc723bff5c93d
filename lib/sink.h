/* Kafka side: an idempotent librdkafka producer whose main queue wakes the libev
 * loop through a pipe. Delivery reports and errors are served on the loop thread. */
#ifndef OUTBOX_SINK_H
#define OUTBOX_SINK_H

#include <ev.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>

#include "config.h"
#include "message.h"

struct sink;

struct sink_callbacks {
    /* One per produced message; row_id is the id given to sink_produce. On failure topic
     * names the message's topic and maybe_persisted says whether it may be in Kafka anyway. */
    void (*on_delivery)(void *ctx, int64_t row_id, rd_kafka_resp_err_t err, const char *topic,
                        int maybe_persisted);
    /* The producer hit a fatal error; the owner must call sink_recreate. */
    void (*on_fatal)(void *ctx, const char *reason);
    /* A topic's partition count, when first seen and whenever it changes. */
    void (*on_partitions)(void *ctx, const char *topic, int count);
};

/* Builds the producer from cfg->kafka over the defaults (idempotence, acks=all,
 * murmur2_random, gapless, no message timeout). cfg is borrowed and must outlive the
 * sink. Returns NULL with err on failure. */
struct sink *sink_new(struct ev_loop *loop, const struct config *cfg,
                      const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen);
void sink_free(struct sink *sk);

/* Queues one message (payload copied). Returns RD_KAFKA_RESP_ERR_NO_ERROR, __QUEUE_FULL
 * (backpressure: retry after deliveries), or another error for this message. */
rd_kafka_resp_err_t sink_produce(struct sink *sk, const struct message *msg, const char *key,
                                 const char *value, size_t value_len, int64_t timestamp_ms,
                                 int64_t row_id);

/* Purges queued and in-flight messages (their reports fail with a purge error), serves the
 * reports, destroys the producer and builds a fresh one. Returns 0, or -1 with err. */
int sink_recreate(struct sink *sk, char *err, size_t errlen);

/* Serves delivery reports and errors now (also done whenever the queue wakes the loop). */
void sink_poll(struct sink *sk);
/* Messages not yet reported. */
int sink_outq_len(struct sink *sk);
/* Brokers connected (from librdkafka's statistics every 5 s; 0 after "all brokers down"). */
int sink_brokers_up(struct sink *sk);
/* The producer's message.max.bytes: no message larger than this can be produced. */
long long sink_max_message_bytes(const struct sink *sk);
/* Times a topic's partition count was seen to change (from librdkafka's statistics). */
uint64_t sink_partition_changes(const struct sink *sk);
/* Purges everything still queued or in flight and serves the failure reports
 * (shutdown after its timeout). Bounded by timeout_ms. */
void sink_abandon(struct sink *sk, int timeout_ms);

/* librdkafka's log lines into ours, one callback for every client of both programs: syslog
 * levels 0-3 as errors, 4 as warnings, 5-6 as info for a producer (debug for a consumer,
 * whose notices repeat its group's life), 7 as debug; a consumer's CONFWARN (the relay's
 * producer settings it was given) at debug. */
void sink_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
/* Words added to a Kafka authentication failure: librdkafka before 2.6.1 cannot log in
 * with SCRAM to Kafka 4.x brokers (it doubles the nonce in its final message, which 4.x
 * refuses as RFC 5802 asks), so a right password is refused there. "" when that cannot be
 * the cause (another mechanism, or a fixed librdkafka). */
const char *sink_auth_hint(const rd_kafka_conf_t *conf);
/* Logs once per process, when librdkafka is older than 2.6.1 and conf (borrowed) logs in
 * with a SCRAM mechanism, that Kafka 4.x brokers will refuse the login. */
void sink_warn_old_scram(const rd_kafka_conf_t *conf);

/* --check-config: reaches Kafka once with these properties (a metadata request, 10 s);
 * 0 when it answers, 1 otherwise; both logged. */
int sink_check_reachable(const struct kafka_prop *props, size_t n);

#ifdef OUTBOX_TEST_HOOKS
/* Test builds only: raise a fatal producer error as a broker would. */
void sink_test_fatal(struct sink *sk);
#endif

#endif
