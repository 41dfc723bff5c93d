/* The monitor's backlog statement reads each lease partition from a bound rather than from
 * the bottom of the pending index (monitor.h): the bounds, and the column they come from. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/monitor.h"

void monitor_heads_bounds(const int64_t heads[], int64_t proven, int bottom, int64_t out[])
{
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        if (bottom || proven <= 0) {
            out[p] = 0;
            continue;
        }
        out[p] = proven + 1;
        if (heads[p] > 0 && heads[p] < out[p])
            out[p] = heads[p];
    }
}

/* The last column of the backlog statement: each partition's first pending row, into
 * heads only if the whole column parses. */
int monitor_parse_heads(const char *text, int64_t heads[])
{
    int64_t v[OUTBOX_LEASE_PARTITIONS];
    const char *p = text;
    for (int i = 0; i < OUTBOX_LEASE_PARTITIONS; i++) {
        char *end;
        v[i] = strtoll(p, &end, 10);
        if (end == p || (i + 1 < OUTBOX_LEASE_PARTITIONS ? *end != ',' : *end != '\0'))
            return -1;
        p = end + 1;
    }
    memcpy(heads, v, sizeof(v));
    return 0;
}
