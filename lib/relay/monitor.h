/* Monitor: a third PostgreSQL connection, off the hot path, that keeps the backlog
 * gauges fresh (capped count, oldest age, parked rows, NOTIFY queue usage), reports
 * long-running transactions, estimates duplicates after a crash, and runs retention. */
#ifndef OUTBOX_MONITOR_H
#define OUTBOX_MONITOR_H

#include <ev.h>

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

/* Cap of the exact pending count; above it outbox_pending_rows is an upper bound. */
#define MONITOR_COUNT_CAP 100000

#endif
