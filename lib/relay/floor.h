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
 *     the table before it draws its id (at parse analysis; the identity sequence has
 *     CACHE 1, so ids are drawn in time order) and keeps the lock until its transaction
 *     ends. M is the highest id claimed so far: its row was visible, so every transaction
 *     that drew a lower id held the lock before the probe that follows. The probe lists the
 *     transactions holding that lock (virtual ids, from pg_locks); once a later probe finds
 *     none of them still holding it, each has committed (visible to every later snapshot)
 *     or aborted. Readers hold only ACCESS SHARE: a long REPEATABLE READ transaction or
 *     pg_dump does not hold the proof back; a transaction that wrote the table and stays
 *     open does (its rows may commit late, and the claim must still find them).
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

#include <stdint.h>

#include "relay/outbox.h"

struct floors {
    int64_t at[OUTBOX_LEASE_PARTITIONS]; /* per lease partition; 0 is the bottom */
    uint32_t epoch;                      /* bumped by every reset */
    int64_t proven;     /* no id <= proven that is unseen can still commit */
    int64_t candidate;  /* the highest claimed id when `writers` were listed */
    char *writers;      /* text[] literal of the transactions writing then; NULL: none listed */
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
/* A probe's answer: the transactions writing the table now (a text[] literal) and how many
 * of the previous probe's are still writing; claimed_high is the highest id claimed when
 * the probe was sent. */
void floors_probe_result(struct floors *f, int64_t claimed_high, const char *writers,
                         long still_writing);
/* Moves the floors after a claim (nothing if a reset came after it was sent). */
void floors_after_claim(struct floors *f, const struct floor_claim *c);

#endif
