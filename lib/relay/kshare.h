/* Kafka partitions' shares of the in-flight window. A partition without a leader (or a
 * very slow one) keeps its rows in the producer until it recovers; without a bound those
 * rows would fill the whole window and stop every other partition. Each Kafka partition
 * may hold at most `share` rows and `share_bytes` payload bytes in the producer; a row
 * beyond them is not produced (it stays
 * PENDING) and its key is held: later rows of that key are not produced either, and the
 * claim skips held keys, so the other keys of the same lease partitions keep flowing.
 * When the partition drains to half its share, its keys are claimed again. Pure
 * bookkeeping, no I/O. */
#ifndef OUTBOX_KSHARE_H
#define OUTBOX_KSHARE_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#define KSHARE_MAX_HELD 2048 /* held keys passed to the claim */
#define KSHARE_MAX_PARTITIONS 65536

struct kshare_topic {
    char *name;
    int count;     /* partitions, 0 while unknown */
    int n_slots;   /* allocated counters (the largest count seen) */
    int *inflight; /* rows in the producer, per partition */
    long long *bytes; /* their payload bytes */
    int *held;     /* keys held, per partition */
};

struct kshare_key {
    char *key;
    int kslot;
};

/* The sink's partition of a key among count (sink_ops.partition). */
typedef int32_t (*kshare_partitioner)(const char *key, size_t keylen, int count);

struct kshare {
    kshare_partitioner partition; /* NULL: the sink has no partitions, no shares apply */
    int share;
    long long share_bytes;
    struct kshare_topic *topics;
    size_t n_topics;
    struct kshare_key *held;
    size_t n_held;
};

enum kshare_verdict {
    KSHARE_ADMIT,   /* produce it */
    KSHARE_HOLD,    /* leave it PENDING; its key is held */
    KSHARE_HOLD_ALL /* leave it and the rest of the claim PENDING: no room to hold its key */
};

void kshare_init(struct kshare *ks, int share, long long share_bytes, kshare_partitioner partition);
void kshare_destroy(struct kshare *ks);
/* A topic's partition count (when first seen and whenever it changes). */
void kshare_set_count(struct kshare *ks, const char *topic, int count);
/* The slot of the row's Kafka partition (the sink's partitioner: murmur2 of the key, as the
 * producer partitions), or -1 while the topic's partition count is unknown or the sink has
 * no partitions (then no share applies). */
int kshare_slot(struct kshare *ks, const char *topic, const char *key, size_t keylen);
/* Whether a row of key in kslot may be produced now (see enum); holds the key if not.
 * *first is set when this hold is the partition's first since it was last drained. */
enum kshare_verdict kshare_admit(struct kshare *ks, int kslot, const char *key, int *first);
/* A row of kslot went into the producer / left it (delivered or failed). Leaving returns
 * the number of held keys freed: the partition drained to half its share. */
void kshare_produced(struct kshare *ks, int kslot, long long bytes);
int kshare_left(struct kshare *ks, int kslot, long long bytes);
/* Rows of kslot in the producer. */
int kshare_inflight(const struct kshare *ks, int kslot);
const char *kshare_topic(const struct kshare *ks, int kslot);
#define kshare_partition(kslot) ((kslot) < 0 ? -1 : (kslot) % KSHARE_MAX_PARTITIONS)
/* The producer was recreated: nothing is in it, no key is held. */
void kshare_clear(struct kshare *ks);
/* The held keys as a text[] literal for the claim. */
void kshare_held_literal(const struct kshare *ks, struct strbuf *out);

#endif
