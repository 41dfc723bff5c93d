/* Exactly-once into Kafka, the relay's side (OUTBOX_EXACTLY_ONCE; the sink's side is
 * sink/kafka_txn.c). The table's lease partitions form transaction groups
 * (OUTBOX_TRANSACTION_GROUPS; one by default), each with a transactional.id and a progress
 * record of its own. A relay that holds all of a group's lease partitions asks the sink to
 * fence every older producer of the group's id and to read its progress record, records in
 * PostgreSQL the rows it lists (by id and event id, still PENDING), and only then claims the
 * group's rows. A group's claims stop whenever its producer's session changes (a lease loss,
 * a fatal error, the group handed back: sink_txn_epoch) until the next one has been through
 * the same. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

#define EOS_RETRY_MS 1000
#define EOS_RETRY_MAX_MS 10000

static void free_pending(struct eos_group *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->event_ids[i]);
    free(e->ids);
    free(e->event_ids);
    e->ids = NULL;
    e->event_ids = NULL;
    e->n = 0;
    e->pending_epoch = 0;
}

/* A group may be claimed: recorded, and held whole (not handed back, draining). */
int eos_claims_allowed(const struct relay *r)
{
    if (!r->cfg->exactly_once)
        return 1;
    for (int g = 0; g < eos_groups(r->cfg); g++)
        if (eos_group_ready(r, g) && eos_group_held(r, g))
            return 1;
    return 0;
}

/* The group was handed back whole while its producer session stood (lease.c: before its
 * partitions are released): the session ends, so that holding the group again fences and
 * reads its record anew. Not
 * while its fence and read (asked to stop) or a commit runs: the next tick tries again, and
 * the group is neither claimed nor opened meanwhile. 0 once closed. */
static int group_released(struct relay *r, int group)
{
    struct eos_group *e = &r->eos.g[group];
    free_pending(e);
    e->ready_epoch = 0;
    if (sink_txn_close(r->sink, group) != 0)
        return -1;
    e->released = 0;
    e->retry_ms = 0; /* (a fence asked to stop reported a failure: no backoff for the next) */
    e->open_due_ms = 0;
    e->last_err[0] = '\0';
    log_info("exactly-once: transaction group %d handed back; its producer was closed", group);
    return 0;
}

void eos_tick(struct relay *r)
{
    if (!r->cfg->exactly_once)
        return;
    for (int g = 0; g < eos_groups(r->cfg); g++) /* (in any mode: a reset releases too) */
        if (r->eos.g[g].released)
            group_released(r, g);
    if (r->mode != MODE_RUNNING)
        return;
    struct strbuf parts;
    strbuf_init(&parts);
    int active = lease_activate_due(r, &parts);
    strbuf_destroy(&parts);
    int groups = eos_groups(r->cfg), whole = 0;
    int64_t now = mono_ms();
    for (int g = 0; g < groups; g++) {
        struct eos_group *e = &r->eos.g[g];
        if (!eos_group_held(r, g))
            continue;
        whole++;
        if (e->released || e->opening || sink_txn_epoch(r->sink, g) || now < e->open_due_ms)
            continue;
        if (sink_txn_open(r->sink, g) == 0) {
            e->opening = 1;
            e->open_sent_ms = now;
            if (groups == 1)
                log_info("exactly-once: fencing older producers of %s and reading its progress record",
                         r->cfg->transactional_id);
            else
                log_info("exactly-once: fencing older producers of transaction group %d of %d "
                         "(transactional.id %.*s.g%d) and reading its progress record", g, groups,
                         (int)strlen(r->cfg->transactional_id) - 3, r->cfg->transactional_id, g);
        }
    }
    long held;
    if (!whole && lease_held(r) > 0 && log_limit_due(&r->eos.wait_log, 10000, &held))
        log_info("exactly-once: %d of %d lease partitions active; publishing starts once this relay "
                 "holds all %d of a transaction group (a relay of the table that is not in "
                 "exactly-once mode holds the others?)", active, OUTBOX_LEASE_PARTITIONS,
                 OUTBOX_LEASE_PARTITIONS / groups);
}

void eos_on_recovered(struct relay *r, int group, uint64_t epoch, const int64_t *ids, char *const *event_ids,
                      size_t n, const char *err)
{
    struct eos_group *e = &r->eos.g[group];
    e->opening = 0;
    free_pending(e);
    long held;
    if (err) { /* (the same failure again and again, a missing ACL say: tried again after 1 s,
                * then twice as long each time up to 10 s; said when it changes, else at most
                * every 30 s) */
        e->retry_ms = e->retry_ms ? e->retry_ms * 2 : EOS_RETRY_MS;
        if (e->retry_ms > EOS_RETRY_MAX_MS)
            e->retry_ms = EOS_RETRY_MAX_MS;
        int changed = strncmp(e->last_err, err, sizeof(e->last_err) - 1) != 0;
        snprintf(e->last_err, sizeof(e->last_err), "%s", err);
        if (log_limit_due(&e->fail_log, 30000, &held) || changed)
            log_warn("exactly-once: %s; nothing is published until it succeeds; trying again in %d ms%s",
                     err, e->retry_ms, held ? " (it failed meanwhile too)" : "");
        e->open_due_ms = mono_ms() + e->retry_ms;
        relay_want_kick(r);
        return;
    }
    e->retry_ms = 0;
    e->last_err[0] = '\0';
    r->m.eos_fence_ms = mono_ms() - e->open_sent_ms;
    if (n == 0) {
        e->ready_epoch = epoch;
        sink_txn_ready(r->sink, group, epoch);
        log_info("exactly-once: older producers fenced and the progress record read in %lld ms "
                 "(nothing committed left to record); claiming", (long long)r->m.eos_fence_ms);
        claim_want(r);
        relay_want_kick(r);
        return;
    }
    e->pending_epoch = epoch;
    e->ids = xmalloc(n * sizeof(*e->ids));
    e->event_ids = xmalloc(n * sizeof(*e->event_ids));
    for (size_t i = 0; i < n; i++) {
        e->ids[i] = ids[i];
        e->event_ids[i] = xstrdup(event_ids[i]);
    }
    e->n = n;
    relay_want_kick(r);
}

int eos_recover_due(const struct relay *r)
{
    for (int g = 0; g < eos_groups(r->cfg); g++)
        if (r->eos.g[g].pending_epoch != 0)
            return 1;
    return 0;
}

static void recover_ok(struct relay *r, PGresult *res)
{
    int g = r->eos.sent_group;
    struct eos_group *e = &r->eos.g[g];
    long long done = PQntuples(res) ? atoll(PQgetvalue(res, 0, 0)) : 0;
    r->m.eos_recovered_total += (uint64_t)done;
    /* the session the statement was sent for, if it is still the producer's (a new one
     * reads its own record) */
    if (e->sent_epoch == e->pending_epoch && e->sent_epoch == sink_txn_epoch(r->sink, g)) {
        e->ready_epoch = e->sent_epoch;
        sink_txn_ready(r->sink, g, e->sent_epoch);
        /* the rows stay in this session's progress records until every standby has their
         * records too (eos_tail.c): a failover now must not make them PENDING unlisted */
        for (size_t i = 0; i < e->n; i++) {
            sink_txn_carry(r->sink, g, e->sent_epoch, e->ids[i], e->event_ids[i]);
            eos_tail_recorded(r, g, e->ids[i]);
        }
        log_info("exactly-once: older producers fenced and the progress record read in %lld ms: %zu "
                 "rows committed to Kafka and not seen recorded, %lld of them recorded now (the rest "
                 "were already); claiming", (long long)r->m.eos_fence_ms, e->n, done);
        claim_want(r);
    }
    if (e->pending_epoch == e->sent_epoch) /* (a newer session's rows wait for their own) */
        free_pending(e);
}

static const struct worker_stmt recover_stmt = {
    .what = "recording rows from the progress record", .on_ok = recover_ok};

void eos_recover_send(struct relay *r)
{
    int g = 0;
    for (; g < eos_groups(r->cfg); g++) {
        struct eos_group *e = &r->eos.g[g];
        if (e->pending_epoch && e->pending_epoch != sink_txn_epoch(r->sink, g))
            free_pending(e); /* that producer session is gone */
        if (e->pending_epoch)
            break;
    }
    if (g == eos_groups(r->cfg))
        return;
    struct eos_group *e = &r->eos.g[g];
    struct strbuf ids, eids;
    strbuf_init(&ids);
    strbuf_init(&eids);
    pgarray_open(&ids);
    pgarray_open(&eids);
    for (size_t i = 0; i < e->n; i++) {
        pgarray_int(&ids, e->ids[i]);
        pgarray_str(&eids, e->event_ids[i]);
    }
    pgarray_close(&ids);
    pgarray_close(&eids);
    const char *params[2] = {ids.buf, eids.buf};
    if (worker_send(r, &recover_stmt, r->sql.recover, 2, params) == 0) {
        e->sent_epoch = e->pending_epoch;
        r->eos.sent_group = g;
    }
    strbuf_destroy(&ids);
    strbuf_destroy(&eids);
}

void eos_destroy(struct relay *r)
{
    for (int g = 0; g < OUTBOX_LEASE_PARTITIONS; g++)
        free_pending(&r->eos.g[g]);
}
