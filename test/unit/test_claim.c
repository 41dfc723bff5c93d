/* Unit tests: the claim's result taken in (claim.c's claim_result), no server: its rows join
 * the window as queued with what the claim read of them, the highest id claimed moves, the
 * next claim goes at once when the claim was full (or a partition met its quota) and waits
 * for the poll otherwise, an empty claim ends isolation, a claim that started above the
 * floors is dropped when the requeue count moved (rows were put back below them), and the
 * producer then reads the rows in order through the cursor. */
#include <stdlib.h>
#include <string.h>

#include "loop_fixture.h"
#include "tap.h"

/* What claim_send sets before the statement goes: a claim of limit rows, quota per
 * partition, from partition 0 and 1 at the given floors. */
static void sent(struct relay *r, int limit, int quota, int64_t floor0, int64_t floor1)
{
    r->claim.limit = limit;
    r->claim.quota = quota;
    r->claim.budget = 1000000;
    r->claim.fc = (struct floor_claim){.nparts = 2, .parts = {0, 1}, .sent = {floor0, floor1}, .quota = quota};
    r->claim.sent_ms = mono_ms();
}

int main(void)
{
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.batch_size = 10;
    cfg.poll_interval_ms = 1000;
    struct relay *r = fixture_relay(&cfg);
    claim_init(r);
    poll_init(r);

    /* a partial claim: its rows queued in the window, the next claim after the poll */
    sent(r, 10, 10, 0, 0);
    claim_result(r, fixture_claim(4, 0, 0));
    is_int((int)r->win.n, 4, "the four rows joined the window");
    struct inflight_row *row3 = window_find(&r->win, 3);
    ok(row3 && row3->state == ROW_QUEUED && row3->partition == 1 && row3->bytes == 2 && row3->created_ms == 1000,
       "row 3 queued with its partition, size and time as the claim read them");
    is_int((int)r->claim.claimed_high, 4, "the highest id claimed moved to 4");
    ok(claim_in_hand(r) && claim_rows_left(r) == 4, "the claim is in hand, four rows to produce");
    is_int(r->claim.wanted, 0, "a partial claim: the next waits for the poll");
    ok(ev_is_active(&r->poll.timer), "the poll timer is set");
    struct outbox_row row;
    struct inflight_row *slot;
    ok(claim_cursor_row(r, &row, &slot) && row.id == 1 && strcmp(row.aggregate_id, "k0") == 0 &&
       strcmp(row.payload, "{}") == 0, "the cursor starts at row 1, key k0, its payload");
    claim_release(r);
    window_remove_state(&r->win, ROW_QUEUED);

    /* a full claim (OUTBOX_BATCH_SIZE rows): the next goes at once */
    cfg.batch_size = 4;
    sent(r, 4, 10, 0, 0);
    claim_result(r, fixture_claim(4, 0, 0));
    is_int(r->claim.wanted, 1, "a full claim: the next at once");
    claim_release(r);
    cfg.batch_size = 10;

    /* a partition met its quota: the next goes at once */
    sent(r, 10, 2, 0, 0);
    claim_result(r, fixture_claim(4, 0, 0));
    is_int(r->claim.wanted, 1, "two rows of a partition with a quota of 2: the next at once");
    claim_release(r);

    /* an empty claim ends isolation */
    claim_isolate_up_to(r, 7);
    sent(r, 1, 1, 0, 0);
    claim_result(r, fixture_claim(0, 0, 0));
    is_int((int)claim_isolating(r), 0, "an empty claim: isolation over");
    ok(!claim_in_hand(r), "nothing in hand");

    /* a claim that started above the floors, with the requeue count moved since the last
     * claim, is dropped: rows were put back below the floors */
    claim_schema(r, 5);
    sent(r, 10, 10, 0, 0);
    claim_result(r, fixture_claim(2, 0, 7)); /* the count seen first: 7 */
    claim_release(r);
    window_remove_state(&r->win, ROW_QUEUED);
    uint64_t resets = r->m.floor_resets_total;
    sent(r, 10, 10, 3, 0);                   /* partition 0 from its floor 3 */
    claim_result(r, fixture_claim(2, 0, 8)); /* and the count moved */
    ok(!claim_in_hand(r) && r->win.n == 0, "the claim from the floors is dropped, no row queued");
    ok(r->m.floor_resets_total > resets && r->claim.wanted == 1, "the floors reset, the next claim at once");

    /* while resetting, a claim's rows are not taken */
    r->mode = MODE_RESETTING;
    sent(r, 10, 10, 0, 0);
    claim_result(r, fixture_claim(3, 0, 8));
    ok(!claim_in_hand(r) && r->win.n == 0, "resetting: the result is dropped");

    claim_release(r);
    poll_stop(r);
    window_destroy(&r->win);
    claim_destroy(r);
    free(r);
    return done();
}
