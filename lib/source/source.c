/* Picking the source (INBOX_SOURCE: Kafka unless it says rabbitmq), and what every source's
 * messages share. */
#include "source/source.h"

#include <string.h>

#include "source/source_kafka.h"
#include "source/source_rabbitmq.h"

struct source *source_new(const struct source_config *cfg, char *err, size_t errlen)
{
    if (cfg->rabbitmq)
        return source_rabbitmq_new(cfg, err, errlen);
    return source_kafka_new(cfg, err, errlen);
}

const char *source_header_last(const struct source_msg *m, const char *name, size_t *len)
{
    for (size_t i = m->n_headers; i-- > 0;)
        if (strcmp(m->headers[i].name, name) == 0) {
            *len = m->headers[i].len;
            return m->headers[i].value;
        }
    return NULL;
}
