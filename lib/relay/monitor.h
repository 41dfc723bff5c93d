/* Monitor: a third PostgreSQL connection, off the hot path, that keeps the backlog
 * gauges fresh (capped count, oldest age, parked rows, NOTIFY queue usage), reports
 * long-running transactions, estimates duplicates after a crash, and runs retention. */
#ifndef OUTBOX_MONITOR_H
#define OUTBOX_MONITOR_H

#include <ev.h>
#include <stdint.h>

#include "relay/config.h"
#include "relay/relay_metrics.h"
#include "relay/outbox.h"

struct monitor;

/* All arguments are borrowed and must outlive the monitor; it writes gauges and the
 * retention/duplicates counters into m. */
struct monitor *monitor_new(struct ev_loop *loop, const struct config *cfg,
                            const struct outbox_sql *sql, struct metrics *m);
void monitor_free(struct monitor *mon);
void monitor_start(struct monitor *mon);
void monitor_stop(struct monitor *mon);
int monitor_connected(const struct monitor *mon);

/* Where the relay's proof stands (floor.h: no unseen id at or below it can still commit;
 * 0 when nothing is proven or the worker session is down) and the claim floors' epoch
 * (bumped by every reset), read when the backlog statement is sent. */
void monitor_set_proof(struct monitor *mon, int64_t (*proof)(void *ctx, uint32_t *epoch), void *ctx);

/* Where the backlog statement starts in each lease partition (out[p]; 0 is the bottom): at
 * the first pending row the last statement found there (heads[p], 0 when none) or just
 * above what was proven when that statement was sent (proven), whichever is lower. Every
 * row pending now was pending then, at or above its partition's head, or committed since,
 * above that proof — except a row set back to PENDING (by hand or by a requeue) and a row
 * whose id breaks the proof's premises (an id given explicitly, a rewound sequence, a
 * restore or another server), which a statement from the bottom finds (bottom set: every
 * out[p] 0; also when proven is 0). */
void monitor_heads_bounds(const int64_t heads[], int64_t proven, int bottom, int64_t out[]);
/* The backlog statement's last column (each partition's first pending row, 0 when none,
 * comma-separated) into heads; -1, heads untouched, unless all 64 parse. */
int monitor_parse_heads(const char *text, int64_t heads[]);

/* Cap of the exact pending count; above it outbox_pending_rows is an upper bound. */
#define MONITOR_COUNT_CAP 100000

#endif
