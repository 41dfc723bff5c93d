/* Unit tests: where the monitor's backlog statement starts in each lease partition
 * (monitor.c's monitor_heads_bounds), no server. A bound never lies above a row that may be
 * pending now: one pending at the last statement (at or above its partition's head) or one
 * committed since (above the proof as it stood when that statement was sent). */
#include <stdint.h>
#include <stdio.h>

#include "relay/monitor.h"
#include "tap.h"

int main(void)
{
    int64_t heads[OUTBOX_LEASE_PARTITIONS] = {0}, out[OUTBOX_LEASE_PARTITIONS];
    heads[0] = 500;    /* a row pending below the proof: the bound is that row */
    heads[1] = 5000;   /* the first pending row above the proof: the bound is the proof + 1 */
    heads[2] = 1001;   /* just above it */
    heads[3] = 1000;   /* at it */
    /* partitions 4..63: none pending at the last statement */

    monitor_heads_bounds(heads, 1000, 0, out);
    is_int(out[0], 500, "a row pending at the last statement below the proof is read again");
    is_int(out[1], 1001, "a head above the proof: from just above the proof (a row committed "
                         "since may lie below the head)");
    is_int(out[2], 1001, "a head just above the proof");
    is_int(out[3], 1000, "a head at the proof");
    is_int(out[4], 1001, "no row pending: from just above the proof");
    is_int(out[63], 1001, "the last partition");

    monitor_heads_bounds(heads, 1000, 1, out);
    int all_zero = 1;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        all_zero &= out[p] == 0;
    ok(all_zero, "from the bottom: every partition from 0");

    monitor_heads_bounds(heads, 0, 0, out);
    all_zero = 1;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        all_zero &= out[p] == 0;
    ok(all_zero, "nothing proven (another session, floors off): every partition from 0");
    char text[64 * 4];
    size_t used = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%d", p ? "," : "", p * 3);
    int64_t parsed[OUTBOX_LEASE_PARTITIONS] = {0};
    is_int(monitor_parse_heads(text, parsed), 0, "64 heads parse");
    is_int(parsed[0], 0, "the first");
    is_int(parsed[63], 189, "the last");
    parsed[5] = -7;
    is_int(monitor_parse_heads("1,2,3", parsed), -1, "too few heads: refused");
    is_int(parsed[5], -7, "a refused column leaves the heads as they were");
    text[used - 1] = 'x';
    is_int(monitor_parse_heads(text, parsed), -1, "a stray character: refused");
    return done();
}
