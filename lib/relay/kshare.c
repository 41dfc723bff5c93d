/* Kafka partitions' shares of the in-flight window (see kshare.h). */
#include "relay/kshare.h"

#include <stdlib.h>
#include <string.h>

#define SLOT(t, p) ((int)((t) * KSHARE_MAX_PARTITIONS + (p)))
#define SLOT_TOPIC(s) ((size_t)(s) / KSHARE_MAX_PARTITIONS)
#define SLOT_PART(s) ((s) % KSHARE_MAX_PARTITIONS)

void kshare_init(struct kshare *ks, int share, long long share_bytes, kshare_partitioner partition)
{
    memset(ks, 0, sizeof(*ks));
    ks->share = share > 0 ? share : 1;
    ks->share_bytes = share_bytes > 0 ? share_bytes : 1;
    ks->partition = partition;
}

static void free_held(struct kshare *ks)
{
    for (size_t i = 0; i < ks->n_held; i++)
        free(ks->held[i].key);
    ks->n_held = 0;
}

void kshare_destroy(struct kshare *ks)
{
    for (size_t i = 0; i < ks->n_topics; i++) {
        free(ks->topics[i].name);
        free(ks->topics[i].inflight);
        free(ks->topics[i].bytes);
        free(ks->topics[i].held);
    }
    free(ks->topics);
    free_held(ks);
    free(ks->held);
    memset(ks, 0, sizeof(*ks));
}

static struct kshare_topic *topic_get(struct kshare *ks, const char *name)
{
    for (size_t i = 0; i < ks->n_topics; i++)
        if (strcmp(ks->topics[i].name, name) == 0)
            return &ks->topics[i];
    ks->topics = xrealloc(ks->topics, (ks->n_topics + 1) * sizeof(*ks->topics));
    struct kshare_topic *t = &ks->topics[ks->n_topics++];
    *t = (struct kshare_topic){.name = xstrdup(name)};
    return t;
}

static void *grow(void *p, size_t elem, int from, int to)
{
    p = xrealloc(p, (size_t)to * elem);
    memset((char *)p + (size_t)from * elem, 0, (size_t)(to - from) * elem);
    return p;
}

void kshare_set_count(struct kshare *ks, const char *topic, int count)
{
    if (count < 1 || count > KSHARE_MAX_PARTITIONS)
        count = 0; /* no share for this topic */
    struct kshare_topic *t = topic_get(ks, topic);
    if (count > t->n_slots) { /* rows in flight keep their slots across a change */
        t->inflight = grow(t->inflight, sizeof(*t->inflight), t->n_slots, count);
        t->bytes = grow(t->bytes, sizeof(*t->bytes), t->n_slots, count);
        t->held = grow(t->held, sizeof(*t->held), t->n_slots, count);
        t->n_slots = count;
    }
    t->count = count;
}

int kshare_slot(struct kshare *ks, const char *topic, const char *key, size_t keylen)
{
    for (size_t i = 0; i < ks->n_topics; i++) {
        struct kshare_topic *t = &ks->topics[i];
        if (strcmp(t->name, topic) != 0)
            continue;
        if (t->count < 1 || !key || !ks->partition)
            return -1;
        int32_t p = ks->partition(key, keylen, t->count); /* the producer's own: pure with a key */
        return SLOT(i, p);
    }
    return -1;
}

static struct kshare_topic *slot_topic(const struct kshare *ks, int kslot)
{
    if (kslot < 0 || SLOT_TOPIC(kslot) >= ks->n_topics)
        return NULL;
    struct kshare_topic *t = &ks->topics[SLOT_TOPIC(kslot)];
    return SLOT_PART(kslot) < t->n_slots ? t : NULL;
}

int kshare_inflight(const struct kshare *ks, int kslot)
{
    struct kshare_topic *t = slot_topic(ks, kslot);
    return t ? t->inflight[SLOT_PART(kslot)] : 0;
}

const char *kshare_topic(const struct kshare *ks, int kslot)
{
    struct kshare_topic *t = slot_topic(ks, kslot);
    return t ? t->name : "?";
}

static int key_held(const struct kshare *ks, const char *key)
{
    for (size_t i = 0; i < ks->n_held; i++)
        if (strcmp(ks->held[i].key, key) == 0)
            return 1;
    return 0;
}

enum kshare_verdict kshare_admit(struct kshare *ks, int kslot, const char *key, int *first)
{
    *first = 0;
    if (ks->n_held && key_held(ks, key))
        return KSHARE_HOLD; /* an earlier row of its key waits: so does this one */
    struct kshare_topic *t = slot_topic(ks, kslot);
    int p = SLOT_PART(kslot);
    if (!t || (t->inflight[p] < ks->share && t->bytes[p] < ks->share_bytes))
        return KSHARE_ADMIT;
    if (ks->n_held >= KSHARE_MAX_HELD)
        return KSHARE_HOLD_ALL;
    if (ks->n_held % 64 == 0)
        ks->held = xrealloc(ks->held, (ks->n_held + 64) * sizeof(*ks->held));
    ks->held[ks->n_held++] = (struct kshare_key){xstrdup(key), kslot};
    *first = t->held[p]++ == 0;
    return KSHARE_HOLD;
}

void kshare_produced(struct kshare *ks, int kslot, long long bytes)
{
    struct kshare_topic *t = slot_topic(ks, kslot);
    if (t) {
        t->inflight[SLOT_PART(kslot)]++;
        t->bytes[SLOT_PART(kslot)] += bytes;
    }
}

int kshare_left(struct kshare *ks, int kslot, long long bytes)
{
    struct kshare_topic *t = slot_topic(ks, kslot);
    if (!t)
        return 0;
    int p = SLOT_PART(kslot);
    if (t->inflight[p] > 0)
        t->inflight[p]--;
    t->bytes[p] = t->bytes[p] > bytes ? t->bytes[p] - bytes : 0;
    if (!t->held[p] || t->inflight[p] > ks->share / 2 || t->bytes[p] > ks->share_bytes / 2)
        return 0;
    int freed = t->held[p];
    size_t kept = 0;
    for (size_t i = 0; i < ks->n_held; i++) {
        if (ks->held[i].kslot == kslot)
            free(ks->held[i].key);
        else
            ks->held[kept++] = ks->held[i];
    }
    ks->n_held = kept;
    t->held[p] = 0;
    return freed;
}

void kshare_clear(struct kshare *ks)
{
    for (size_t i = 0; i < ks->n_topics; i++) {
        struct kshare_topic *t = &ks->topics[i];
        memset(t->inflight, 0, (size_t)t->n_slots * sizeof(*t->inflight));
        memset(t->bytes, 0, (size_t)t->n_slots * sizeof(*t->bytes));
        memset(t->held, 0, (size_t)t->n_slots * sizeof(*t->held));
    }
    free_held(ks);
}

void kshare_held_literal(const struct kshare *ks, struct strbuf *out)
{
    pgarray_open(out);
    for (size_t i = 0; i < ks->n_held; i++)
        pgarray_str(out, ks->held[i].key);
    pgarray_close(out);
}
