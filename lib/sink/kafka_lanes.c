/* Exactly-once with several transaction groups (OUTBOX_TRANSACTION_GROUPS > 1): one Kafka
 * sink per group, each with its producer, transactional.id (group 0's with .g0 made .g<g>),
 * progress record key, transactions' thread and fence, behind one sink. A message goes to
 * its group's producer (message.txn_group: the group of its row's lease partition); the
 * transactional calls name their group; everything else (reports, polling, the queue's
 * length, a reset) covers them all. Kafka fences only a producer with the same
 * transactional.id, so a group's id moves between relays with its lease partitions, and a
 * relay fences and reads a group's record when it comes to hold the group, not the table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "sink/kafka.h"

struct lane {
    struct kafka_lanes *ls;
    int group;
    struct sink *sk;
    struct sink_config cfg; /* the relay's, with this group's id and key */
    char *id;
};

struct kafka_lanes {
    struct sink base; /* first */
    struct sink_callbacks cb;
    void *ctx;
    int n;
    struct lane lane[];
};

static const struct sink_ops lanes_ops;

/* ---- each group's sink reports through the relay's callbacks ---------------------- */

static void l_delivery(void *ctx, int64_t row_id, int err, const char *topic, int maybe_persisted)
{
    struct lane *l = ctx;
    l->ls->cb.on_delivery(l->ls->ctx, row_id, err, topic, maybe_persisted);
}

static void l_fatal(void *ctx, const char *reason)
{
    struct lane *l = ctx;
    char why[600];
    snprintf(why, sizeof(why), "transaction group %d: %s", l->group, reason);
    l->ls->cb.on_fatal(l->ls->ctx, why);
}

static void l_partitions(void *ctx, const char *topic, int count)
{
    struct lane *l = ctx;
    l->ls->cb.on_partitions(l->ls->ctx, topic, count);
}

static void l_recovered(void *ctx, int group, uint64_t epoch, const int64_t *ids, char *const *event_ids,
                        size_t n, const char *err)
{
    struct lane *l = ctx;
    (void)group; /* the lane's sink has one: 0 */
    l->ls->cb.on_recovered(l->ls->ctx, l->group, epoch, ids, event_ids, n, err);
}

static const struct sink_callbacks lane_cb = {l_delivery, l_fatal, l_partitions, l_recovered};

/* ---- the sink ------------------------------------------------------------------- */

static struct lane *lane_of(const struct sink *base, int group)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    return &ls->lane[group >= 0 && group < ls->n ? group : 0];
}

static void l_free(struct sink *base)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    for (int g = 0; g < ls->n; g++) {
        sink_free(ls->lane[g].sk);
        free(ls->lane[g].id);
    }
    free(ls);
}

static enum sink_queued l_produce(struct sink *base, const struct message *msg, const char *key, const char *value,
                                  size_t value_len, int64_t timestamp_ms, int64_t row_id, int *err)
{
    return sink_produce(lane_of(base, msg->txn_group)->sk, msg, key, value, value_len, timestamp_ms, row_id, err);
}

static int l_recreate(struct sink *base, char *err, size_t errlen)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    int rc = 0;
    for (int g = 0; g < ls->n; g++)
        if (sink_recreate(ls->lane[g].sk, err, errlen) != 0)
            rc = -1; /* (the others are made anyway: the relay calls again) */
    return rc;
}

static void l_poll(struct sink *base)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    for (int g = 0; g < ls->n; g++)
        sink_poll(ls->lane[g].sk);
}

static int l_outq_len(struct sink *base)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    int n = 0;
    for (int g = 0; g < ls->n; g++)
        n += sink_outq_len(ls->lane[g].sk);
    return n;
}

static int l_brokers_up(struct sink *base)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    int up = sink_brokers_up(ls->lane[0].sk);
    for (int g = 1; g < ls->n; g++) { /* the fewest any producer has */
        int u = sink_brokers_up(ls->lane[g].sk);
        up = u < up ? u : up;
    }
    return up;
}

static long long l_max_message_bytes(const struct sink *base)
{
    return sink_max_message_bytes(lane_of(base, 0)->sk); /* one configuration for all */
}

static uint64_t l_partition_changes(const struct sink *base)
{
    const struct kafka_lanes *ls = (const struct kafka_lanes *)base;
    uint64_t n = 0;
    for (int g = 0; g < ls->n; g++) { /* (each producer sees a change: the most any saw) */
        uint64_t c = sink_partition_changes(ls->lane[g].sk);
        n = c > n ? c : n;
    }
    return n;
}

static uint64_t l_unconfirmed(const struct sink *base)
{
    const struct kafka_lanes *ls = (const struct kafka_lanes *)base;
    uint64_t n = 0;
    for (int g = 0; g < ls->n; g++)
        n += sink_unconfirmed(ls->lane[g].sk);
    return n;
}

static void l_abandon(struct sink *base, int timeout_ms)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    for (int g = 0; g < ls->n; g++)
        sink_abandon(ls->lane[g].sk, timeout_ms);
}

static int l_txn_open(struct sink *base, int group)
{
    return sink_txn_open(lane_of(base, group)->sk, 0);
}

static uint64_t l_txn_epoch(const struct sink *base, int group)
{
    return sink_txn_epoch(lane_of(base, group)->sk, 0);
}

static void l_txn_ready(struct sink *base, int group, uint64_t epoch)
{
    sink_txn_ready(lane_of(base, group)->sk, 0, epoch);
}

static void l_txn_carry(struct sink *base, int group, uint64_t epoch, int64_t row_id, const char *event_id)
{
    sink_txn_carry(lane_of(base, group)->sk, 0, epoch, row_id, event_id);
}

static uint64_t l_txn_version(const struct sink *base, int group, int64_t row_id)
{
    return sink_txn_version(lane_of(base, group)->sk, 0, row_id);
}

static void l_txn_release(struct sink *base, int group, int64_t row_id, uint64_t version)
{
    sink_txn_release(lane_of(base, group)->sk, 0, row_id, version);
}

static void l_txn_hold(struct sink *base, int on)
{
    struct kafka_lanes *ls = (struct kafka_lanes *)base;
    for (int g = 0; g < ls->n; g++)
        sink_txn_hold(ls->lane[g].sk, on);
}

static void l_txn_kept(struct sink *base, int group, size_t n)
{
    sink_txn_kept(lane_of(base, group)->sk, 0, n);
}

static int l_txn_close(struct sink *base, int group)
{
    return sink_txn_close(lane_of(base, group)->sk, 0);
}

/* The groups' figures added up; the open transaction's age is the oldest's. */
static void l_txn_stats(const struct sink *base, struct sink_txn_stats *out)
{
    const struct kafka_lanes *ls = (const struct kafka_lanes *)base;
    for (int g = 0; g < ls->n; g++) {
        struct sink_txn_stats s;
        sink_txn_stats(ls->lane[g].sk, &s);
        if (g == 0) {
            *out = s;
            continue;
        }
        out->committed += s.committed;
        out->aborted += s.aborted;
        out->fenced += s.fenced;
        if (s.open_since_ms && (!out->open_since_ms || s.open_since_ms < out->open_since_ms))
            out->open_since_ms = s.open_since_ms;
        for (size_t b = 0; b <= s.commit.n_bounds && b <= METRICS_MAX_BUCKETS; b++)
            out->commit.counts[b] += s.commit.counts[b];
        out->commit.sum += s.commit.sum;
        out->commit.count += s.commit.count;
    }
}

#ifdef OUTBOX_TEST_HOOKS
static void l_test_fatal(struct sink *base)
{
    sink_test_fatal(lane_of(base, 0)->sk);
}
#endif

static const struct sink_ops lanes_ops = {
    .name = "kafka",
    .max_message_name = "the producer's message.max.bytes",
    .free = l_free,
    .produce = l_produce,
    .recreate = l_recreate,
    .poll = l_poll,
    .outq_len = l_outq_len,
    .brokers_up = l_brokers_up,
    .max_message_bytes = l_max_message_bytes,
    .partition_changes = l_partition_changes,
    .unconfirmed = l_unconfirmed,
    .abandon = l_abandon,
    .classify = sink_kafka_classify,
    .err_str = sink_kafka_err_str,
    .partition = sink_kafka_partition,
    .txn_open = l_txn_open,
    .txn_epoch = l_txn_epoch,
    .txn_ready = l_txn_ready,
    .txn_carry = l_txn_carry,
    .txn_version = l_txn_version,
    .txn_release = l_txn_release,
    .txn_kept = l_txn_kept,
    .txn_hold = l_txn_hold,
    .txn_close = l_txn_close,
    .txn_stats = l_txn_stats,
#ifdef OUTBOX_TEST_HOOKS
    .test_fatal = l_test_fatal,
#endif
};

/* Group g's transactional.id (and progress record key): group 0's with its ".g0" made
 * ".g<g>". */
static char *group_id(const char *id0, int g)
{
    size_t len = strlen(id0);
    if (len >= 3 && strcmp(id0 + len - 3, ".g0") == 0)
        return xasprintf("%.*s.g%d", (int)(len - 3), id0, g);
    return xasprintf("%s.g%d", id0, g);
}

struct sink *sink_kafka_lanes_new(struct ev_loop *loop, const struct sink_config *cfg,
                                  const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen)
{
    int n = cfg->transaction_groups;
    struct kafka_lanes *ls = xcalloc(1, sizeof(*ls) + (size_t)n * sizeof(ls->lane[0]));
    ls->base.ops = &lanes_ops;
    ls->cb = *cb;
    ls->ctx = ctx;
    for (int g = 0; g < n; g++) {
        struct lane *l = &ls->lane[g];
        l->ls = ls;
        l->group = g;
        l->id = group_id(cfg->transactional_id, g);
        l->cfg = *cfg;
        l->cfg.transactional_id = l->id;
        l->cfg.progress_key = l->id; /* as group 0's: the key is the id */
        l->cfg.transaction_groups = 1;
        l->sk = sink_kafka_new(loop, &l->cfg, &lane_cb, l, err, errlen);
        if (!l->sk) {
            ls->n = g;
            free(l->id);
            l_free(&ls->base);
            return NULL;
        }
        ls->n = g + 1;
    }
    return &ls->base;
}
