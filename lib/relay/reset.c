/* Resets: after a failed delivery or a fatal producer error the relay stops producing,
 * lets every in-flight delivery report, records the failed rows (they stay PENDING), backs
 * off and claims again from the lowest pending row, so that no key's later row overtakes a
 * failed one. Paused topics are the part of a reset that outlives it. */
#include "core/log.h"
#include "relay/relay_int.h"

#define RESET_PAUSE_MARGIN_MS 1000 /* a paused topic outlasts the resumed claim by this */

/* Only changes the mode: producing stops by itself, and reset_advance does the rest. */
void reset_start(struct relay *r, const char *reason)
{
    snprintf(r->reset.last_failure, sizeof(r->reset.last_failure), "%s", reason);
    /* once per reset (a reset's every failed row comes here: a count over the window each
     * time made 19,040 failed rows cost the loop over a second, and its leases) */
    if (r->mode == MODE_RUNNING)
        log_debug("reset: %zu rows in flight lay below the floors (%s)", claim_rows_below_floors(r), reason);
    claim_floors_reset(r, reason); /* rows in flight go back below the floors */
    if (r->mode != MODE_RUNNING)
        return;
    r->mode = MODE_RESETTING;
    r->m.resets_total++;
    log_warn("relay: %s; pausing claims until in-flight deliveries settle, then claiming again "
             "from the lowest pending row", reason);
}

void reset_pause_topic(struct relay *r, const char *topic, int err)
{
    switch (pauses_add(&r->paused, topic, mono_ms() + r->cfg->topic_pause_ms)) {
    case PAUSE_NEW:
        log_warn("relay: topic %s paused for %d ms: %s (its rows stay PENDING; other topics flow)",
                 topic, r->cfg->topic_pause_ms, sink_err_str(r->sink, err));
        break;
    case PAUSE_EXTENDED:
        break;
    }
}

static void reset_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    r->reset.waiting = 0;
    if (r->mode == MODE_RESETTING) {
        r->mode = MODE_RUNNING;
        claim_want(r);
        log_info("relay: resuming claims%s", claim_isolating(r) ? " one row at a time" : "");
    }
    relay_want_kick(r);
}

void reset_init(struct relay *r)
{
    backoff_init(&r->reset.backoff, 200, 10000);
    ev_init(&r->reset.timer, reset_timer_cb);
    r->reset.timer.data = r;
}

/* Moves a reset forward (from kick, while RESETTING): give back the claim, recreate a fatal
 * producer, wait for reports and marks, then back off and resume. Failed rows are recorded
 * by reset_send_note_failed, which kick sends once nothing is in the producer. */
void reset_advance(struct relay *r)
{
    claim_release(r);
    poll_stop(r);
    if (r->reset.fatal_pending) {
        char err[512];
        r->reset.fatal_pending = 0;
        if (sink_recreate(r->sink, err, sizeof(err)) != 0) {
            log_error("relay: %s", err);
            r->reset.fatal_pending = 1;
        } else {
            r->m.producer_recreated_total++;
        }
        /* Reports the old producer never gave: those rows were not acknowledged. */
        for (size_t i = 0; i < r->win.n; i++)
            if (r->win.rows[i].state == ROW_PRODUCED) {
                r->win.rows[i].kslot = -1;
                r->win.rows[i].fail = FAILURE_PRODUCER;
                r->win.rows[i].maybe_persisted = 1; /* no report: unknown, count it */
                window_set_state(&r->win, &r->win.rows[i], ROW_FAILED);
            }
        kshare_clear(&r->kshare); /* the new producer holds nothing */
        if (!r->reset.fatal_pending)
            poison_dead_letters_resend(r);
    }
    if (window_count(&r->win, ROW_MASK(ROW_PRODUCED) | ROW_MASK(ROW_ACKED) | ROW_MASK(ROW_MARKING) |
                                  ROW_MASK(ROW_FAILED) | ROW_MASK(ROW_PARKING)) ||
        poison_updates_pending(r) || r->reset.waiting)
        return;
    int delay = backoff_next(&r->reset.backoff);
    /* A topic paused in this reset (or before) stays paused past the first claim after it:
     * a pause shorter than the back-off would end before that claim, which would take its
     * rows again and fail again; in exactly-once mode their failure aborts the transaction
     * of every other row, so no row would ever go (seen in CI with a 3 s pause against a
     * back-off grown to 10 s). */
    pauses_at_least(&r->paused, mono_ms() + delay + RESET_PAUSE_MARGIN_MS);
    r->reset.waiting = 1;
    ev_timer_set(&r->reset.timer, delay / 1000.0, 0.0);
    ev_timer_start(r->loop, &r->reset.timer);
    log_info("relay: in-flight deliveries settled; claiming again in %d ms", delay);
}

static void note_failed_ok(struct relay *r, PGresult *res)
{
    (void)res;
    size_t n = window_remove_state(&r->win, ROW_FAILED);
    log_info("relay: %zu rows whose delivery failed stay PENDING (last_error recorded)", n);
}

static const struct worker_stmt note_failed_stmt = {
    .what = "recording failed deliveries", .on_ok = note_failed_ok};

/* Judges the failed rows, then records last_error on those that stay PENDING. Returns 0 if
 * a statement was sent. */
int reset_send_note_failed(struct relay *r)
{
    poison_judge_failures(r);
    if (!r->win.n_state[ROW_FAILED]) {
        relay_want_kick(r); /* parks and counted attempts are written next */
        return -1;
    }
    /* librdkafka says whether a failed message may have been written anyway */
    for (size_t i = 0; i < r->win.n; i++)
        if (r->win.rows[i].state == ROW_FAILED && r->win.rows[i].maybe_persisted)
            r->m.possible_duplicates_total++;
    struct strbuf ids;
    strbuf_init(&ids);
    window_ids_literal(&r->win, ROW_MASK(ROW_FAILED), 0, &ids);
    const char *params[2] = {ids.buf, r->reset.last_failure};
    int rc = worker_send(r, &note_failed_stmt, r->sql.note_failed, 2, params);
    strbuf_destroy(&ids);
    return rc;
}

void reset_fatal(struct relay *r, const char *why)
{
    r->reset.fatal_pending = 1;
    reset_start(r, why);
}

void reset_delivery_ok(struct relay *r)
{
    if (r->mode == MODE_RUNNING)
        backoff_reset(&r->reset.backoff);
}

void reset_stop(struct relay *r)
{
    ev_timer_stop(r->loop, &r->reset.timer);
}
