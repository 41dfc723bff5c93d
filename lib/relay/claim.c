/* Claiming: the claim statement (per lease partition from its proven floor, in id order,
 * in-flight rows excluded, a quota per partition) and the probe that advances the floors'
 * proof (floor.h). When to claim again is poll.c's; recording rows as sent is record.c's. */
#include <signal.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* How often the floors' proof is advanced (one pg_locks read on the worker connection). */
#define FLOOR_PROBE_MS 250
/* Reading a partition from the bottom walks its whole dead head, which a long transaction
 * can make long: a claim that took seconds would outlast the lease deadline (no answer on
 * the worker session), lose the leases, reset the floors and start over. So a claim reads
 * at most bottom_k partitions from the bottom (the others that need it wait for a later
 * claim, in turn), bottom_k chosen from the last such claim so that it takes about
 * BOTTOM_TARGET_MS; partitions above their floors are in every claim. */
#define BOTTOM_TARGET_MS 300
/* One partition in turn is read from the bottom every SAFETY_PASS_MS (64 s for all of
 * them), a safety net for rows put back below the floors by hand (an UPDATE to PENDING
 * instead of `outbox-relay requeue`) — but never more than a SAFETY_COST_SHARE-th of the
 * worker session's time: the next pass waits SAFETY_COST_SHARE times as long as the claim
 * that carried the last one took. A long transaction keeps the dead head of every
 * partition, and reading one from the bottom once a second came to take most of the
 * session: in delete mode at 3,000 events/s under a REPEATABLE READ reader, every claim
 * carried a pass from t = 390 s (each took 3.5 s and more, so one was due every time), and
 * they grew to 27 s and the statement timeout, 241,439 pending at most (bench/overlap.sh,
 * PostgreSQL's log: every slow claim had exactly one partition from the bottom). */
#define SAFETY_PASS_MS 1000
#define SAFETY_COST_SHARE 20

/* The claim that carried the safety pass has ended: the next pass waits at least
 * SAFETY_COST_SHARE times as long as it took. */
static void safety_pace(struct relay *r)
{
    if (!r->claim.fc_safety)
        return;
    r->claim.fc_safety = 0;
    int64_t now = mono_ms();
    int64_t paced = now + SAFETY_COST_SHARE * (now - r->claim.sent_ms);
    if (paced > r->claim.safety_due_ms)
        r->claim.safety_due_ms = paced;
}

static int claim_limit(const struct relay *r)
{
    return r->claim.isolate_until_id ? 1 : r->cfg->batch_size;
}

/* Rows per partition in one claim: a quarter above a fair share of the batch, so that a
 * claim stays near the batch size without reading every partition's backlog. Every row a
 * partition gives is read (heap, filters) whether or not the batch keeps it: at twice the
 * share a 1,000-row claim over 64 partitions read 2,048 rows; at 5/4, 1,280 (PostgreSQL CPU
 * per event on a 50,000-row keep-mode backlog drain: 36-42 -> 35-36 us). The price: more
 * claims when partitions are uneven (a partition that fills its quota is claimed again at
 * once). */
int claim_quota(int limit, int nparts)
{
    if (nparts < 1)
        nparts = 1;
    int q = (limit + nparts - 1) / nparts * 5 / 4;
    return q < 16 ? (limit < 16 ? limit : 16) : q;
}

int claim_ready(const struct relay *r)
{
    return r->claim.wanted && r->mode == MODE_RUNNING && !r->claim.res &&
           (!r->claim.isolate_until_id || r->win.n == 0) &&
           r->win.n + (size_t)r->cfg->batch_size <= (size_t)r->cfg->max_inflight &&
           r->win.bytes < r->cfg->max_inflight_bytes;
}

/* Nothing of the last claim could go out (its Kafka partitions hold their shares): claim
 * again after the idle delay rather than at once. */
void claim_back_off(struct relay *r)
{
    r->claim.wanted = poll_after_claim(r, 0, claim_limit(r));
}

/* ---- claim --------------------------------------------------------------------- */

/* Whether the claim in flight started some partition above the bottom. */
static int claim_used_floors(const struct floor_claim *fc)
{
    for (int i = 0; i < fc->nparts; i++)
        if (fc->sent[i] > 0)
            return 1;
    return 0;
}

/* What the claim returned, for the floors: rows and the highest id per partition, and
 * whether its limit or byte budget cut it. */
static void claim_shape(struct relay *r, const PGresult *res)
{
    struct floor_claim *fc = &r->claim.fc;
    int n = PQntuples(res);
    long long bytes = 0;
    memset(fc->count, 0, sizeof(fc->count));
    for (int i = 0; i < n; i++) {
        int p = (int)pg_int(PQgetvalue(res, i, CLAIM_LEASE_PARTITION)) & (OUTBOX_LEASE_PARTITIONS - 1);
        int64_t id = pg_int(PQgetvalue(res, i, CLAIM_ID));
        fc->count[p]++;
        fc->last[p] = id;
        bytes += pg_int(PQgetvalue(res, i, CLAIM_PAYLOAD_BYTES));
        if (id > r->claim.claimed_high)
            r->claim.claimed_high = id;
    }
    fc->cut = n >= r->claim.limit || bytes >= r->claim.budget;
    fc->cut_at = n ? pg_int(PQgetvalue(res, n - 1, CLAIM_ID)) : 0;
}

/* The doorbell's requeue count as a claim or a probe read it: whether it changed (rows
 * were requeued below the floors). */
static int requeue_count_changed(struct relay *r, long long count)
{
    int changed = r->claim.requeued_known && count != r->claim.requeued;
    r->claim.requeued = count;
    r->claim.requeued_known = 1;
    return changed;
}

/* A requeue (the count changed in the claim's snapshot) put rows back below the floors: a
 * claim that started above them cannot be used. Returns 1 if it was dropped. */
static int claim_requeue_seen(struct relay *r, PGresult *res)
{
    if (PQntuples(res) == 0)
        return 0; /* nothing to publish out of order; the next probe reads the count */
    if (!requeue_count_changed(r, pg_int(PQgetvalue(res, 0, CLAIM_REQUEUED))) ||
        !claim_used_floors(&r->claim.fc))
        return 0;
    log_info("claim: parked rows were requeued; claiming from the bottom");
    claim_floors_reset(r, "requeue");
    PQclear(res);
    r->claim.wanted = 1;
    return 1;
}

void claim_result(struct relay *r, PGresult *res)
{
    safety_pace(r);
    r->m.claims_total++;
    if (r->claim.fc_bottom > 0) { /* partitions per claim from the bottom, for BOTTOM_TARGET_MS */
        int64_t per = (mono_ms() - r->claim.sent_ms) / r->claim.fc_bottom;
        int64_t k = BOTTOM_TARGET_MS / (per > 0 ? per : 1);
        r->claim.bottom_k = k < 1 ? 1 : k > OUTBOX_LEASE_PARTITIONS ? OUTBOX_LEASE_PARTITIONS : (int)k;
    }
    if (r->mode == MODE_RUNNING && claim_requeue_seen(r, res))
        return;
    int n = PQntuples(res);
    r->claim.full = n >= r->claim.limit;
    if (r->mode == MODE_RUNNING) {
        claim_shape(r, res);
        if (r->claim.floors_on)
            floors_after_claim(&r->claim.floors, &r->claim.fc);
    }
    if (r->mode != MODE_RUNNING || n == 0)
        PQclear(res);
    if (r->mode != MODE_RUNNING)
        return;
    if (n > 0 && r->payload_bytea && pg_bytes_decode(&r->claim.payloads, res, CLAIM_PAYLOAD) != 0) {
        log_error("claim: a bytea payload did not come as hex; claiming again");
        claim_floors_reset(r, "claim not used");
        PQclear(res);
        r->claim.wanted = 1;
        return;
    }
    if (n == 0) {
        claim_isolation_end(r, "nothing left to isolate");
        /* partitions left out of this claim (their turn to read from the bottom) go next */
        r->claim.wanted = poll_after_claim(r, r->claim.fc_skipped ? claim_limit(r) : 0, claim_limit(r));
        return;
    }
    struct inflight_row *add = xmalloc((size_t)n * sizeof(*add));
    int per_part[OUTBOX_LEASE_PARTITIONS] = {0}, quota_hit = 0;
    for (int i = 0; i < n; i++) {
        int part = (int)pg_int(PQgetvalue(res, i, CLAIM_LEASE_PARTITION)) & (OUTBOX_LEASE_PARTITIONS - 1);
        add[i] = (struct inflight_row){
            .id = pg_int(PQgetvalue(res, i, CLAIM_ID)),
            .created_ms = pg_int(PQgetvalue(res, i, CLAIM_CREATED_MS)),
            .attempts = (int)pg_int(PQgetvalue(res, i, CLAIM_ATTEMPTS)),
            .partition = part,
            .bytes = pg_int(PQgetvalue(res, i, CLAIM_PAYLOAD_BYTES)),
            .kslot = -1,
            .state = ROW_QUEUED,
        };
        /* a partition that filled its quota may have more: then claim again at once */
        if (++per_part[part] >= r->claim.quota)
            quota_hit = 1;
    }
    window_add(&r->win, add, (size_t)n);
    free(add);
    r->m.claimed_rows_total += (uint64_t)n;
    histogram_observe(&r->m.batch_rows, n);
    log_debug("claim: %d rows, ids %s..%s, in flight %zu", n, PQgetvalue(res, 0, CLAIM_ID),
              PQgetvalue(res, n - 1, CLAIM_ID), r->win.n);
    r->claim.res = res;
    r->claim.next = 0;
    r->claim.wanted = poll_after_claim(r, quota_hit || r->claim.fc_skipped ? claim_limit(r) : n, claim_limit(r));
}

static void claim_fail(struct relay *r, PGresult *res)
{
    safety_pace(r);
    r->claim.full = 0;
    /* No answer at all: the worker session was dropped under the claim, as when a claim
     * that read partitions from the bottom outlasted the lease deadline. Read fewer of
     * them per claim from now on (a long transaction keeps the pending index's dead head). */
    if (!res && r->claim.fc_bottom > 0) {
        r->claim.bottom_k = r->claim.fc_bottom / 4 > 1 ? r->claim.fc_bottom / 4 : 1;
        log_warn("claim: the session was lost while %d partitions were read from the bottom; "
                 "%d per claim from now on", r->claim.fc_bottom, r->claim.bottom_k);
    }
    r->m.claims_total++;
    r->claim.wanted = 1;
}

static const struct worker_stmt claim_stmt = {
    .what = "claim", .on_ok = claim_result, .on_fail = claim_fail, .keeps_result = 1};

/* The partitions of a claim and where each starts, into r->claim.fc and the claim's $4 and
 * $9 (parts, floors: array literals). */
static void claim_partitions(struct relay *r, struct strbuf *parts, struct strbuf *floors)
{
    /* Every active partition above its floor, at most bottom_k from the bottom (in turn, from
     * bottom_next), and one in turn from the bottom every SAFETY_PASS_MS. */
    struct floor_claim *fc = &r->claim.fc;
    if (!r->claim.bottom_k)
        r->claim.bottom_k = OUTBOX_LEASE_PARTITIONS; /* until a claim shows they are dear */
#ifdef OUTBOX_TEST_HOOKS
    if (r->test_bottom_k > 0 && r->claim.bottom_k > r->test_bottom_k)
        r->claim.bottom_k = r->test_bottom_k;
#endif
    /* While isolating a row Kafka rejects (one row at a time up to its id), every partition
     * is in the claim: isolation ends at the first row returned at or past that id, or at an
     * empty claim, which proves nothing of partitions left out (a claim of two partitions
     * ended it with the rejected row's partition unread; the batch after it carried the row
     * and later rows of its key, which a broker without the new producer's state on that
     * partition wrote while refusing the row: the key's order broken, poison in CI). */
    int safety = -1, last_bottom = -1;
    int from_bottom = r->claim.isolate_until_id ? OUTBOX_LEASE_PARTITIONS : r->claim.bottom_k;
    if (r->claim.floors_on && mono_ms() >= r->claim.safety_due_ms) {
        r->claim.safety_due_ms = mono_ms() + SAFETY_PASS_MS;
        safety = r->claim.safety_next++ % OUTBOX_LEASE_PARTITIONS;
    }
    strbuf_reset(parts);
    pgarray_open(parts);
    pgarray_open(floors);
    fc->nparts = 0;
    r->claim.fc_bottom = 0;
    r->claim.fc_skipped = 0;
    r->claim.fc_safety = 0;
    for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++) {
        int p = (r->claim.bottom_next + i) % OUTBOX_LEASE_PARTITIONS;
        if (lease_state(r, p) != LEASE_ACTIVE || !eos_group_ready(r, eos_group_of(r->cfg, p)))
            continue; /* (exactly-once: until its group's progress record is recorded) */
        int64_t from = r->claim.floors_on ? r->claim.floors.at[p] : 0;
        if (p == safety && from_bottom > 0) {
            from = 0;
            r->claim.fc_safety = 1;
        }
        if (from == 0) {
            if (from_bottom == 0) {
                r->claim.fc_skipped = 1;
                continue; /* its turn comes in a later claim, at once */
            }
            from_bottom--;
            r->claim.fc_bottom++;
            last_bottom = p;
        }
        fc->parts[fc->nparts] = p;
        fc->sent[fc->nparts] = from;
        pgarray_int(parts, p);
        pgarray_int(floors, from);
        fc->nparts++;
    }
    pgarray_close(parts);
    pgarray_close(floors);
    if (last_bottom >= 0 && from_bottom == 0)
        r->claim.bottom_next = (last_bottom + 1) % OUTBOX_LEASE_PARTITIONS;
}

void claim_send(struct relay *r)
{
    struct strbuf ids, paused, parts, held;
    strbuf_init(&parts);
    int nparts = lease_activate_due(r, &parts);
    if (!nparts) {
        strbuf_destroy(&parts);
        return; /* no partition to publish yet (grace, or none held) */
    }
    struct strbuf floors;
    strbuf_init(&floors);
    claim_partitions(r, &parts, &floors);
    struct floor_claim *fc = &r->claim.fc;
    nparts = fc->nparts;
    strbuf_init(&ids);
    strbuf_init(&paused);
    strbuf_init(&held);
    keep_claim_skip(r, &ids);
    pauses_literal(&r->paused, &paused);
    kshare_held_literal(&r->kshare, &held);
    char limit[16], quota[16], budget[24], largest[24];
    r->claim.quota = claim_quota(claim_limit(r), nparts);
    r->claim.limit = claim_limit(r);
    r->claim.budget = (long long)(r->cfg->max_inflight_bytes - r->win.bytes);
    snprintf(limit, sizeof(limit), "%d", r->claim.limit);
    snprintf(quota, sizeof(quota), "%d", r->claim.quota);
    snprintf(budget, sizeof(budget), "%lld", r->claim.budget);
    snprintf(largest, sizeof(largest), "%lld", sink_max_message_bytes(r->sink));
    fc->proven = r->claim.floors.proven;
    fc->epoch = r->claim.floors.epoch;
    fc->quota = r->claim.quota;
    struct strbuf ws;
    strbuf_init(&ws);
    if (r->cfg->keep)
        keep_claim_w(r, fc, &ws);
    const char *params[10] = {ids.buf, limit, paused.buf, parts.buf, quota, budget, largest, held.buf,
                              floors.buf, ws.buf};
    if (worker_send(r, &claim_stmt, r->sql.claim, r->cfg->keep ? 10 : 9, params) == 0) {
        r->claim.wanted = 0;
        for (int g = 0; g < eos_groups(r->cfg); g++)
            r->claim.eos_epoch[g] = sink_txn_epoch(r->sink, g);
        r->claim.sent_ms = mono_ms();
        if (!claim_used_floors(fc))
            r->m.claims_from_bottom_total++;
        poll_stop(r);
    }
    strbuf_destroy(&ws);
    strbuf_destroy(&floors);
    strbuf_destroy(&parts);
    strbuf_destroy(&ids);
    strbuf_destroy(&paused);
    strbuf_destroy(&held);
}

int claim_more_coming(const struct relay *r, int can_claim)
{
    return r->mode == MODE_RUNNING && r->claim.full && (r->stmt == &claim_stmt || can_claim);
}

/* ---- the floors' proof (floor.h) -------------------------------------------------- */

int floor_probe_due(const struct relay *r)
{
    return r->claim.floors_on && r->mode == MODE_RUNNING && mono_ms() >= r->claim.probe_due_ms;
}

/* A held-back proof is named once it waited this long (and then once per candidate). */
#define PROOF_HELD_LOG_MS 10000

/* What the proof rests on, checked at every probe: ids drawn in time order (the identity's
 * CACHE is 1: with more, each session draws from a block of its own, and an id below one
 * already claimed can be drawn later) and a sequence that never goes back (setval, a
 * restore). When either fails, the floors go back to the bottom and prove nothing (every
 * claim reads from the bottom; keep mode's watermarks stop), named once in the log, until
 * it holds again. Returns whether the proof may go on. */
static int probe_premises(struct relay *r, PGresult *res, int64_t identity)
{
    struct claim_state *c = &r->claim;
    long long cache = PQgetisnull(res, 0, FLOOR_PROBE_CACHE) ? 1 : pg_int(PQgetvalue(res, 0, FLOOR_PROBE_CACHE));
    int64_t before = c->floors.identity;
    char why[256] = "";
    if (cache != 1)
        snprintf(why, sizeof(why), "the id's sequence has CACHE %lld: sessions draw ids out of time order "
                 "(ALTER SEQUENCE ... CACHE 1)", cache);
    else if (identity >= 0 && before > 0 && before != INT64_MAX && identity < before)
        snprintf(why, sizeof(why), "the id's sequence went back from %lld to %lld (setval, a restore): new "
                 "rows may get ids below the floors", (long long)before, (long long)identity);
    if (why[0]) {
        if (!r->m.proof_blocked)
            log_error("proof: claims read every lease partition from the bottom%s: %s",
                      r->cfg->keep ? " and the watermarks stop" : "", why);
        r->m.proof_blocked = 1;
        floors_forget_proof(&c->floors);
        if (r->cfg->keep)
            keep_check_now(r); /* keep's own check (it stops W) runs next */
        if (cache == 1)
            r->m.proof_blocked = 0; /* a rewind is seen once: the proof starts over from here */
        return 0;
    }
    if (r->m.proof_blocked)
        log_info("proof: the id's sequence has CACHE 1 again; the floors move on");
    r->m.proof_blocked = 0;
    return 1;
}

static void probe_ok(struct relay *r, PGresult *res)
{
    if (PQntuples(res) != 1)
        return;
    struct claim_state *c = &r->claim;
    int64_t now = mono_ms();
    int64_t identity = PQgetisnull(res, 0, FLOOR_PROBE_IDENTITY) ? -1 : pg_int(PQgetvalue(res, 0, FLOOR_PROBE_IDENTITY));
    if (!probe_premises(r, res, identity))
        return;
    floors_probe_result(&c->floors, c->probe_high, PQgetvalue(res, 0, FLOOR_PROBE_WRITERS), identity, now);
    /* every id drawn before the probe is at or below the identity's value it read: a
     * claimed id above it was not drawn by the identity and stays out of the proof */
    int64_t beyond = identity >= 0 && c->probe_high > identity ? c->probe_high : 0;
    if (beyond && beyond != r->m.id_beyond_identity)
        log_warn("proof: row %lld was claimed with an id beyond the identity's last value %lld (inserted "
                 "with OVERRIDING SYSTEM VALUE, COPY with ids, logical replication or a restore?): it is "
                 "published, but the floors%s stay at or below the identity's value; a writer whose id "
                 "the identity reaches later fails with a duplicate key",
                 (long long)beyond, (long long)identity, r->cfg->keep ? " and watermarks" : "");
    r->m.id_beyond_identity = beyond;
    int64_t held = floors_held_ms(&c->floors, now);
    r->m.proof_held_seconds = (double)held / 1000.0;
    const char *holder = PQgetvalue(res, 0, FLOOR_PROBE_HOLDER);
    if (held >= PROOF_HELD_LOG_MS && holder[0] && c->floors.queue[0].high != c->held_logged) {
        c->held_logged = c->floors.queue[0].high;
        log_warn("proof: the floors%s have waited %.0f s to pass id %lld for a transaction that wrote "
                 "the table and is still open: %s",
                 r->cfg->keep ? " and watermarks" : "", (double)held / 1000.0,
                 (long long)c->floors.queue[0].high, holder);
    }
    if (requeue_count_changed(r, pg_int(PQgetvalue(res, 0, FLOOR_PROBE_REQUEUED)))) {
        log_info("claim: parked rows were requeued; claiming from the bottom");
        claim_floors_reset(r, "requeue");
        c->wanted = 1;
    }
}

static const struct worker_stmt probe_stmt = {.what = "floor probe", .on_ok = probe_ok};

void floor_probe_send(struct relay *r)
{
    int64_t now = mono_ms();
    r->claim.probe_due_ms = now + FLOOR_PROBE_MS;
    r->claim.probe_high = r->claim.claimed_high;
    /* the writers holding the oldest candidate back are looked up only once it waited */
    char holders[2048] = "{}";
    if (floors_held_ms(&r->claim.floors, now) >= PROOF_HELD_LOG_MS / 2)
        floors_holders(&r->claim.floors, holders, sizeof(holders));
    const char *params[1] = {holders};
    worker_send(r, &probe_stmt, r->sql.floor_probe, 1, params);
}

/* ---- the claim's own state ---------------------------------------------------------- */

void claim_init(struct relay *r)
{
    floors_init(&r->claim.floors);
}

void claim_destroy(struct relay *r)
{
    for (size_t i = 0; i < r->claim.n_blocked_keys; i++)
        free(r->claim.blocked_keys[i]);
    free(r->claim.blocked_keys);
    r->claim.blocked_keys = NULL;
    r->claim.n_blocked_keys = 0;
    floors_destroy(&r->claim.floors);
}

void claim_session_new(struct relay *r)
{
    floors_forget_proof(&r->claim.floors);
    r->claim.claimed_high = 0;
    r->claim.probe_high = 0;
}

void claim_schema(struct relay *r, int version)
{
    r->claim.floors_on = version >= 5;
}

int claim_floors_on(const struct relay *r)
{
    return r->claim.floors_on;
}
