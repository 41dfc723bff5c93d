/* The seam between outbox-inbox and a broker: a source hands over batches of messages in
 * the order they are to be applied, takes back the ones applied (their positions become
 * the group's progress), sends a message that failed for good to a dead-letter destination,
 * and reports what it holds (assigned partitions, lag). The apply loop, the dedupe key and
 * the handler call know only this interface; each broker is one file behind it
 * (source_kafka.c). */
#ifndef OUTBOX_SOURCE_SOURCE_H
#define OUTBOX_SOURCE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/settings.h"

/* What a source is told (outbox-inbox fills one from its settings: inbox_config_source in
 * inbox/inbox_config.h). The strings and the Kafka properties are borrowed. */
struct source_config {
    int rabbitmq;                  /* INBOX_SOURCE=rabbitmq: the RabbitMQ source, else Kafka */
    const char *name;              /* the inbox's name: the Kafka group outbox-inbox.<name> */
    const char *topics;            /* Kafka: "a,b,c" or "^regex" */
    const char *dead_letter_topic; /* "": none */
    const char *event_id_header;   /* RabbitMQ: the header holding the event id, or "auto" */
    int batch_size;                /* RabbitMQ: the prefetch is twice this */
    int retry_backoff_max_ms;      /* RabbitMQ: the longest wait between connection attempts */
    const struct kafka_prop *kafka; /* INBOX_KAFKA_* */
    size_t n_kafka;
    const char *rabbitmq_url, *rabbitmq_queues; /* queues: "a,b" */
    const char *rabbitmq_ca_file, *rabbitmq_cert_file, *rabbitmq_key_file;
};

struct source_header {
    const char *name;
    const char *value; /* NULL: a header without a value */
    size_t len;
};

/* One message, borrowed from the source until released. */
struct source_msg {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const char *key; /* NULL: no key */
    size_t key_len;
    const char *value; /* NULL: no value */
    size_t value_len;
    int64_t timestamp_ms; /* when it was produced, 0 when unknown */
    const struct source_header *headers; /* in the order sent */
    size_t n_headers;
    void *native; /* the source's own */
};

struct source_lag {
    char topic[250];
    int32_t partition;
    int64_t lag;
};

struct source;

struct source_ops {
    const char *name; /* "kafka" */
    /* Closes: commits what was marked done, leaves the group, flushes the dead letters. */
    void (*free)(struct source *src);
    /* Up to max messages ready, waiting up to wait_ms for the first; the number given. */
    int (*poll)(struct source *src, struct source_msg *out, int max, int wait_ms);
    void (*release)(struct source *src, struct source_msg *msgs, int n);
    /* msgs[0..n) are applied: their positions may be committed. */
    void (*done)(struct source *src, const struct source_msg *msgs, int n);
    /* Sends m with extra headers added to the dead-letter destination and waits for the
     * broker's answer, calling wait(ctx) between looks (it returns 1 to stop waiting).
     * 0 sent, 1 stopped before the answer, -1 refused (err says why). */
    int (*dead_letter)(struct source *src, const struct source_msg *m, const struct source_header *extra,
                       size_t n_extra, int (*wait)(void *ctx), void *ctx, char *err, size_t errlen);
    /* 1 when the source must be made again (credentials rotated); remake does it, without
     * the close (positions marked done since the last commit are delivered again). */
    int (*remake_wanted)(const struct source *src);
    int (*remake)(struct source *src, char *err, size_t errlen);
    /* Partitions assigned, and their lags (borrowed; n_lags set). */
    int (*assigned)(const struct source *src);
    const struct source_lag *(*lags)(const struct source *src, int *n_lags);
};

struct source {
    const struct source_ops *ops;
};

/* The source cfg asks for (cfg borrowed). NULL with err on failure. */
struct source *source_new(const struct source_config *cfg, char *err, size_t errlen);

/* The last value of header name (NULL if absent or without a value), with its length. */
const char *source_header_last(const struct source_msg *m, const char *name, size_t *len);

#endif
