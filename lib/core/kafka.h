/* Kafka helpers both programs use: one librdkafka log callback for every client, the hint
 * added to a refused login, and --check-config's reachability test. */
#ifndef OUTBOX_CORE_KAFKA_H
#define OUTBOX_CORE_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/settings.h"

/* librdkafka's log lines into ours, one callback for every client of both programs: syslog
 * levels 0-3 as errors, 4 as warnings, 5-6 as info for a producer (debug for a consumer,
 * whose notices repeat its group's life), 7 as debug; a consumer's CONFWARN (the relay's
 * producer settings it was given) at debug. */
void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
/* Words added to a Kafka authentication failure: librdkafka before 2.6.1 cannot log in
 * with SCRAM to Kafka 4.x brokers (it doubles the nonce in its final message, which 4.x
 * refuses as RFC 5802 asks), so a right password is refused there. "" when that cannot be
 * the cause (another mechanism, or a fixed librdkafka). */
const char *kafka_auth_hint(const rd_kafka_conf_t *conf);
/* Logs once per process, when librdkafka is older than 2.6.1 and conf (borrowed) logs in
 * with a SCRAM mechanism, that Kafka 4.x brokers will refuse the login. */
void kafka_warn_old_scram(const rd_kafka_conf_t *conf);
/* A consumer of the tools (outbox-tail, the tests' outbox-check) that assigns partitions
 * itself and commits nothing: bootstrap servers, a group id, whether it reports each
 * partition's end, and its isolation.level (NULL: librdkafka's read_committed). NULL with err
 * on failure. */
rd_kafka_t *kafka_reader_new(const char *bootstrap, const char *group, int partition_eof,
                             const char *isolation, char *err, size_t errlen);
/* The number of partitions of topic, from one metadata request (timeout_ms); -1 with err when
 * the request fails or the broker does not know the topic. */
int kafka_topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, char *err, size_t errlen);
/* The tools' way to read a whole topic without a consumer group's rebalance: waits until
 * the topic exists (asking again every retry_ms; the relay creates it with its first message)
 * or *stop is set, then assigns all its partitions at offset (RD_KAFKA_OFFSET_BEGINNING,
 * _END, ...). The number of partitions, or 0 when stopped first. */
int kafka_wait_assign_all(rd_kafka_t *rk, const char *topic, int64_t offset, int retry_ms,
                          const volatile sig_atomic_t *stop);
/* --check-config: reaches Kafka once with these properties (a metadata request, 10 s);
 * 0 when it answers, 1 otherwise; both logged. */
int kafka_check_reachable(const struct kafka_prop *props, size_t n);

#endif
