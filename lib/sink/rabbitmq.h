/* The RabbitMQ sink: persistent messages to a durable topic exchange with publisher confirms
 * and the mandatory flag, through librabbitmq on a thread of its own (the library blocks in
 * its calls; librdkafka has its threads too). Completions come back to the libev loop
 * through a pipe and are served on the loop thread, as the Kafka sink's are. */
#ifndef OUTBOX_SINK_RABBITMQ_H
#define OUTBOX_SINK_RABBITMQ_H

#include "sink/sink.h"

struct sink *sink_rabbitmq_new(struct ev_loop *loop, const struct sink_config *cfg,
                               const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen);
/* A RabbitMQ error as the relay takes it. */
enum failure_reason sink_rabbitmq_classify(int err);
/* --check-config: connects, logs in, opens a channel and declares (or finds) the exchange,
 * once. 0, or -1 with err saying what the broker refused. */
int sink_rabbitmq_check(const struct sink_config *cfg, char *err, size_t errlen);
/* librabbitmq's version, for --version. */
const char *sink_rabbitmq_version(void);

#endif
