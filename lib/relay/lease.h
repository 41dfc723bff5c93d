/* Lease partitions as one relay sees them, and the pure rules over them: which partitions
 * count as held, the balance target, which to acquire or hand back, when a grace period
 * ends, and reading the lease scan's list of locked partitions. No I/O. */
#ifndef OUTBOX_RELAY_LEASE_H
#define OUTBOX_RELAY_LEASE_H

#include <stdint.h>

#include "relay/outbox.h"
#include "core/util.h"

/* A relay publishes rows of a partition only while ACTIVE: after acquiring its advisory
 * lock and waiting out the grace period when the previous holder did not release it
 * cleanly (it may still be publishing until its own deadline), and never after its own
 * deadline without contact with PostgreSQL. DRAINING: handed back once nothing of it is
 * in flight. */
enum lease_state { LEASE_FREE, LEASE_GRACE, LEASE_ACTIVE, LEASE_DRAINING };

struct lease {
    enum lease_state state;
    int64_t publish_from_ms; /* monotonic; -1 while in the release statement in flight */
    char token[340];         /* the outbox_lease header: "partition/token/relay name/pid",
                                the token the server's clock in µs at the acquisition */
};

/* Partitions GRACE or ACTIVE (leases has OUTBOX_LEASE_PARTITIONS entries). */
int lease_count_held(const struct lease *leases);
/* Partitions each of relays relays should hold: a ceiling, so that all are covered. */
int lease_balance_target(int relays);
/* Reads a list of partition numbers ("{3,17}" or "3,17"); sets locked[p] = 1 for each
 * valid one (locked has OUTBOX_LEASE_PARTITIONS entries, zeroed first); returns how many. */
int lease_parse_locked(const char *list, int *locked);
/* Up to want FREE partitions nobody else locks, lowest first, as an int[] literal;
 * returns how many. */
int lease_pick_acquire(const struct lease *leases, const int *locked, int want, struct strbuf *out);
/* After a scan: which partitions to acquire (an int[] literal in acquire, the count
 * returned) and how many to hand back (*handback). locked: partitions relays of this table
 * hold (this one included); foreign: partitions other sessions hold. Liveness before
 * balance: a partition that no session held at this scan and at the previous one
 * (unowned_before, updated here) is taken whatever the target; partitions are handed back
 * only while every partition is held. group: partitions that move together (1: each alone;
 * exactly-once: all of them), whose first is taken before the others and by whoever takes
 * the others. */
int lease_decide(const struct lease *leases, const int *locked, const int *foreign,
                 unsigned char *unowned_before, int target, int group, struct strbuf *acquire,
                 int *handback);
/* Moves the highest held partitions to DRAINING, up to give; group: partitions that move
 * together, handed back only whole (every one held), the highest groups first. Returns how
 * many. */
int lease_pick_handback(struct lease *leases, int give, int group);
/* GRACE partitions whose time has come become ACTIVE; appends the ACTIVE set as an int2[]
 * literal to out and returns its size. */
int lease_activate(struct lease *leases, int64_t now_ms, struct strbuf *out);
/* Whether taking a partition over needs no grace: nobody held it, its holder released it,
 * or the holder that lost it was this very process (incarnation me). */
int lease_takeover_clean(const char *last_event, const char *last_holder, const char *me);

#endif
