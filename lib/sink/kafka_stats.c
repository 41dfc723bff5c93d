/* The Kafka sink's statistics (kafka_int.h): from librdkafka's statistics JSON, every
 * statistics.interval.ms on the loop thread, the brokers up and each topic's partition
 * count (a change is logged and told to the relay). */
#include <jansson.h>

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "sink/kafka_int.h"

/* A topic whose partition count grows sends keys to other partitions (murmur2 modulo the
 * count): later events of a key may land on another partition than its earlier ones, so
 * per-key order across the change is not kept. Say so once per change. */
static void note_partitions(struct kafka_sink *sk, const char *topic, int count)
{
    for (size_t i = 0; i < sk->n_parts; i++) {
        struct topic_parts *t = &sk->parts[i];
        if (strcmp(t->topic, topic) != 0)
            continue;
        if (count != t->count) {
            log_warn("kafka: topic %s has %d partitions, was %d: keys now hash to other "
                     "partitions, so per-key order across this change is not kept (consumers "
                     "see a key's later events on another partition)", topic, count, t->count);
            sk->partition_changes++;
            t->count = count;
            if (sk->cb.on_partitions)
                sk->cb.on_partitions(sk->ctx, topic, count);
        }
        return;
    }
    sk->parts = xrealloc(sk->parts, (sk->n_parts + 1) * sizeof(*sk->parts));
    sk->parts[sk->n_parts++] = (struct topic_parts){xstrdup(topic), count};
    if (sk->cb.on_partitions)
        sk->cb.on_partitions(sk->ctx, topic, count);
}

static void stats_topics(struct kafka_sink *sk, json_t *topics)
{
    const char *name;
    json_t *t;
    json_object_foreach(topics, name, t) {
        json_t *parts = json_object_get(t, "partitions");
        if (!json_is_object(parts))
            continue;
        int count = 0;
        const char *id;
        json_t *p;
        json_object_foreach(parts, id, p)
            count += strcmp(id, "-1") != 0; /* -1: librdkafka's unassigned queue */
        if (count > 0)
            note_partitions(sk, name, count);
    }
}

void kafka_stats(struct kafka_sink *sk, const char *json)
{
    json_t *root = json_loads(json, 0, NULL);
    json_t *topics = root ? json_object_get(root, "topics") : NULL;
    if (json_is_object(topics))
        stats_topics(sk, topics);
    json_t *brokers = root ? json_object_get(root, "brokers") : NULL;
    if (json_is_object(brokers)) {
        int up = 0;
        const char *name;
        json_t *b;
        json_object_foreach(brokers, name, b) {
            json_t *nodeid = json_object_get(b, "nodeid");
            const char *state = json_string_value(json_object_get(b, "state"));
            if (json_integer_value(nodeid) >= 0 && state && strcmp(state, "UP") == 0)
                up++;
        }
        sk->brokers_up = up;
        if (up > 0)
            sk->brokers_down = 0;
    }
    json_decref(root);
}

void kafka_stats_free(struct kafka_sink *sk)
{
    for (size_t i = 0; i < sk->n_parts; i++)
        free(sk->parts[i].topic);
    free(sk->parts);
    sk->parts = NULL;
    sk->n_parts = 0;
}
