/* Lease partitions' pure rules (lease.h): counting, balancing, choosing what to acquire or
 * hand back, and which held partitions may publish now. No I/O: unit-tested directly, and
 * called by claim.c and lease.c alike. */
#include <stdlib.h>
#include <string.h>

#include "relay/lease.h"
#include "core/util.h"

int lease_count_held(const struct lease *leases)
{
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        n += leases[p].state == LEASE_GRACE || leases[p].state == LEASE_ACTIVE;
    return n;
}

int lease_balance_target(int relays)
{
    if (relays < 1)
        relays = 1;
    return (OUTBOX_LEASE_PARTITIONS + relays - 1) / relays;
}

int lease_parse_locked(const char *list, int *locked)
{
    int n = 0;
    memset(locked, 0, OUTBOX_LEASE_PARTITIONS * sizeof(*locked));
    for (const char *c = list; *c;) {
        char *end;
        long p = strtol(c, &end, 10); /* a number, signed, or nothing */
        if (end == c) {
            c++;
            continue;
        }
        c = end;
        if (p >= 0 && p < OUTBOX_LEASE_PARTITIONS && !locked[p]) {
            locked[p] = 1;
            n++;
        }
    }
    return n;
}

int lease_pick_acquire(const struct lease *leases, const int *locked, int want, struct strbuf *out)
{
    int n = 0;
    pgarray_open(out);
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS && n < want; p++)
        if (!locked[p] && leases[p].state == LEASE_FREE) {
            pgarray_int(out, p);
            n++;
        }
    pgarray_close(out);
    return n;
}

static int held_state(enum lease_state s)
{
    return s == LEASE_GRACE || s == LEASE_ACTIVE;
}

int lease_decide(const struct lease *leases, const int *locked, const int *foreign,
                 unsigned char *unowned_before, int target, int group, struct strbuf *acquire,
                 int *handback)
{
    int held = lease_count_held(leases), want = target - held, n = 0, any_free = 0;
    unsigned char free_now[OUTBOX_LEASE_PARTITIONS], may[OUTBOX_LEASE_PARTITIONS];
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        free_now[p] = !locked[p] && !foreign[p] && leases[p].state == LEASE_FREE;
        any_free |= free_now[p];
        /* a group's other partitions only to the relay that holds its first */
        may[p] = free_now[p] && (group <= 1 || p % group == 0 || held_state(leases[p - p % group].state));
    }
    if (group > 1) { /* a group whose first is held counts whole: its others follow it */
        want = target;
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p += group)
            want -= held_state(leases[p].state) ? group : 0;
    }
    pgarray_open(acquire);
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) /* liveness: long-unowned ones */
        if (may[p] && unowned_before[p]) {
            pgarray_int(acquire, p);
            n++;
            want -= group > 1 && p % group == 0 ? group : group > 1 ? 0 : 1;
        }
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) { /* balance: up to the target */
        if (!may[p] || unowned_before[p])
            continue;
        int cost = group <= 1 ? 1 : p % group == 0 ? group : 0; /* (the rest of a held group: 0) */
        if (cost > 0 && cost > want) /* (a held group's rest: always) */
            continue;
        pgarray_int(acquire, p);
        n++;
        want -= cost;
    }
    pgarray_close(acquire);
    *handback = !any_free && held > target ? held - target : 0;
    memcpy(unowned_before, free_now, sizeof(free_now));
    return n;
}

int lease_pick_handback(struct lease *leases, int give, int group)
{
    int n = 0;
    if (group < 1)
        group = 1;
    for (int first = OUTBOX_LEASE_PARTITIONS - group; first >= 0 && n + group <= give; first -= group) {
        int whole = 1;
        for (int p = first; p < first + group; p++)
            whole &= held_state(leases[p].state);
        if (!whole)
            continue; /* (a group partly held: still being taken, or partly released) */
        for (int p = first; p < first + group; p++)
            leases[p].state = LEASE_DRAINING;
        n += group;
    }
    return n;
}

int lease_activate(struct lease *leases, int64_t now_ms, struct strbuf *out)
{
    int n = 0;
    pgarray_open(out);
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        if (leases[p].state == LEASE_GRACE && now_ms >= leases[p].publish_from_ms)
            leases[p].state = LEASE_ACTIVE;
        if (leases[p].state == LEASE_ACTIVE) {
            pgarray_int(out, p);
            n++;
        }
    }
    pgarray_close(out);
    return n;
}

int lease_takeover_clean(const char *last_event, const char *last_holder, const char *me)
{
    return !last_event || strcmp(last_event, "released") == 0 ||
           (strcmp(last_event, "lost") == 0 && last_holder && strcmp(last_holder, me) == 0);
}
