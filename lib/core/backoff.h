/* Capped exponential backoff with jitter, for reconnects and retries. */
#ifndef OUTBOX_BACKOFF_H
#define OUTBOX_BACKOFF_H

#include <stdint.h>

struct backoff {
    int base_ms;
    int cap_ms;
    int attempt;
    uint64_t seed;
};

void backoff_init(struct backoff *b, int base_ms, int cap_ms);
/* Delay before the next attempt: base*2^attempt capped at cap, times a jitter in
 * [0.5, 1.0]; advances the attempt counter. */
int backoff_next(struct backoff *b);
void backoff_reset(struct backoff *b);

#endif
