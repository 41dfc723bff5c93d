/* The relay loop: claim PENDING rows in id order, publish them through a sink (Kafka or
 * RabbitMQ), record as sent what the broker acknowledged (mark, delete or keep), and shut
 * down cleanly. One thread, one libev loop; see
 * docs/HOW-IT-WORKS.md for the claim and ordering rules. */
#ifndef OUTBOX_RELAY_H
#define OUTBOX_RELAY_H

#include <ev.h>
#include <stdint.h>

#include "relay/config.h"
#include "relay/relay_metrics.h"

struct relay;

/* cfg and loop are borrowed and must outlive the relay. NULL with err on failure. */
struct relay *relay_new(struct ev_loop *loop, const struct config *cfg, char *err, size_t errlen);
void relay_free(struct relay *r);

/* Starts connecting and relaying; returns at once. The loop runs it. */
void relay_start(struct relay *r);
/* Stop claiming, wait (bounded) for in-flight deliveries, mark them, then break the loop.
 * Called from the SIGTERM/SIGINT watcher; a second call exits the process at once. */
void relay_shutdown(struct relay *r);
/* Exit status once the loop has returned: 0 after a clean shutdown. */
int relay_exit_code(const struct relay *r);

/* The relay's metrics (loop thread only). */
const struct metrics *relay_metrics(const struct relay *r);

#endif
