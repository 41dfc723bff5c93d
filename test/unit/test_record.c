/* Unit tests: when acknowledged rows are recorded as sent (record.c's mark_due), no server:
 * they wait up to OUTBOX_MARK_DELAY_MS for more, with a timer to wake the loop, but not
 * while stopping or resetting, nor while isolating a row, nor once the window is half full
 * (rows or bytes) or too full for the next claim, nor without a delay set. */
#include <stdlib.h>
#include <string.h>

#include "loop_fixture.h"
#include "tap.h"

/* The window holds n rows (ids 1..n, 10 bytes each), the first acked of them acknowledged. */
static void window_of(struct relay *r, int n, int acked)
{
    window_destroy(&r->win);
    memset(&r->win, 0, sizeof(r->win));
    for (int i = 1; i <= n; i++) {
        struct inflight_row row = {.id = i, .bytes = 10, .kslot = -1};
        window_add(&r->win, &row, 1);
        r->win.bytes += 10;
        if (i <= acked)
            window_set_state(&r->win, window_find(&r->win, i), ROW_ACKED);
    }
}

int main(void)
{
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.max_inflight = 100;
    cfg.max_inflight_bytes = 100000;
    cfg.batch_size = 10;
    cfg.mark_delay_ms = 1000;
    struct relay *r = fixture_relay(&cfg);
    record_init(r);

    window_of(r, 5, 0);
    is_int(mark_due(r), 0, "nothing acknowledged: nothing to record");
    window_of(r, 5, 2);
    record_note_acked(r);
    is_int(mark_due(r), 0, "two acknowledged, the delay not over: they wait for more");
    ok(ev_is_active(&r->record.mark_timer), "a timer wakes the loop when the delay is over");
    r->record.acked_since_ms = mono_ms() - 1001;
    is_int(mark_due(r), 1, "the delay is over: recorded now");
    r->record.acked_since_ms = mono_ms();

    r->mode = MODE_DRAINING;
    is_int(mark_due(r), 1, "stopping: recorded at once");
    r->mode = MODE_RESETTING;
    is_int(mark_due(r), 1, "resetting: recorded at once");
    r->mode = MODE_RUNNING;

    claim_isolate_up_to(r, 3);
    is_int(mark_due(r), 1, "isolating a row: recorded at once (the next one-row claim waits for it)");
    claim_isolation_end(r, "test");
    is_int(mark_due(r), 0, "isolation over: waiting again");

    window_of(r, 50, 2);
    is_int(mark_due(r), 1, "the window half full: recorded at once");
    window_of(r, 45, 2);
    is_int(mark_due(r), 0, "45 of 100 rows in flight: waiting");
    cfg.batch_size = 60;
    is_int(mark_due(r), 1, "no room for the next claim: recorded at once");
    cfg.batch_size = 10;
    cfg.max_inflight_bytes = 900;
    is_int(mark_due(r), 1, "half the bytes in flight: recorded at once");
    cfg.max_inflight_bytes = 100000;
    cfg.mark_delay_ms = 0;
    is_int(mark_due(r), 1, "OUTBOX_MARK_DELAY_MS=0: recorded at once");

    record_stop(r);
    window_destroy(&r->win);
    free(r);
    return done();
}
