/* Poison rows: a row Kafka rejects is found by publishing one row at a time, its failures
 * alone are counted as attempts, and at OUTBOX_MAX_ATTEMPTS (or at once when it can never
 * be published) it is parked as FAILED with its reason, copied to the dead-letter topic,
 * and, with the block policy, its key's later rows wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

static void queue_update(struct relay *r, int64_t id, const char *reason, int count_attempt)
{
    struct poison_state *ps = &r->poison;
    ps->updates = xrealloc(ps->updates, (ps->n_updates + 1) * sizeof(*ps->updates));
    ps->updates[ps->n_updates++] = (struct row_update){id, xstrdup(reason), count_attempt};
}

static void dl_free(struct dead_letter *d)
{
    free(d->event_id);
    free(d->event_type);
    free(d->aggregate_type);
    free(d->aggregate_id);
    free(d->reason);
    free(d->payload);
}

void poison_destroy(struct relay *r)
{
    struct poison_state *ps = &r->poison;
    ev_timer_stop(r->loop, &ps->dl_timer);
    for (size_t i = 0; i < ps->n_updates; i++)
        free(ps->updates[i].reason);
    free(ps->updates);
    if (ps->n_dl)
        log_warn("relay: %zu dead-letter copies not acknowledged by the broker at exit (their rows stay "
                 "FAILED with their reason; `outbox-relay status` lists them)", ps->n_dl);
    for (size_t i = 0; i < ps->n_dl; i++)
        dl_free(&ps->dl[i]);
    free(ps->dl);
}

/* Decides what each failed row means once every in-flight delivery has reported:
 * row errors of a row published alone count as attempts; row errors in a batch start
 * isolation; the rest (topic errors paused the topic already) wait for the next claim. */
void poison_judge_failures(struct relay *r)
{
    int alone = claim_isolating(r) && r->win.n_state[ROW_FAILED] == 1;
    for (size_t i = 0; i < r->win.n; i++) {
        struct inflight_row *row = &r->win.rows[i];
        if (row->state != ROW_FAILED || row->fail != FAILURE_ROW)
            continue;
        if (alone) {
            char reason[300];
            snprintf(reason, sizeof(reason), "Kafka rejected the message: %s",
                     sink_err_str(r->sink, row->err));
            queue_update(r, row->id, reason, 1);
            window_set_state(&r->win, row, ROW_PARKING);
        } else {
            claim_isolate_up_to(r, row->id);
        }
    }
    if (claim_isolating(r))
        log_info("relay: publishing rows one at a time up to id %lld to find the row Kafka "
                 "rejects", (long long)claim_isolating(r));
}

/* Dead-letter copies are kept until the broker acknowledges them: one that failed for a
 * reason other than itself (a producer recreated after a fatal error purges its queue, a
 * broker away) is sent again every second, at most DL_MAX_ATTEMPTS times. */
#define DL_RETRY_S 1.0
#define DL_MAX_ATTEMPTS 60
#define DL_MAX_KEPT 1000

static void dl_arm(struct relay *r)
{
    if (!ev_is_active(&r->poison.dl_timer)) {
        ev_timer_set(&r->poison.dl_timer, DL_RETRY_S, 0.0);
        ev_timer_start(r->loop, &r->poison.dl_timer);
    }
}

static void dl_remove(struct poison_state *ps, size_t i)
{
    dl_free(&ps->dl[i]);
    memmove(&ps->dl[i], &ps->dl[i + 1], (ps->n_dl - i - 1) * sizeof(*ps->dl));
    ps->n_dl--;
}

/* Exactly-once: the transaction group whose producer takes a copy (it is in no progress
 * record, so any group's transaction may): the row's, else another held whole with its
 * record recorded, else one recorded and still going (a shutdown holds none whole); -1:
 * none, the timer tries again, uncounted. 0 in other modes. */
static int dl_group(const struct relay *r, const struct dead_letter *d)
{
    if (!r->cfg->exactly_once)
        return 0;
    if (eos_group_ready(r, d->group) && eos_group_held(r, d->group))
        return d->group;
    for (int g = 0; g < eos_groups(r->cfg); g++)
        if (eos_group_ready(r, g) && eos_group_held(r, g))
            return g;
    for (int g = 0; g < eos_groups(r->cfg); g++)
        if (eos_group_ready(r, g))
            return g;
    return -1;
}

/* Hands copy i to the sink. 0 when it is queued or waits for the timer; -1 when it was
 * given up and removed (the caller's index now names the next copy). */
static int dl_send(struct relay *r, size_t i)
{
    struct dead_letter *d = &r->poison.dl[i];
    int group = dl_group(r, d);
    if (group < 0) {
        long held;
        if (log_limit_due(&r->poison.dl_wait_log, 30000, &held))
            log_info("relay: %zu dead-letter copies wait for a transaction group this relay holds and "
                     "has fenced (exactly-once)", r->poison.n_dl);
        dl_arm(r);
        return 0;
    }
    char id[24];
    snprintf(id, sizeof(id), "%lld", (long long)d->id);
    struct message msg = {
        .topic = xstrdup(r->cfg->dead_letter_topic),
        .headers = {
            {"event_id", d->event_id},
            {"event_type", d->event_type},
            {"aggregate_type", d->aggregate_type},
            {"outbox_error", d->reason},
            {"outbox_id", id},
        },
        .n_headers = 5,
        .event_id = d->event_id,
        .event_type = d->event_type,
        .created_ms = d->created_ms,
        .txn_group = group,
    };
    int err = 0;
    enum sink_queued q =
        sink_produce(r->sink, &msg, d->aggregate_id, d->payload, d->payload_len, d->created_ms, -d->id, &err);
    message_destroy(&msg);
    if (q == SINK_QUEUED) {
        d->queued = 1;
#ifdef OUTBOX_TEST_HOOKS
        /* the copy queued, then purged by a fatal producer error before it left */
        if (r->test_fatal_after_dead_letter > 0 && --r->test_fatal_after_dead_letter == 0) {
            log_warn("test hook: injecting a fatal producer error after a dead-letter copy");
            sink_test_fatal(r->sink);
        }
#endif
        return 0;
    }
    if (q == SINK_UNFIT && d->payload) { /* too large with its payload: the headers alone */
        free(d->payload);
        d->payload = NULL;
        d->payload_len = 0;
        return dl_send(r, i);
    }
    if (q == SINK_FULL) { /* backpressure, not a failed send (exactly-once: a transaction
                           * ending, or one of rows open): not counted */
        dl_arm(r);
        return 0;
    }
    d->attempts++;
    const char *why = q == SINK_UNFIT ? "the broker can never take it" : sink_err_str(r->sink, err);
    if (q == SINK_UNFIT || d->attempts >= DL_MAX_ATTEMPTS) {
        log_error("relay: dead-letter copy of row %lld not sent, for good after %d attempt%s: %s (the row stays "
                  "FAILED with its reason)", (long long)d->id, d->attempts, d->attempts == 1 ? "" : "s", why);
        dl_remove(&r->poison, i);
        return -1;
    }
    log_warn("relay: dead-letter copy of row %lld not sent: %s (trying again in %.0f s)", (long long)d->id, why,
             DL_RETRY_S);
    dl_arm(r);
    return 0;
}

static void dl_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    struct poison_state *ps = &r->poison;
    for (size_t i = 0; i < ps->n_dl;) {
        if (ps->dl[i].queued || dl_send(r, i) == 0)
            i++;
    }
}

void poison_init(struct relay *r)
{
    ev_init(&r->poison.dl_timer, dl_timer_cb);
    r->poison.dl_timer.data = r;
}

void poison_dead_letters_resend(struct relay *r)
{
    struct poison_state *ps = &r->poison;
    size_t n = 0;
    for (size_t i = 0; i < ps->n_dl; i++)
        if (ps->dl[i].queued) {
            ps->dl[i].queued = 0;
            n++;
        }
    if (n) {
        log_warn("relay: %zu dead-letter cop%s the old producer never reported on: sending again in %.0f s", n,
                 n == 1 ? "y" : "ies", DL_RETRY_S);
        dl_arm(r);
    }
}

void poison_dead_letter_report(struct relay *r, int64_t id, int err)
{
    struct poison_state *ps = &r->poison;
    size_t i = 0;
    while (i < ps->n_dl && !(ps->dl[i].id == id && ps->dl[i].queued))
        i++;
    if (i == ps->n_dl) {
        if (err)
            log_warn("relay: dead-letter copy of row %lld failed: %s", (long long)id, sink_err_str(r->sink, err));
        return;
    }
    struct dead_letter *d = &ps->dl[i];
    d->queued = 0;
    if (!err) {
        dl_remove(ps, i);
        return;
    }
    d->attempts++;
    if (sink_classify(r->sink, err) == FAILURE_ROW || d->attempts >= DL_MAX_ATTEMPTS) {
        log_error("relay: dead-letter copy of row %lld failed for good after %d attempt%s: %s (the row stays "
                  "FAILED with its reason)", (long long)id, d->attempts, d->attempts == 1 ? "" : "s",
                  sink_err_str(r->sink, err));
        dl_remove(ps, i);
        return;
    }
    log_warn("relay: dead-letter copy of row %lld failed: %s (trying again in %.0f s)", (long long)id,
             sink_err_str(r->sink, err), DL_RETRY_S);
    dl_arm(r);
}

/* Sends a parked row to the dead-letter topic (headers only when the payload is gone), and
 * keeps it until the broker acknowledges it. */
static void dead_letter(struct relay *r, const struct outbox_row *row, const char *reason, int group)
{
    struct poison_state *ps = &r->poison;
    if (!r->cfg->dead_letter_topic[0])
        return;
    if (ps->n_dl >= DL_MAX_KEPT) {
        log_error("relay: dead-letter copy of row %lld not sent: %d copies await the broker's acknowledgement "
                  "(the row stays FAILED with its reason)", (long long)row->id, DL_MAX_KEPT);
        return;
    }
    /* Only a payload that fits: the reason may be that it is too large. */
    int with_payload = row->payload && row->payload_len < 512 * 1024;
    ps->dl = xrealloc(ps->dl, (ps->n_dl + 1) * sizeof(*ps->dl));
    struct dead_letter *d = &ps->dl[ps->n_dl++];
    *d = (struct dead_letter){
        .id = row->id,
        .event_id = xstrdup(row->event_id),
        .event_type = xstrdup(row->event_type ? row->event_type : ""),
        .aggregate_type = xstrdup(row->aggregate_type ? row->aggregate_type : ""),
        .aggregate_id = xstrdup(row->aggregate_id),
        .reason = xstrdup(reason),
        .payload = with_payload ? xmalloc(row->payload_len + 1) : NULL,
        .payload_len = with_payload ? row->payload_len : 0,
        .created_ms = row->created_ms,
        .group = group,
    };
    if (with_payload)
        memcpy(d->payload, row->payload, row->payload_len);
    dl_send(r, ps->n_dl - 1);
}

/* A row that can never be published: park it; with the block policy, hold the rest of
 * its key in this claim (later claims skip keys with a FAILED row). */
void poison_park_row(struct relay *r, struct inflight_row *slot, const struct outbox_row *row,
                     const char *reason)
{
    window_set_state(&r->win, slot, ROW_PARKING);
    queue_update(r, row->id, reason, 0);
    dead_letter(r, row, reason, eos_group_of(r->cfg, slot->partition));
    if (strcmp(r->cfg->poison_policy, "block") == 0)
        claim_hold_key(r, row->aggregate_id);
}

/* The first queued update was written (parked, or an attempt counted). */
static void update_ok(struct relay *r, PGresult *res)
{
    struct row_update *u = &r->poison.updates[0];
    /* nothing written: the row is no longer pending, or (keep mode) this session no longer
     * holds its lease partition; its new holder decides */
    int written = u->count_attempt ? PQntuples(res) == 1 : atoi(PQcmdTuples(res)) > 0;
    int parked = written && (!u->count_attempt ||
                             strcmp(PQgetvalue(res, 0, ROW_FAILED_STATUS), "FAILED") == 0);
    if (!written) {
        log_warn("relay: row %lld was not %s: it is no longer pending here, or this relay no longer "
                 "holds its lease partition (%s)", (long long)u->id,
                 u->count_attempt ? "counted as a failed attempt" : "parked", u->reason);
    } else if (parked) {
        r->m.parked_total++;
        log_warn("relay: row %lld parked as FAILED: %s", (long long)u->id, u->reason);
        if (u->count_attempt) {
            /* Rejected by Kafka: the payload is what was rejected, so the dead letter
             * carries the row's identity and the reason only. */
            struct outbox_row row = {
                .id = u->id,
                .event_id = PQgetvalue(res, 0, ROW_FAILED_EVENT_ID),
                .aggregate_id = PQgetvalue(res, 0, ROW_FAILED_AGGREGATE_ID),
                .aggregate_type = PQgetvalue(res, 0, ROW_FAILED_AGGREGATE_TYPE),
                .event_type = PQgetvalue(res, 0, ROW_FAILED_EVENT_TYPE),
                .created_ms = strtoll(PQgetvalue(res, 0, ROW_FAILED_CREATED_MS), NULL, 10),
            };
            const struct inflight_row *in = window_find(&r->win, u->id);
            dead_letter(r, &row, u->reason, in ? eos_group_of(r->cfg, in->partition) : 0);
        }
    } else if (PQntuples(res) == 1) {
        log_warn("relay: row %lld failed alone (attempt %s of %d): %s", (long long)u->id,
                 PQgetvalue(res, 0, ROW_FAILED_ATTEMPTS), r->cfg->max_attempts, u->reason);
    }
    struct inflight_row *row = window_find(&r->win, u->id);
    if (row)
        window_remove_one(&r->win, row);
    free(u->reason);
    memmove(&r->poison.updates[0], &r->poison.updates[1],
            (r->poison.n_updates - 1) * sizeof(*r->poison.updates));
    r->poison.n_updates--;
}

static const struct worker_stmt update_stmt = {
    .what = "writing back a failed row", .on_ok = update_ok};

void poison_send_update(struct relay *r)
{
    struct row_update *u = &r->poison.updates[0];
#ifdef OUTBOX_TEST_HOOKS
    /* cut off and back: the session that held the row's lease partition is gone, and the
     * park queued under it goes to the next session, which holds no lease yet: it must
     * not be written (keep mode's HOLDS_LEASE) */
    if (r->test_cut_before_park && !u->count_attempt) {
        r->test_cut_before_park = 0;
        log_warn("test hook: the worker session is cut before parking row %lld", (long long)u->id);
        pgconn_reset(r->worker, "test hook: cut before a park");
        return;
    }
#endif
    char id[24], max[16];
    snprintf(id, sizeof(id), "%lld", (long long)u->id);
    snprintf(max, sizeof(max), "%d", r->cfg->max_attempts);
    const char *params[3] = {id, u->reason, max};
    if (u->count_attempt)
        worker_send(r, &update_stmt, r->sql.row_failed, 3, params);
    else
        worker_send(r, &update_stmt, r->sql.park, 2, params);
}

int poison_updates_pending(const struct relay *r)
{
    return r->poison.n_updates > 0;
}

int poison_dead_letters_pending(const struct relay *r)
{
    return r->poison.n_dl > 0;
}
