/* Proven floors: where each lease partition's claim may start instead of the bottom of the
 * pending index. Every row the relay marks (or deletes) leaves a dead entry at the head of
 * that index until vacuum removes it, and vacuum may not while any snapshot older than the
 * mark is open (a long transaction anywhere in the database, pg_dump, a standby's
 * feedback). A claim from the bottom walks all of them: with writers at 3,000 events/s and
 * one REPEATABLE READ transaction open, claims slowed until the relay fell behind for good.
 *
 * A floor F of partition p is sound when every row of p with an id <= F that is PENDING
 * now or may become visible later is in flight, or is skipped by the claim for a reason
 * the relay tracks (a parked, held or paused key), so that a claim starting above F
 * returns exactly what a claim from the bottom would. Two facts make one:
 *
 *  1. The proof that no unseen id <= M can still commit. An INSERT takes ROW EXCLUSIVE on
 *     the table (or on the partition it names) before it draws its id (at parse analysis;
 *     the identity sequence has CACHE 1, so ids are drawn in time order) and keeps the lock
 *     until its transaction ends. A probe lists the transactions holding that lock on the
 *     table or any of its partitions (virtual ids, from pg_locks) and reads the identity's
 *     last value S. A candidate M is the highest id claimed before the probe, but never
 *     above the S of the probe before (an id beyond the identity, inserted with OVERRIDING
 *     SYSTEM VALUE, COPY, a restore, says nothing of when lower ids were drawn; every id
 *     <= that S was drawn before this probe's read of the locks). So every transaction that
 *     drew an id <= M is in the candidate's list or has ended. Each later probe keeps in
 *     the list only the transactions still holding the lock; when the list is empty, each
 *     has committed (visible to every later snapshot) or aborted, and M is proven —
 *     however many other writers started meanwhile. Candidates wait in a short queue, the
 *     oldest first (a newer one's list holds every writer still in an older one's, so
 *     they are proven in order); when it is full the newest is replaced. Readers hold
 *     only ACCESS SHARE: a long REPEATABLE READ transaction or pg_dump does not hold the
 *     proof back; a transaction that wrote the table and stays open does (its rows may
 *     commit late, and the claim must still find them).
 *  2. A claim taken after the proof, starting at the old floor B, that came back with
 *     fewer rows of p than its quota and was not cut by its limit or byte budget has
 *     returned every claimable row of p above B: F becomes M. When it was cut, F becomes
 *     the highest id it returned below the cut.
 *
 * Rows the relay claimed but put back (a failed delivery, a reset, a lost lease, a held
 * key released, a paused topic resumed) lie below the floor: every such event resets the
 * floors to the bottom. Pure bookkeeping, no I/O; claim.c sends the statements. */
#ifndef OUTBOX_FLOOR_H
#define OUTBOX_FLOOR_H

#include <stddef.h>
#include <stdint.h>

#include "relay/outbox.h"

#define FLOOR_CANDIDATES 16

/* An id waiting for its proof: the transactions that may still hold a lower id. */
struct floor_candidate {
    int64_t high;     /* the candidate M */
    int64_t since_ms; /* when it was listed */
    int nwriters;
    char **writers;   /* virtual transaction ids still holding the lock */
};

struct floors {
    int64_t at[OUTBOX_LEASE_PARTITIONS]; /* per lease partition; 0 is the bottom */
    uint32_t epoch;                      /* bumped by every reset */
    int64_t proven;     /* no id <= proven that is unseen can still commit */
    int64_t identity;   /* the cap of the next candidate: the identity's last value at the last
                           probe (INT64_MAX if this role cannot read it); 0 before the first */
    int nqueued;        /* candidates waiting, oldest first */
    struct floor_candidate queue[FLOOR_CANDIDATES];
};

/* The partitions of one claim and what it returned. */
struct floor_claim {
    int nparts;
    int parts[OUTBOX_LEASE_PARTITIONS];
    int64_t sent[OUTBOX_LEASE_PARTITIONS]; /* the floor each was claimed from (as parts) */
    int64_t proven;  /* floors->proven when the claim was sent */
    uint32_t epoch;  /* floors->epoch when the claim was sent */
    int quota;       /* rows per partition */
    int count[OUTBOX_LEASE_PARTITIONS];    /* rows returned per partition */
    int64_t last[OUTBOX_LEASE_PARTITIONS]; /* highest id returned per partition */
    int cut;         /* the limit or the byte budget cut the claim ... */
    int64_t cut_at;  /* ... after this id (the highest returned) */
};

void floors_init(struct floors *f);
void floors_destroy(struct floors *f);
/* All partitions back to the bottom (rows were put back below the floors). */
void floors_reset(struct floors *f);
/* A new session, perhaps on another server (a failover, a restored database): what was
 * proven of the old one proves nothing here. The proof starts over with the floors. */
void floors_forget_proof(struct floors *f);
/* A probe's answer: the transactions writing the table now (a text[] literal, borrowed)
 * and the identity's last value (-1 when this role cannot read it: ids are not capped);
 * claimed_high is the highest id claimed when the probe was sent, now_ms the probe's time. */
void floors_probe_result(struct floors *f, int64_t claimed_high, const char *writers,
                         int64_t identity, int64_t now_ms);
/* The oldest candidate still waiting: its age in ms at now_ms (0 when none) and, into buf,
 * the writers that hold it back as a text[] literal ("{}" when none). */
int64_t floors_held_ms(const struct floors *f, int64_t now_ms);
void floors_holders(const struct floors *f, char *buf, size_t len);
/* Moves the floors after a claim (nothing if a reset came after it was sent). */
void floors_after_claim(struct floors *f, const struct floor_claim *c);

#endif
