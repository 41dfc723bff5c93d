/* The RabbitMQ source of outbox-inbox (INBOX_SOURCE=rabbitmq): manual acknowledgements after
 * the commit, dead letters with publisher confirms (source_rabbitmq.c). */
#ifndef OUTBOX_INBOX_SOURCE_RABBITMQ_H
#define OUTBOX_INBOX_SOURCE_RABBITMQ_H

#include "source/source.h"

struct source *source_rabbitmq_new(const struct source_config *cfg, char *err, size_t errlen);
/* --check-config: logs in and finds every queue once. 0, or -1 with err. */
int source_rabbitmq_check(const struct source_config *cfg, char *err, size_t errlen);

#endif
