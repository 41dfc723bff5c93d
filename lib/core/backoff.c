/* Capped exponential backoff with jitter. */
#include "core/backoff.h"

#include <time.h>

void backoff_init(struct backoff *b, int base_ms, int cap_ms)
{
    b->base_ms = base_ms > 0 ? base_ms : 1;
    b->cap_ms = cap_ms >= b->base_ms ? cap_ms : b->base_ms;
    b->attempt = 0;
    b->seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)b;
}

static uint32_t next_random(struct backoff *b)
{
    b->seed = b->seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(b->seed >> 33);
}

int backoff_next(struct backoff *b)
{
    int64_t delay = b->base_ms;
    for (int i = 0; i < b->attempt && delay < b->cap_ms; i++)
        delay *= 2;
    if (delay > b->cap_ms)
        delay = b->cap_ms;
    if (b->attempt < 62)
        b->attempt++;
    /* jitter in [delay/2, delay] */
    int64_t half = delay / 2;
    return (int)(delay - (half ? (int64_t)(next_random(b) % (uint64_t)(half + 1)) : 0));
}

void backoff_reset(struct backoff *b)
{
    b->attempt = 0;
}
