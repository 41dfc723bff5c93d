/* When to claim again (relay_int.h, struct poll_state): the adaptive poll, and the conditional
 * doorbell (armed once idle: a LISTEN wakes the relay at the next commit). */
#include "relay/relay_int.h"

/* Claim again at once after a full batch (1), soon after a partial one, and back off
 * towards OUTBOX_POLL_INTERVAL_MS while claims come back empty; once idle, arm the doorbell. */
int poll_after_claim(struct relay *r, int rows, int limit)
{
    struct poll_state *p = &r->poll;
    if (rows >= limit && !claim_isolating(r)) {
        p->idle_delay_ms = MIN_POLL_DELAY_MS;
        return 1;
    }
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
    if (claim_isolating(r))
        return 0; /* the next claim follows the delivery report */
    ev_timer_stop(r->loop, &p->timer);
    ev_timer_set(&p->timer, p->idle_delay_ms / 1000.0, 0.0);
    ev_timer_start(r->loop, &p->timer);
    return 0;
}

static void poll_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    claim_want(r);
    relay_want_kick(r);
}

void poll_init(struct relay *r)
{
    r->poll.idle_delay_ms = MIN_POLL_DELAY_MS;
    ev_init(&r->poll.timer, poll_timer_cb);
    r->poll.timer.data = r;
}

void poll_stop(struct relay *r)
{
    ev_timer_stop(r->loop, &r->poll.timer);
}

void poll_listener_ready(struct relay *r)
{
    r->poll.doorbell_armed = 0;
}

void poll_doorbell_rang(struct relay *r)
{
    r->poll.doorbell_armed = 0;
    r->poll.idle_delay_ms = MIN_POLL_DELAY_MS;
}

int poll_arm_wanted(const struct relay *r)
{
    return r->poll.arm_wanted;
}

/* ---- the doorbell ----------------------------------------------------------------- */

static void arm_ok(struct relay *r, PGresult *res)
{
    (void)res;
    r->poll.doorbell_armed = 1;
    /* A row committed before the arm took effect rang no bell: look once more. */
    claim_want(r);
}

static const struct worker_stmt arm_stmt = {.what = "arming the doorbell", .on_ok = arm_ok};

void doorbell_send_arm(struct relay *r)
{
    const char *params[1] = {r->cfg->notify_channel};
    r->poll.arm_wanted = 0;
    worker_send(r, &arm_stmt, r->sql.arm, 1, params);
}
