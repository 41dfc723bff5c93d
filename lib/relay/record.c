/* Recording rows as sent (relay_int.h, struct record_state): acknowledged rows wait up to
 * OUTBOX_MARK_DELAY_MS for more, then one statement records them, in every mode: mark mode's
 * marks them SENT, delete mode's deletes them, keep mode's writes a record of what was
 * published (keep_sql.c) whose result keep.c takes. The one place a row becomes sent. */
#include <signal.h>
#include <unistd.h>

#include "core/log.h"
#include "relay/relay_int.h"

#define MARK_MAX_IDS 10000

static void record_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_want_kick(w->data);
}

static void mark_ok(struct relay *r, PGresult *res)
{
    long long refused = 0;
    if (r->cfg->keep) {
        refused = keep_mark_result(r, res);
        keep_published(r, res);
    }
    /* recorded: they leave the progress records once every standby has the record (not when
     * keep mode refused some: which is not said, and a row committed but not recorded must
     * stay in the record) */
    if (r->cfg->exactly_once && refused == 0)
        for (size_t i = 0; i < r->win.n; i++)
            if (r->win.rows[i].state == ROW_MARKING)
                eos_tail_recorded(r, eos_group_of(r->cfg, r->win.rows[i].partition), r->win.rows[i].id);
    size_t n = window_remove_state(&r->win, ROW_MARKING);
    r->m.marked_total += n;
    log_debug("mark: %zu rows SENT, in flight %zu", n, r->win.n);
}

/* Not marked: the rows stay acknowledged and are marked by a later statement. */
static void mark_fail(struct relay *r, PGresult *res)
{
    (void)res;
    window_move(&r->win, ROW_MARKING, ROW_ACKED);
    r->record.acked_since_ms = 1; /* waited already: due at the next turn */
}

/* Whether the acknowledged rows are to be recorded now. Groups of acknowledgements arrive a
 * few rows at a time at low rates, and each record is a statement and a commit: they wait
 * up to OUTBOX_MARK_DELAY_MS for more (a timer wakes the loop then). Not while stopping or
 * resetting, nor while isolating a row (the next one-row claim waits for this record), nor
 * once they are half a statement's worth, nor while the window is half full or too full for
 * the next claim (claims would wait for them). */
int mark_due(struct relay *r)
{
    size_t acked = r->win.n_state[ROW_ACKED];
    if (!acked)
        return 0;
    size_t max = (size_t)r->cfg->max_inflight;
    int64_t max_bytes = r->cfg->max_inflight_bytes;
    if (r->cfg->mark_delay_ms <= 0 || r->mode != MODE_RUNNING || claim_isolating(r) ||
        acked >= MARK_MAX_IDS / 2 || r->win.n * 2 >= max || r->win.n + (size_t)r->cfg->batch_size > max ||
        r->win.bytes * 2 >= max_bytes)
        return 1;
    int64_t wait = r->record.acked_since_ms + r->cfg->mark_delay_ms - mono_ms();
    if (wait <= 0)
        return 1;
    if (!ev_is_active(&r->record.mark_timer)) {
        ev_timer_set(&r->record.mark_timer, (double)wait / 1000.0, 0.0);
        ev_timer_start(r->loop, &r->record.mark_timer);
    }
    return 0;
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
    struct strbuf ids, parts;
    strbuf_init(&ids);
    strbuf_init(&parts);
    window_take(&r->win, ROW_ACKED, ROW_MARKING, MARK_MAX_IDS, &ids);
    if (!r->win.n_state[ROW_ACKED]) {
        r->record.acked_since_ms = 0;
        ev_timer_stop(r->loop, &r->record.mark_timer);
    }
    if (r->cfg->keep) /* their lease partitions, in the same order */
        window_parts_literal(&r->win, ROW_MASK(ROW_MARKING), &parts);
    char high[24], key[16];
    snprintf(high, sizeof(high), "%lld", (long long)window_high_id(&r->win));
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    const char *params[5] = {ids.buf, r->cfg->relay_name, high, parts.buf, key};
    if (worker_send(r, &mark_stmt, r->sql.mark, r->cfg->keep ? 5 : 3, params) != 0) {
        window_move(&r->win, ROW_MARKING, ROW_ACKED);
        r->record.acked_since_ms = 1;
    }
#ifdef OUTBOX_TEST_HOOKS
    else if (r->test_kill_after_mark_sent_after > 0 &&
             r->m.published_total >= (uint64_t)r->test_kill_after_mark_sent_after) {
        log_warn("test hook: SIGKILL while recording %zu rows", r->win.n_state[ROW_MARKING]);
        kill(getpid(), SIGKILL);
    }
#endif
    strbuf_destroy(&ids);
    strbuf_destroy(&parts);
}

void record_init(struct relay *r)
{
    ev_init(&r->record.mark_timer, record_timer_cb); /* a kick, once the wait for more is over */
    r->record.mark_timer.data = r;
}

void record_stop(struct relay *r)
{
    ev_timer_stop(r->loop, &r->record.mark_timer);
}

void record_note_acked(struct relay *r)
{
    if (!r->record.acked_since_ms)
        r->record.acked_since_ms = mono_ms();
}
