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

/* ---- a transaction held open for the rows on their way --------------------------------- */

static void hold_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kafka_sink *sk = w->data;
    struct kafka_txn *t = sk->txn;
    if (t->state == TXN_OPEN && t->n_held && t->outstanding == 0)
        kafka_txn_end(sk);
}

/* The relay says whether more rows are on their way: a claim under way (or due) after one
 * that came full. Held, an open transaction whose messages are all acknowledged waits for
 * them (at most TXN_MAX_MS from its first message) instead of ending: in a drain each claim
 * otherwise made a transaction of its own, and the next claim's rows waited for its commit
 * (about 1,000 rows a transaction, and claims that did not overlap the transactions). */
void kafka_txn_hold(struct sink *base, int on)
{
    struct kafka_sink *sk = (struct kafka_sink *)base;
    struct kafka_txn *t = sk->txn;
    if (!t || t->hold == on)
        return;
    if (!t->hold_timer.data) { /* (the first hold: kafka_txn_held_open starts it) */
        ev_init(&t->hold_timer, hold_cb);
        t->hold_timer.data = sk;
    }
    t->hold = on;
    if (!on && t->state == TXN_OPEN && t->n_held && t->outstanding == 0)
        kafka_txn_end(sk);
}
