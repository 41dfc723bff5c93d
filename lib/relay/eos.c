/* Exactly-once into Kafka, the relay's side (OUTBOX_EXACTLY_ONCE; the sink's side is
 * sink/kafka_txn.c). The table is one transaction group: the relay that holds all of its
 * lease partitions asks the sink to fence every older producer of the table's
 * transactional.id and to read the progress record, records in PostgreSQL the rows it
 * lists (by id and event id, still PENDING), and only then claims. Claims stop whenever the
 * producer's session changes (a lease loss, a fatal error: sink_txn_epoch) until the next
 * one has been through the same. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

#define EOS_RETRY_MS 1000
#define EOS_RETRY_MAX_MS 10000

static void free_pending(struct relay *r)
{
    for (size_t i = 0; i < r->eos.n; i++)
        free(r->eos.event_ids[i]);
    free(r->eos.ids);
    free(r->eos.event_ids);
    r->eos.ids = NULL;
    r->eos.event_ids = NULL;
    r->eos.n = 0;
    r->eos.pending_epoch = 0;
}

int eos_claims_allowed(const struct relay *r)
{
    return !r->cfg->exactly_once ||
           (r->eos.ready_epoch && r->eos.ready_epoch == sink_txn_epoch(r->sink));
}

void eos_tick(struct relay *r)
{
    if (!r->cfg->exactly_once || r->mode != MODE_RUNNING || r->eos.opening ||
        sink_txn_epoch(r->sink) || mono_ms() < r->eos.open_due_ms)
        return;
    struct strbuf parts;
    strbuf_init(&parts);
    int active = lease_activate_due(r, &parts);
    strbuf_destroy(&parts);
    if (active < OUTBOX_LEASE_PARTITIONS) {
        long held;
        if (lease_held(r) > 0 && log_limit_due(&r->eos.wait_log, 10000, &held))
            log_info("exactly-once: %d of %d lease partitions active; publishing starts once this "
                     "relay holds them all (a relay of the table that is not in exactly-once mode "
                     "holds the others?)", active, OUTBOX_LEASE_PARTITIONS);
        return;
    }
    if (sink_txn_open(r->sink) == 0) {
        r->eos.opening = 1;
        r->eos.open_sent_ms = mono_ms();
        log_info("exactly-once: fencing older producers of %s and reading its progress record",
                 r->cfg->transactional_id);
    }
}

void eos_on_recovered(struct relay *r, uint64_t epoch, const int64_t *ids, char *const *event_ids,
                      size_t n, const char *err)
{
    r->eos.opening = 0;
    free_pending(r);
    long held;
    if (err) { /* (the same failure again and again, a missing ACL say: tried again after 1 s,
                * then twice as long each time up to 10 s; said when it changes, else at most
                * every 30 s) */
        r->eos.retry_ms = r->eos.retry_ms ? r->eos.retry_ms * 2 : EOS_RETRY_MS;
        if (r->eos.retry_ms > EOS_RETRY_MAX_MS)
            r->eos.retry_ms = EOS_RETRY_MAX_MS;
        int changed = strncmp(r->eos.last_err, err, sizeof(r->eos.last_err) - 1) != 0;
        snprintf(r->eos.last_err, sizeof(r->eos.last_err), "%s", err);
        if (log_limit_due(&r->eos.fail_log, 30000, &held) || changed)
            log_warn("exactly-once: %s; nothing is published until it succeeds; trying again in %d ms%s",
                     err, r->eos.retry_ms, held ? " (it failed meanwhile too)" : "");
        r->eos.open_due_ms = mono_ms() + r->eos.retry_ms;
        relay_want_kick(r);
        return;
    }
    r->eos.retry_ms = 0;
    r->eos.last_err[0] = '\0';
    r->m.eos_fence_ms = mono_ms() - r->eos.open_sent_ms;
    if (n == 0) {
        r->eos.ready_epoch = epoch;
        sink_txn_ready(r->sink, epoch);
        log_info("exactly-once: older producers fenced and the progress record read in %lld ms "
                 "(nothing committed left to record); claiming", (long long)r->m.eos_fence_ms);
        claim_want(r);
        relay_want_kick(r);
        return;
    }
    r->eos.pending_epoch = epoch;
    r->eos.ids = xmalloc(n * sizeof(*r->eos.ids));
    r->eos.event_ids = xmalloc(n * sizeof(*r->eos.event_ids));
    for (size_t i = 0; i < n; i++) {
        r->eos.ids[i] = ids[i];
        r->eos.event_ids[i] = xstrdup(event_ids[i]);
    }
    r->eos.n = n;
    relay_want_kick(r);
}

int eos_recover_due(const struct relay *r)
{
    return r->eos.pending_epoch != 0;
}

static void recover_ok(struct relay *r, PGresult *res)
{
    long long done = PQntuples(res) ? atoll(PQgetvalue(res, 0, 0)) : 0;
    r->m.eos_recovered_total += (uint64_t)done;
    /* the session the statement was sent for, if it is still the producer's (a new one
     * reads its own record) */
    if (r->eos.sent_epoch == r->eos.pending_epoch && r->eos.sent_epoch == sink_txn_epoch(r->sink)) {
        r->eos.ready_epoch = r->eos.sent_epoch;
        sink_txn_ready(r->sink, r->eos.sent_epoch);
        /* the rows stay in this session's progress records until every standby has their
         * records too (eos_tail.c): a failover now must not make them PENDING unlisted */
        for (size_t i = 0; i < r->eos.n; i++) {
            sink_txn_carry(r->sink, r->eos.sent_epoch, r->eos.ids[i], r->eos.event_ids[i]);
            eos_tail_recorded(r, r->eos.ids[i]);
        }
        log_info("exactly-once: older producers fenced and the progress record read in %lld ms: %zu "
                 "rows committed to Kafka and not seen recorded, %lld of them recorded now (the rest "
                 "were already); claiming", (long long)r->m.eos_fence_ms, r->eos.n, done);
        claim_want(r);
    }
    if (r->eos.pending_epoch == r->eos.sent_epoch) /* (a newer session's rows wait for their own) */
        free_pending(r);
}

static const struct worker_stmt recover_stmt = {
    .what = "recording rows from the progress record", .on_ok = recover_ok};

void eos_recover_send(struct relay *r)
{
    if (r->eos.pending_epoch != sink_txn_epoch(r->sink)) { /* that producer session is gone */
        free_pending(r);
        return;
    }
    struct strbuf ids, eids;
    strbuf_init(&ids);
    strbuf_init(&eids);
    pgarray_open(&ids);
    pgarray_open(&eids);
    for (size_t i = 0; i < r->eos.n; i++) {
        pgarray_int(&ids, r->eos.ids[i]);
        pgarray_str(&eids, r->eos.event_ids[i]);
    }
    pgarray_close(&ids);
    pgarray_close(&eids);
    const char *params[2] = {ids.buf, eids.buf};
    if (worker_send(r, &recover_stmt, r->sql.recover, 2, params) == 0)
        r->eos.sent_epoch = r->eos.pending_epoch;
    strbuf_destroy(&ids);
    strbuf_destroy(&eids);
}

void eos_destroy(struct relay *r)
{
    free_pending(r);
}
