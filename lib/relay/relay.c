/* The relay loop: life cycle, the connections' callbacks, the shutdown state machine, and
 * kick — the one place that decides what the worker connection does next. The concerns
 * live beside it, each writing its own state (relay_int.h): claim.c and claim_rows.c
 * (claims, the floors' probe, the claim's cursor), poll.c (when to claim again, the
 * doorbell), record.c (recording rows as sent), produce.c (publishing through the sink and
 * its reports), poison.c, reset.c, lease.c, keep.c (keep mode's watermark and audit),
 * monitor.c, status.c, session.c, worker.c, and the pure window.c, floor.c, kshare.c,
 * pause.c and lease_rules.c. */
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* ---- the decision -------------------------------------------------------------- */

/* Whether every acknowledged row is marked and every write-back done (shutdown); in keep
 * mode also every W written (unless the watermark is stopped, or the session is gone); and
 * every dead-letter copy acknowledged (all bounded by the shutdown timeout). */
static int drained(const struct relay *r)
{
    return !window_count(&r->win, ROW_MASK(ROW_PRODUCED) | ROW_MASK(ROW_ACKED) | ROW_MASK(ROW_MARKING)) &&
           !poison_updates_pending(r) && !poison_dead_letters_pending(r) &&
           !(r->cfg->keep && !keep_blocked(r) && pgconn_connected(r->worker) && keep_unsaved(r));
}

static void log_resumed(const char *topic)
{
    log_info("relay: topic %s resumes (trying again)", topic);
}

/* A claim is due, and (exactly-once) the producer has fenced older ones and its progress
 * record is recorded (eos.c). */
static int claim_go(const struct relay *r)
{
    return claim_ready(r) && eos_claims_allowed(r);
}

static void kick(struct relay *r)
{
    if (r->mode == MODE_DONE)
        return;
    lease_check_deadline(r);
    sink_poll(r->sink);
    produce_claimed(r);
    sink_txn_hold(r->sink, claim_more_coming(r, claim_go(r))); /* (exactly-once; after the claim's rows went) */
    eos_tick(r);
    if (r->mode == MODE_RESETTING)
        reset_advance(r);
    if (r->mode == MODE_DRAINING && drained(r)) {
        lease_drain_all(r);
        if (lease_all_released(r) || !pgconn_connected(r->worker)) {
            log_info("shutdown: all acknowledged rows marked, leases released; exiting");
            relay_finish(r, OUTBOX_EXIT_OK);
            return;
        }
    }
    if (worker_busy(r) || !pgconn_idle(r->worker) || ev_is_active(&r->retry_timer))
        return;
    size_t paused = r->paused.n;
    pauses_expire(&r->paused, mono_ms(), log_resumed);
    if (r->paused.n < paused)
        claim_floors_reset(r, "a paused topic resumed"); /* its rows lie below the floors */
    if (!r->schema_ok) {
        worker_send_version(r);
    } else if (poison_updates_pending(r)) {
        poison_send_update(r);
    } else if (lease_send_next(r) == 0) {
        /* lease log, release or scan */
    } else if (eos_recover_due(r)) {
        eos_recover_send(r); /* before any claim of this producer session */
    } else if (mark_due(r) && !(r->last_was_mark && claim_go(r))) {
        /* Marks and claims alternate while both are wanted, so that acknowledgements
         * arriving in small groups cannot starve claiming (and the in-flight window
         * stays full while Kafka works). */
        r->last_was_mark = 1;
        mark_send(r);
    } else if (eos_tail_due(r)) {
        eos_tail_send(r); /* recorded rows leave the progress record once the standbys have them */
    } else if (r->win.n_state[ROW_FAILED] && r->mode == MODE_RESETTING &&
               !r->win.n_state[ROW_PRODUCED]) {
        reset_send_note_failed(r);
    } else if (keep_check_due(r)) {
        keep_check_send(r);
    } else if (keep_advance_due(r)) {
        keep_advance_send(r);
    } else if (poll_arm_wanted(r) && r->mode == MODE_RUNNING) {
        doorbell_send_arm(r);
    } else if (floor_probe_due(r)) {
        floor_probe_send(r);
    } else if (keep_audit_due(r) && !(r->audit_last && claim_go(r))) {
        /* The audit's turns are due every OUTBOX_WATERMARK_AUDIT_MS / 256 (0 ms at its
         * lowest setting) and may take longer than that: audit turns and claims alternate
         * while both are wanted, as marks and claims do, and the probe goes first (before,
         * a due audit starved both: no claim went and W stopped). */
        r->audit_last = 1;
        keep_audit_send(r);
    } else if (claim_go(r)) {
        r->last_was_mark = 0;
        r->audit_last = 0;
        claim_send(r);
    } else if (mark_due(r)) {
        r->last_was_mark = 1;
        mark_send(r);
    }
}

/* Kicks wanted by callbacks (results, reports, timers) run before the loop next waits
 * for events, as many times as they are asked for meanwhile. */
static void kick_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    (void)revents;
    struct relay *r = w->data;
    while (r->kick_wanted) {
        r->kick_wanted = 0;
        kick(r);
    }
    ev_prepare_stop(loop, w);
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_want_kick(w->data);
}

/* ---- PostgreSQL callbacks ------------------------------------------------------ */

static void worker_ready(void *ctx)
{
    struct relay *r = ctx;
    r->stmt = NULL;
    r->schema_ok = 0;
    /* The floors' proof and the highest id claimed were about the session's server: after
     * a failover or a restore, ids may have been drawn again below them (a stale proof would
     * let a keep-mode watermark pass rows not yet written). Both start over, and keep mode
     * checks its premises on this server before the watermark moves again. */
    claim_session_new(r);
    keep_session_new(r);
    relay_want_kick(r);
}

static void worker_lost(void *ctx, const char *why)
{
    struct relay *r = ctx;
    r->stmt = NULL;
    r->m.pg_reconnects_total++;
    lease_lose_all(r, why); /* the session's advisory locks are gone with it */
}

static void listener_ready(void *ctx)
{
    struct relay *r = ctx;
    /* LISTEN misses what happened while disconnected: poll once. */
    poll_listener_ready(r);
    claim_want(r);
    relay_want_kick(r);
}

static void listener_notify(void *ctx, const PGnotify *n)
{
    struct relay *r = ctx;
    (void)n;
    r->m.doorbell_wakeups_total++;
    poll_doorbell_rang(r);
    claim_want(r);
    relay_want_kick(r);
}

/* ---- shutdown ------------------------------------------------------------------ */

static void shutdown_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    log_warn("shutdown: timed out with %zu deliveries unacknowledged and %zu acknowledged rows "
             "unmarked; they stay PENDING and will be published again",
             r->win.n_state[ROW_PRODUCED], r->win.n_state[ROW_ACKED] + r->win.n_state[ROW_MARKING]);
    relay_finish(r, OUTBOX_EXIT_OK);
}

void relay_shutdown(struct relay *r)
{
    r->shutdown_requests++;
    if (r->shutdown_requests > 1) {
        log_warn("shutdown: second signal, exiting at once");
        _exit(OUTBOX_EXIT_FAILED);
    }
    if (r->mode == MODE_DONE)
        return;
    log_info("shutdown: stop claiming; waiting up to %d ms for %zu in-flight deliveries",
             r->cfg->shutdown_timeout_ms, r->win.n_state[ROW_PRODUCED]);
    claim_release(r);
    window_remove_state(&r->win, ROW_FAILED);
    r->mode = MODE_DRAINING;
    poll_stop(r);
    reset_stop(r);
    ev_timer_set(&r->shutdown_timer, r->cfg->shutdown_timeout_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->shutdown_timer);
    relay_want_kick(r);
}

/* ---- life cycle ---------------------------------------------------------------- */

/* The monitor's view of the floors' proof (monitor_set_proof): none while the worker
 * session is down (a new one may be on another server, and starts the proof over). */
static int64_t relay_proof(void *ctx, uint32_t *epoch)
{
    const struct relay *r = ctx;
    *epoch = claim_floors_epoch(r);
    return pgconn_connected(r->worker) ? claim_floors_proven(r) : 0;
}

struct relay *relay_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->loop = loop;
    r->cfg = cfg;
    r->mode = MODE_RUNNING;
    metrics_init(&r->m);
    r->m.table = cfg->table;
    r->m.partitions_ahead = -1;
    outbox_sql_init(&r->sql, cfg);
    claim_init(r);
    poll_init(r);
    record_init(r);
    reset_init(r);
    poison_init(r);
    lease_init(r);
    status_init(r);
    ev_init(&r->retry_timer, retry_cb);
    r->retry_timer.data = r;
    ev_init(&r->shutdown_timer, shutdown_timeout_cb);
    r->shutdown_timer.data = r;
    ev_prepare_init(&r->kick_prepare, kick_prepare_cb);
    r->kick_prepare.data = r;

    config_sink(cfg, &r->sink_cfg);
    r->sink = sink_new(loop, &r->sink_cfg, &produce_sink_callbacks, r, err, errlen);
    if (!r->sink) {
        relay_free(r);
        return NULL;
    }
    /* A partition may hold a quarter of the window (rows and bytes), at least a claim. */
    kshare_init(&r->kshare, cfg->max_inflight / 4 > cfg->batch_size ? cfg->max_inflight / 4 : cfg->batch_size,
                cfg->max_inflight_bytes / 4, r->sink->ops->partition);
    if (cfg->http_addr[0]) {
        r->http = http_new(cfg->http_addr, err, errlen);
        if (!r->http) {
            relay_free(r);
            return NULL;
        }
    }
    static const struct pgconn_callbacks worker_cb = {worker_ready, worker_lost, NULL};
    r->worker = pgconn_new(loop, "worker", cfg->pg_dsn, r->sql.worker_setup, cfg->reconnect_max_ms,
                           &worker_cb, r);
    if (r->sql.listen_setup) {
        static const struct pgconn_callbacks listen_cb = {listener_ready, NULL, listener_notify};
        r->listener = pgconn_new(loop, "listen", cfg->pg_dsn, r->sql.listen_setup,
                                 cfg->reconnect_max_ms, &listen_cb, r);
    }
    if (cfg->pg_dsn_file) { /* a rotated password is used from the next reconnect on */
        pgconn_set_dsn_file(r->worker, cfg->pg_dsn_file, "OUTBOX_PG_DSN_FILE");
        if (r->listener)
            pgconn_set_dsn_file(r->listener, cfg->pg_dsn_file, "OUTBOX_PG_DSN_FILE");
    }
    r->monitor = monitor_new(loop, cfg, &r->sql, &r->m);
    monitor_set_proof(r->monitor, relay_proof, r);
    r->fail_log.every_ms = 60000;

#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("OUTBOX_TESTHOOK_KILL_BEFORE_MARK_AFTER");
    r->test_kill_before_mark_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_KILL_AFTER_MARK_SENT_AFTER");
    r->test_kill_after_mark_sent_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_FATAL_AFTER");
    r->test_fatal_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_FATAL_AFTER_DEAD_LETTER");
    r->test_fatal_after_dead_letter = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_SEND_FAIL_AFTER");
    r->test_send_fail_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_FLUSH_FAIL_AFTER");
    r->test_flush_fail_after = hook ? atoll(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_BOTTOM_K");
    r->test_bottom_k = hook ? atoi(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_CUT_BEFORE_PARK");
    r->test_cut_before_park = hook ? atoi(hook) : 0;
    hook = getenv("OUTBOX_TESTHOOK_REPEAT_LOG_MS");
    if (hook && atoll(hook) > 0)
        r->fail_log.every_ms = atoll(hook);
#endif
    return r;
}

void relay_start(struct relay *r)
{
    log_info("relay %s: table %s, topic template %s, batch %d, max in flight %d, poll interval "
             "%d ms, notify channel %s, retention %s", r->cfg->relay_name, r->cfg->table,
             r->cfg->topic_template, r->cfg->batch_size, r->cfg->max_inflight,
             r->cfg->poll_interval_ms,
             r->cfg->notify_channel[0] ? r->cfg->notify_channel : "(none)", r->cfg->retention);
    pgconn_start(r->worker);
    if (r->listener)
        pgconn_start(r->listener);
    monitor_start(r->monitor);
    status_start(r);
    lease_start(r);
}

void relay_free(struct relay *r)
{
    if (!r)
        return;
    poll_stop(r);
    ev_timer_stop(r->loop, &r->retry_timer);
    reset_stop(r);
    ev_timer_stop(r->loop, &r->shutdown_timer);
    record_stop(r);
    lease_stop(r);
    status_stop(r);
    ev_prepare_stop(r->loop, &r->kick_prepare);
    http_free(r->http);
    sink_free(r->sink);
    monitor_free(r->monitor);
    pgconn_free(r->worker);
    pgconn_free(r->listener);
    if (r->sql.claim) /* relay_new may fail before any of these exist */
        claim_release(r);
    poison_destroy(r);
    lease_destroy(r);
    window_destroy(&r->win);
    pauses_destroy(&r->paused);
    kshare_destroy(&r->kshare);
    claim_destroy(r);
    keep_destroy(r);
    eos_destroy(r);
    eos_tail_destroy(r);
    outbox_sql_destroy(&r->sql);
    free(r);
}

int relay_exit_code(const struct relay *r)
{
    return r->exit_code;
}

const struct metrics *relay_metrics(const struct relay *r)
{
    return &r->m;
}
