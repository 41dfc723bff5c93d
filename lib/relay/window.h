/* The in-flight window: every row claimed and not yet marked, sorted by id, with its
 * state and a count per state. Pure (no I/O), so unit tests drive it directly. */
#ifndef OUTBOX_RELAY_WINDOW_H
#define OUTBOX_RELAY_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "relay/relay_metrics.h"
#include "core/util.h"

enum row_state {
    ROW_QUEUED,   /* claimed, not yet handed to the producer */
    ROW_PRODUCED, /* in the producer, no delivery report yet */
    ROW_ACKED,    /* acknowledged by Kafka, to be marked */
    ROW_MARKING,  /* in the mark statement in flight */
    ROW_FAILED,   /* delivery failed; judged once every report is in */
    ROW_PARKING,  /* being written back as parked or as a counted attempt */
    ROW_STATES
};

struct inflight_row {
    int64_t id;
    int64_t created_ms;
    int attempts;
    int partition; /* lease partition */
    int64_t bytes; /* payload bytes */
    int kslot;     /* its Kafka partition's share while in the producer (kshare.h), or -1 */
    enum row_state state;
    int err; /* the sink's delivery error while ROW_FAILED */
    enum failure_reason fail;
    int maybe_persisted;     /* a failed message that Kafka may have written anyway */
};

/* Embedded: zero-initialise, then window_destroy. */
struct window {
    struct inflight_row *rows;
    size_t n, cap;
    size_t n_state[ROW_STATES];
    int64_t bytes; /* payload bytes of every row in the window */
};

void window_destroy(struct window *w);
/* The row with this id, or NULL. Borrowed: valid until the window changes. */
struct inflight_row *window_find(struct window *w, int64_t id);
void window_set_state(struct window *w, struct inflight_row *row, enum row_state state);
/* Adds rows (ascending ids, none already present) as ROW_QUEUED, keeping the order. */
void window_add(struct window *w, const struct inflight_row *add, size_t n);
/* Drops every row in the given state; returns how many. */
size_t window_remove_state(struct window *w, enum row_state state);
void window_remove_one(struct window *w, struct inflight_row *row);
/* Moves every row in state from to state to; returns how many. */
size_t window_move(struct window *w, enum row_state from, enum row_state to);
/* Moves up to max rows (0: no limit) from state from to state to, lowest ids first, and
 * appends their ids to out as a bigint[] literal; returns how many. */
size_t window_take(struct window *w, enum row_state from, enum row_state to, size_t max,
                   struct strbuf *out);
/* Rows in any of the given states (a bit mask of 1 << state). */
size_t window_count(const struct window *w, unsigned states);
/* Appends the ids of rows in the given states (mask; ~0u for all) as a bigint[] literal,
 * at most max ids (0: no limit); returns how many. */
size_t window_ids_literal(const struct window *w, unsigned states, size_t max, struct strbuf *out);
/* The lease partitions of the rows in any of the given states, in the window's (id) order,
 * as a smallint[] literal (aligned with window_ids_literal's). */
size_t window_parts_literal(const struct window *w, unsigned states, struct strbuf *out);
/* Rows per lease partition (counts has nparts entries, zeroed first). */
void window_per_partition(const struct window *w, int *counts, int nparts);
/* The highest id in the window, 0 if empty. */
int64_t window_high_id(const struct window *w);

#define ROW_MASK(s) (1u << (s))

#endif
