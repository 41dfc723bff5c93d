/* Unit tests: the producer's side of the loop (produce.c, claim_rows.c) driven by a fake sink
 * and a claim result made by hand, no server: rows go to the sink in id order, backpressure
 * resumes at the row the sink refused, rows no longer queued or of a partition whose lease is
 * not active are passed over, a row that can never be published is parked, the claim is
 * released once every row was passed, and a delivery report moves its row on. */
#include <stdlib.h>
#include <string.h>

#include "loop_fixture.h"
#include "tap.h"

/* The fake sink: takes up to `room` messages, then says SINK_FULL; records what it took. */
struct fake_sink {
    struct sink base; /* first */
    int room;
    int64_t ids[64];
    char topics[64][64];
    int n;
};

static enum sink_queued fake_produce(struct sink *sk, const struct message *msg, const char *key,
                                     const char *value, size_t value_len, int64_t timestamp_ms,
                                     int64_t row_id, int *err)
{
    struct fake_sink *f = (struct fake_sink *)sk;
    *err = 0;
    if (f->room <= 0)
        return SINK_FULL;
    f->room--;
    snprintf(f->topics[f->n], sizeof(f->topics[f->n]), "%s", msg->topic);
    f->ids[f->n++] = row_id;
    return SINK_QUEUED;
}

static long long fake_max_message_bytes(const struct sink *sk)
{
    return 1000;
}

static enum failure_reason fake_classify(int err)
{
    return FAILURE_TRANSIENT;
}

static const char *fake_err_str(int err)
{
    return "fake";
}

static const struct sink_ops fake_ops = {.name = "fake", .max_message_name = "the fake limit",
                                         .produce = fake_produce, .max_message_bytes = fake_max_message_bytes,
                                         .classify = fake_classify, .err_str = fake_err_str};

/* A claim of rows 1..n (loop_fixture.h), queued in the window as the claim puts them. */
static void claim_rows(struct relay *r, int n, int big4)
{
    PGresult *res = fixture_claim(n, big4 ? 4 : 0, 0);
    window_destroy(&r->win);
    memset(&r->win, 0, sizeof(r->win));
    for (int i = 0; i < n; i++) {
        struct inflight_row row = {.id = i + 1, .partition = (i + 1) % 2, .bytes = (big4 && i + 1 == 4) ? 5000 : 2,
                                   .kslot = -1, .created_ms = 1000};
        window_add(&r->win, &row, 1);
    }
    r->claim.res = res;
    r->claim.next = 0;
}

static int state_of(struct relay *r, int64_t id)
{
    struct inflight_row *row = window_find(&r->win, id);
    return row ? (int)row->state : -1;
}

int main(void)
{
    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    char no_dead_letters[] = "", block[] = "block";
    cfg.dead_letter_topic = no_dead_letters;
    cfg.poison_policy = block;
    struct relay *r = fixture_relay(&cfg);
    r->layout = (struct message_layout){.topic_template = "outbox.event.{aggregate_type}"};
    kshare_init(&r->kshare, 1000, 1000000, NULL);
    struct fake_sink f = {.base = {&fake_ops}, .room = 3};
    r->sink = &f.base;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        r->lease.part[p].state = LEASE_ACTIVE;

    /* backpressure, then the rest from the row the sink refused */
    claim_rows(r, 5, 0);
    produce_claimed(r);
    is_int(f.n, 3, "three rows taken before the sink was full");
    ok(f.n == 3 && f.ids[0] == 1 && f.ids[1] == 2 && f.ids[2] == 3, "in id order");
    is_str(f.topics[0], "outbox.event.order", "topic from the template");
    is_int(state_of(r, 3), ROW_PRODUCED, "row 3 produced");
    is_int(state_of(r, 4), ROW_QUEUED, "row 4 still queued");
    ok(claim_in_hand(r), "the claim is kept while rows of it wait");
    is_int(claim_rows_left(r), 2, "two rows left, the refused one among them");
    f.room = 10;
    produce_claimed(r);
    is_int(f.n, 5, "the rest taken after a completion");
    ok(f.ids[3] == 4 && f.ids[4] == 5, "from the refused row on, in order");
    ok(!claim_in_hand(r), "the claim released once every row was passed");

    /* rows not queued any more and rows of a partition not active are passed over */
    f.n = 0;
    claim_rows(r, 6, 0);
    window_remove_one(&r->win, window_find(&r->win, 2)); /* gone from the window (a reset) */
    r->lease.part[1].state = LEASE_GRACE;                /* odd ids: lease partition 1 */
    produce_claimed(r);
    ok(f.n == 2 && f.ids[0] == 4 && f.ids[1] == 6, "only rows 4 and 6 of partition 0 produced (%d)", f.n);
    is_int(state_of(r, 1), -1, "row 1 of the partition in grace left the window: it stays PENDING");
    is_int(state_of(r, 5), -1, "so did row 5");
    ok(!claim_in_hand(r), "released");
    r->lease.part[1].state = LEASE_ACTIVE;

    /* nothing while the relay is not running; the claim stays */
    f.n = 0;
    claim_rows(r, 2, 0);
    r->mode = MODE_RESETTING;
    produce_claimed(r);
    is_int(f.n, 0, "nothing produced while resetting");
    ok(claim_in_hand(r), "the claim is kept for the reset to release");
    r->mode = MODE_RUNNING;
    claim_release(r);

    /* a row that can never be published is parked, the others go; with the block policy the
     * later rows of its key wait */
    f.n = 0;
    claim_rows(r, 7, 1);
    produce_claimed(r);
    ok(f.n == 5 && f.ids[2] == 3 && f.ids[3] == 5 && f.ids[4] == 6, "rows 1, 2, 3, 5 and 6 produced (%d)", f.n);
    is_int(state_of(r, 4), ROW_PARKING, "row 4 (over the sink's limit, never fetched) parked");
    is_int(state_of(r, 7), -1, "row 7, of row 4's key, held back: out of the window, it stays PENDING");

    /* a delivery report: the row is acknowledged, counted and waits for its mark */
    produce_sink_callbacks.on_delivery(r, 1, 0, NULL, 1);
    is_int(state_of(r, 1), ROW_ACKED, "row 1 acknowledged");
    is_int((int)r->m.published_total, 1, "counted as published");
    ok(r->record.acked_since_ms > 0, "the record's delay counts from it");

    claim_release(r);
    window_destroy(&r->win);
    poison_destroy(r);
    claim_destroy(r);
    kshare_destroy(&r->kshare);
    free(r);
    return done();
}
