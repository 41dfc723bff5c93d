/* Exactly-once, the progress record's rows as the relay tells of them (sink/kafka_txn.c
 * keeps them): carried over from an earlier producer's record, recorded in PostgreSQL and
 * kept until the standbys have their records, then let go by version (eos_tail.c); and the
 * transactions' figures. A Kafka sink has one producer, so one group: group is 0 (sink/kafka_lanes.c
 * holds one sink per group when there are several). */
#include "sink/kafka_int.h"
#include "sink/progress.h"

void kafka_txn_carry(struct sink *base, int group, uint64_t epoch, int64_t row_id, const char *event_id)
{
    (void)group; /* one producer: its group */
    struct kafka_txn *t = ((struct kafka_sink *)base)->txn;
    if (t && epoch && epoch == t->epoch)
        progress_put(&t->committed, row_id, event_id);
}

uint64_t kafka_txn_version(const struct sink *base, int group, int64_t row_id)
{
    (void)group; /* one producer: its group */
    const struct kafka_txn *t = ((const struct kafka_sink *)base)->txn;
    return t ? progress_version(&t->committed, row_id) : 0;
}

void kafka_txn_release(struct sink *base, int group, int64_t row_id, uint64_t version)
{
    (void)group; /* one producer: its group */
    struct kafka_txn *t = ((struct kafka_sink *)base)->txn;
    if (t)
        progress_del_version(&t->committed, row_id, version);
}

void kafka_txn_kept(struct sink *base, int group, size_t n)
{
    (void)group; /* one producer: its group */
    struct kafka_txn *t = ((struct kafka_sink *)base)->txn;
    if (t)
        t->kept = n;
}

void kafka_txn_stats(const struct sink *base, struct sink_txn_stats *out)
{
    const struct kafka_txn *t = ((const struct kafka_sink *)base)->txn;
    if (!t)
        return;
    *out = t->stats;
    out->open_since_ms = (t->state == TXN_OPEN || t->state == TXN_ENDING) && t->n_held ? t->opened_ms : 0;
}
