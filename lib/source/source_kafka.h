/* The Kafka source: a consumer in a group whose offsets are stored by hand after each
 * commit, and an idempotent producer for dead letters (INBOX_DEAD_LETTER_TOPIC). */
#ifndef OUTBOX_INBOX_SOURCE_KAFKA_H
#define OUTBOX_INBOX_SOURCE_KAFKA_H

#include "source/source.h"

/* Subscribes to cfg->topics in the group outbox-inbox.<INBOX_NAME> (or INBOX_KAFKA_GROUP_ID),
 * from the earliest offset kept for a new group. */
struct source *source_kafka_new(const struct source_config *cfg, char *err, size_t errlen);

#endif
