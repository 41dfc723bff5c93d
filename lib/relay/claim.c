/* Claiming and marking: the claim statement (per lease partition, in id order, in-flight
 * rows excluded, a quota per partition), the adaptive poll that decides when to claim
 * again, the conditional doorbell, and marking acknowledged rows SENT. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "relay_int.h"

#define MARK_MAX_IDS 10000

static int claim_limit(const struct relay *r)
{
    return r->reset.isolate_until_id ? 1 : r->cfg->batch_size;
}

/* Rows per partition in one claim: twice a fair share of the batch, so that a claim stays
 * near the batch size without reading every partition's backlog. */
int claim_quota(int limit, int nparts)
{
    if (nparts < 1)
        nparts = 1;
    int q = (limit + nparts - 1) / nparts * 2;
    return q < 16 ? (limit < 16 ? limit : 16) : q;
}

int claim_ready(const struct relay *r)
{
    return r->claim.wanted && r->mode == MODE_RUNNING && !r->claim.res &&
           (!r->reset.isolate_until_id || r->win.n == 0) &&
           r->win.n + (size_t)r->cfg->batch_size <= (size_t)r->cfg->max_inflight &&
           r->win.bytes < r->cfg->max_inflight_bytes;
}

/* Rows claimed but not produced go back: they stay PENDING and are claimed again. */
void claim_release(struct relay *r)
{
    if (r->claim.res) {
        PQclear(r->claim.res);
        r->claim.res = NULL;
        pg_bytes_free(&r->claim.payloads);
    }
    for (size_t i = 0; i < r->claim.n_blocked_keys; i++)
        free(r->claim.blocked_keys[i]);
    r->claim.n_blocked_keys = 0;
    window_remove_state(&r->win, ROW_QUEUED);
}

/* ---- adaptive poll --------------------------------------------------------------- */

/* Claim again at once after a full batch, soon after a partial one, and back off towards
 * OUTBOX_POLL_INTERVAL_MS while claims come back empty; once idle, arm the doorbell. */
static void poll_after_claim(struct relay *r, int rows, int limit)
{
    struct poll_state *p = &r->poll;
    if (rows >= limit && !r->reset.isolate_until_id) {
        r->claim.wanted = 1;
        p->idle_delay_ms = MIN_POLL_DELAY_MS;
        return;
    }
    r->claim.wanted = 0;
    if (rows > 0) {
        p->idle_delay_ms = MIN_POLL_DELAY_MS;
        p->doorbell_armed = 0;
    } else {
        p->idle_delay_ms *= 2;
        if (p->idle_delay_ms >= r->cfg->poll_interval_ms) {
            p->idle_delay_ms = r->cfg->poll_interval_ms;
            if (r->listener && pgconn_connected(r->listener) && !p->doorbell_armed)
                p->arm_wanted = 1;
        }
    }
    if (p->idle_delay_ms > r->cfg->poll_interval_ms)
        p->idle_delay_ms = r->cfg->poll_interval_ms;
    if (r->reset.isolate_until_id)
        return; /* the next claim follows the delivery report */
    ev_timer_stop(r->loop, &p->timer);
    ev_timer_set(&p->timer, p->idle_delay_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &p->timer);
}

/* Nothing of the last claim could go out (its Kafka partitions hold their shares): claim
 * again after the idle delay rather than at once. */
void claim_back_off(struct relay *r)
{
    poll_after_claim(r, 0, claim_limit(r));
}

static void poll_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    r->claim.wanted = 1;
    relay_want_kick(r);
}

void poll_init(struct relay *r)
{
    r->poll.idle_delay_ms = MIN_POLL_DELAY_MS;
    ev_init(&r->poll.timer, poll_timer_cb);
    r->poll.timer.data = r;
}

/* ---- claim --------------------------------------------------------------------- */

/* Takes ownership of res: produce.c reads the rows from it. */
static void claim_ok(struct relay *r, PGresult *res)
{
    r->m.claims_total++;
    int n = PQntuples(res);
    if (r->mode != MODE_RUNNING || n == 0)
        PQclear(res);
    if (r->mode != MODE_RUNNING)
        return;
    if (n > 0 && r->payload_bytea && pg_bytes_decode(&r->claim.payloads, res, CLAIM_PAYLOAD) != 0) {
        log_error("claim: a bytea payload did not come as hex; claiming again");
        PQclear(res);
        r->claim.wanted = 1;
        return;
    }
    if (n == 0) {
        if (r->reset.isolate_until_id) {
            log_info("relay: nothing left to isolate; back to batches");
            r->reset.isolate_until_id = 0;
        }
        poll_after_claim(r, 0, claim_limit(r));
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
    poll_after_claim(r, quota_hit ? claim_limit(r) : n, claim_limit(r));
}

static void claim_fail(struct relay *r, PGresult *res)
{
    (void)res;
    r->m.claims_total++;
    r->claim.wanted = 1;
}

static const struct worker_stmt claim_stmt = {
    .what = "claim", .on_ok = claim_ok, .on_fail = claim_fail, .keeps_result = 1};

void claim_send(struct relay *r)
{
    struct strbuf ids, paused, parts, held;
    strbuf_init(&parts);
    int nparts = lease_active_literal(r, &parts);
    if (!nparts) {
        strbuf_destroy(&parts);
        return; /* no partition to publish yet (grace, or none held) */
    }
    strbuf_init(&ids);
    strbuf_init(&paused);
    strbuf_init(&held);
    window_ids_literal(&r->win, ~0u, 0, &ids);
    pauses_literal(&r->paused, &paused);
    kshare_held_literal(&r->kshare, &held);
    char limit[16], quota[16], budget[24], largest[24];
    r->claim.quota = claim_quota(claim_limit(r), nparts);
    snprintf(limit, sizeof(limit), "%d", claim_limit(r));
    snprintf(quota, sizeof(quota), "%d", r->claim.quota);
    snprintf(budget, sizeof(budget), "%lld", (long long)(r->cfg->max_inflight_bytes - r->win.bytes));
    snprintf(largest, sizeof(largest), "%lld", sink_max_message_bytes(r->sink));
    const char *params[8] = {ids.buf, limit, paused.buf, parts.buf, quota, budget, largest, held.buf};
    if (worker_send(r, &claim_stmt, r->payload_bytea ? r->sql.claim_bytea : r->sql.claim, 8, params) == 0) {
        r->claim.wanted = 0;
        ev_timer_stop(r->loop, &r->poll.timer);
    }
    strbuf_destroy(&parts);
    strbuf_destroy(&ids);
    strbuf_destroy(&paused);
    strbuf_destroy(&held);
}

/* ---- mark ---------------------------------------------------------------------- */

static void mark_ok(struct relay *r, PGresult *res)
{
    (void)res;
    size_t n = window_remove_state(&r->win, ROW_MARKING);
    r->m.marked_total += n;
    log_debug("mark: %zu rows SENT, in flight %zu", n, r->win.n);
}

/* Not marked: the rows stay acknowledged and are marked by a later statement. */
static void mark_fail(struct relay *r, PGresult *res)
{
    (void)res;
    window_move(&r->win, ROW_MARKING, ROW_ACKED);
}

static const struct worker_stmt mark_stmt = {
    .what = "mark", .on_ok = mark_ok, .on_fail = mark_fail};

void mark_send(struct relay *r)
{
#ifdef OUTBOX_TEST_HOOKS
    if (r->test_kill_before_mark_after > 0 &&
        r->m.published_total >= (uint64_t)r->test_kill_before_mark_after) {
        log_warn("test hook: SIGKILL before marking %zu acknowledged rows", r->win.n_state[ROW_ACKED]);
        kill(getpid(), SIGKILL);
    }
#endif
    struct strbuf ids;
    strbuf_init(&ids);
    window_take(&r->win, ROW_ACKED, ROW_MARKING, MARK_MAX_IDS, &ids);
    char high[24];
    snprintf(high, sizeof(high), "%lld", (long long)window_high_id(&r->win));
    const char *params[3] = {ids.buf, r->cfg->relay_name, high};
    if (worker_send(r, &mark_stmt, r->sql.mark, 3, params) != 0)
        window_move(&r->win, ROW_MARKING, ROW_ACKED);
    strbuf_destroy(&ids);
}

/* ---- doorbell ------------------------------------------------------------------ */

static void arm_ok(struct relay *r, PGresult *res)
{
    (void)res;
    r->poll.doorbell_armed = 1;
    /* A row committed before the arm took effect rang no bell: look once more. */
    r->claim.wanted = 1;
}

static const struct worker_stmt arm_stmt = {.what = "arming the doorbell", .on_ok = arm_ok};

void doorbell_send_arm(struct relay *r)
{
    const char *params[1] = {r->cfg->notify_channel};
    r->poll.arm_wanted = 0;
    worker_send(r, &arm_stmt, r->sql.arm, 1, params);
}
