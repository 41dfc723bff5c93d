/* Picking the sink. One broker today: Kafka. */
#include "sink/sink.h"

#include "sink/kafka.h"

struct sink *sink_new(struct ev_loop *loop, const struct config *cfg,
                      const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen)
{
    return sink_kafka_new(loop, cfg, cb, ctx, err, errlen);
}
