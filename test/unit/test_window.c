/* Unit tests: the in-flight window (sorted merge, lookups, states and their counts,
 * id literals for the claim's exclusion and the mark, per-partition counts). */
#include "relay/window.h"
#include "tap.h"

static struct inflight_row row(int64_t id, int partition)
{
    return (struct inflight_row){.id = id, .partition = partition, .bytes = 100 * id};
}

static int sorted(const struct window *w)
{
    for (size_t i = 1; i < w->n; i++)
        if (w->rows[i - 1].id >= w->rows[i].id)
            return 0;
    return 1;
}

int main(void)
{
    struct window w = {0};
    struct inflight_row a[] = {row(10, 1), row(20, 2), row(30, 1)};
    window_add(&w, a, 3);
    /* a later claim may return rows below ones in flight (late commits): merged in order */
    struct inflight_row b[] = {row(5, 3), row(25, 2), row(40, 0)};
    window_add(&w, b, 3);
    is_int(w.n, 6, "six rows in flight");
    is_int(w.bytes, 100 * (10 + 20 + 30 + 5 + 25 + 40), "payload bytes in flight summed");
    ok(sorted(&w), "kept sorted by id after merging a claim with lower ids");
    is_int(w.n_state[ROW_QUEUED], 6, "new rows are QUEUED");
    ok(window_find(&w, 25) && window_find(&w, 25)->partition == 2, "find 25");
    ok(window_find(&w, 26) == NULL, "no row 26");
    ok(window_find(&w, 1) == NULL && window_find(&w, 99) == NULL, "nothing outside the range");

    window_set_state(&w, window_find(&w, 10), ROW_PRODUCED);
    window_set_state(&w, window_find(&w, 20), ROW_ACKED);
    window_set_state(&w, window_find(&w, 30), ROW_ACKED);
    window_set_state(&w, window_find(&w, 5), ROW_ACKED);
    is_int(w.n_state[ROW_ACKED], 3, "three acknowledged");
    is_int(w.n_state[ROW_QUEUED], 2, "two still queued");
    is_int(window_count(&w, ROW_MASK(ROW_ACKED) | ROW_MASK(ROW_PRODUCED)), 4, "count over a mask");

    struct strbuf sb;
    strbuf_init(&sb);
    is_int(window_ids_literal(&w, ~0u, 0, &sb), 6, "all ids");
    is_str(sb.buf, "{5,10,20,25,30,40}", "the claim's exclusion literal, in id order");
    strbuf_reset(&sb);
    is_int(window_take(&w, ROW_ACKED, ROW_MARKING, 2, &sb), 2, "mark takes at most 2");
    is_str(sb.buf, "{5,20}", "lowest acknowledged ids first");
    is_int(w.n_state[ROW_MARKING], 2, "now marking");
    is_int(w.n_state[ROW_ACKED], 1, "one acknowledged left");
    is_int(window_move(&w, ROW_MARKING, ROW_ACKED), 2, "a failed mark puts them back");
    is_int(w.n_state[ROW_ACKED], 3, "three acknowledged again");
    strbuf_reset(&sb);
    window_take(&w, ROW_ACKED, ROW_MARKING, 0, &sb);
    is_str(sb.buf, "{5,20,30}", "no limit: every acknowledged row");
    is_int(window_remove_state(&w, ROW_MARKING), 3, "marked rows leave the window");
    is_int(w.bytes, 100 * (10 + 25 + 40), "their bytes leave with them");
    is_int(w.n, 3, "three left");
    ok(sorted(&w), "still sorted");
    is_int(window_high_id(&w), 40, "highest id");

    int counts[4];
    window_per_partition(&w, counts, 4);
    ok(counts[0] == 1 && counts[1] == 1 && counts[2] == 1 && counts[3] == 0,
       "per partition: %d %d %d %d", counts[0], counts[1], counts[2], counts[3]);

    window_remove_one(&w, window_find(&w, 25));
    is_int(w.n, 2, "one removed");
    is_int(w.bytes, 100 * (10 + 40), "and its bytes");
    ok(window_find(&w, 25) == NULL && window_find(&w, 40) != NULL, "the right one");
    is_int(w.n_state[ROW_QUEUED], 1, "state count follows removal");
    strbuf_reset(&sb);
    window_ids_literal(&w, ROW_MASK(ROW_FAILED), 0, &sb);
    is_str(sb.buf, "{}", "an empty literal when no row matches");

    /* a large claim: the merge keeps order and counts */
    struct inflight_row big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = row(1000 + 2 * i, i % 64);
    window_add(&w, big, 1000);
    is_int(w.n, 1002, "1,002 rows");
    ok(sorted(&w), "sorted after a large merge");
    is_int(w.n_state[ROW_QUEUED], 1001, "counts");
    strbuf_destroy(&sb);
    window_destroy(&w);
    is_int(w.n, 0, "destroyed");
    return done();
}
