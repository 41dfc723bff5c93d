/* The Kafka sink: an idempotent librdkafka producer whose main queue wakes the libev loop
 * through a pipe; delivery reports and errors are served on the loop thread. */
#ifndef OUTBOX_SINK_KAFKA_H
#define OUTBOX_SINK_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "sink/sink.h"

/* Builds the producer from cfg->kafka over the defaults (idempotence, acks=all,
 * murmur2_random, gapless, no message timeout). */
struct sink *sink_kafka_new(struct ev_loop *loop, const struct sink_config *cfg,
                            const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen);
/* The partition of a key among count, as the producer partitions (murmur2_random: with a
 * key, the Java client's murmur2). */
int32_t sink_kafka_partition(const char *key, size_t keylen, int count);
/* A Kafka error as the relay takes it: the row's, the topic's, the producer's or
 * transient. */
enum failure_reason sink_kafka_classify(int err);
const char *sink_kafka_err_str(int err);
/* Exactly-once with several transaction groups (cfg->transaction_groups > 1): a sink of one
 * Kafka sink per group (kafka_lanes.c). */
struct sink *sink_kafka_lanes_new(struct ev_loop *loop, const struct sink_config *cfg,
                                  const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen);
/* --check-config with OUTBOX_EXACTLY_ONCE=1 (kafka_txn_read.c): what can be checked without
 * fencing a running relay: the progress topic may be described, and if it exists, compacts
 * (its replicas and min.insync.replicas said, warned about when low); a missing one is said
 * (the relay makes it, with CREATE); the TransactionalId's ACL and a transaction coordinator,
 * with the relay's id + ".check" (kafka_txn_probe: no relay fenced). 0, or -1 with err. */
int sink_kafka_txn_check(const struct sink_config *cfg, char *err, size_t errlen);

#endif
