/* Picking the sink: OUTBOX_SINK names it (Kafka unless it says rabbitmq). */
#include "sink/sink.h"

#include "sink/kafka.h"
#include "sink/rabbitmq.h"

struct sink *sink_new(struct ev_loop *loop, const struct sink_config *cfg,
                      const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen)
{
    if (cfg->rabbitmq)
        return sink_rabbitmq_new(loop, cfg, cb, ctx, err, errlen);
    if (cfg->transactional_id && cfg->transaction_groups > 1)
        return sink_kafka_lanes_new(loop, cfg, cb, ctx, err, errlen);
    return sink_kafka_new(loop, cfg, cb, ctx, err, errlen);
}
