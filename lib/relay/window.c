/* The in-flight window (see window.h). */
#include "relay/window.h"

#include <stdlib.h>
#include <string.h>

void window_destroy(struct window *w)
{
    free(w->rows);
    memset(w, 0, sizeof(*w));
}

struct inflight_row *window_find(struct window *w, int64_t id)
{
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->rows[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->n && w->rows[lo].id == id ? &w->rows[lo] : NULL;
}

void window_set_state(struct window *w, struct inflight_row *row, enum row_state state)
{
    w->n_state[row->state]--;
    w->n_state[state]++;
    row->state = state;
}

void window_add(struct window *w, const struct inflight_row *add, size_t n)
{
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2;
        w->rows = xrealloc(w->rows, w->cap * sizeof(*w->rows));
    }
    /* merge from the back: both runs are sorted */
    size_t i = w->n, j = n, k = w->n + n;
    while (j > 0) {
        if (i > 0 && w->rows[i - 1].id > add[j - 1].id)
            w->rows[--k] = w->rows[--i];
        else {
            w->rows[--k] = add[--j];
            w->rows[k].state = ROW_QUEUED;
        }
    }
    w->n += n;
    w->n_state[ROW_QUEUED] += n;
    for (size_t a = 0; a < n; a++)
        w->bytes += add[a].bytes;
}

size_t window_remove_state(struct window *w, enum row_state state)
{
    size_t out = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (w->rows[i].state != state)
            w->rows[out++] = w->rows[i];
        else
            w->bytes -= w->rows[i].bytes;
    }
    size_t removed = w->n - out;
    w->n = out;
    w->n_state[state] -= removed;
    return removed;
}

void window_remove_one(struct window *w, struct inflight_row *row)
{
    size_t i = (size_t)(row - w->rows);
    w->n_state[row->state]--;
    w->bytes -= row->bytes;
    memmove(&w->rows[i], &w->rows[i + 1], (w->n - i - 1) * sizeof(*w->rows));
    w->n--;
}

size_t window_move(struct window *w, enum row_state from, enum row_state to)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n && w->n_state[from]; i++)
        if (w->rows[i].state == from) {
            window_set_state(w, &w->rows[i], to);
            n++;
        }
    return n;
}

size_t window_take(struct window *w, enum row_state from, enum row_state to, size_t max,
                   struct strbuf *out)
{
    size_t n = 0;
    pgarray_open(out);
    for (size_t i = 0; i < w->n && w->n_state[from] && (!max || n < max); i++)
        if (w->rows[i].state == from) {
            pgarray_int(out, w->rows[i].id);
            window_set_state(w, &w->rows[i], to);
            n++;
        }
    pgarray_close(out);
    return n;
}

size_t window_count(const struct window *w, unsigned states)
{
    size_t n = 0;
    for (int s = 0; s < ROW_STATES; s++)
        if (states & ROW_MASK(s))
            n += w->n_state[s];
    return n;
}

size_t window_ids_literal(const struct window *w, unsigned states, size_t max, struct strbuf *out)
{
    size_t n = 0;
    pgarray_open(out);
    for (size_t i = 0; i < w->n && (!max || n < max); i++)
        if (states & ROW_MASK(w->rows[i].state)) {
            pgarray_int(out, w->rows[i].id);
            n++;
        }
    pgarray_close(out);
    return n;
}

void window_per_partition(const struct window *w, int *counts, int nparts)
{
    memset(counts, 0, (size_t)nparts * sizeof(*counts));
    for (size_t i = 0; i < w->n; i++)
        if (w->rows[i].partition >= 0 && w->rows[i].partition < nparts)
            counts[w->rows[i].partition]++;
}

int64_t window_high_id(const struct window *w)
{
    return w->n ? w->rows[w->n - 1].id : 0;
}

size_t window_parts_literal(const struct window *w, unsigned states, struct strbuf *out)
{
    size_t n = 0;
    pgarray_open(out);
    for (size_t i = 0; i < w->n; i++)
        if (states & ROW_MASK(w->rows[i].state)) {
            pgarray_int(out, w->rows[i].partition);
            n++;
        }
    pgarray_close(out);
    return n;
}
