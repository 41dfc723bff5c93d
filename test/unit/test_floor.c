/* Unit tests: proven claim floors (the proof from two probes, a floor raised only to what
 * a claim saw, cut claims, quota-filled partitions, resets invalidating claims in flight). */
#include <string.h>

#include "relay/floor.h"
#include "tap.h"

/* A claim of partitions 3 and 5 sent from the current floors with the current proof. */
/* The claim returned count rows of lease partition p, the last of them id last. */
static void saw(struct floor_claim *c, int p, int count, long long last)
{
    c->count[p] = count;
    c->last[p] = last;
}

static struct floor_claim claim_of(const struct floors *f)
{
    struct floor_claim c;
    memset(&c, 0, sizeof(c));
    c.nparts = 2;
    c.parts[0] = 3;
    c.parts[1] = 5;
    c.sent[0] = f->at[3];
    c.sent[1] = f->at[5];
    c.proven = f->proven;
    c.epoch = f->epoch;
    c.quota = 10;
    return c;
}

int main(void)
{
    struct floors f;
    floors_init(&f);

    /* the proof: writers listed at 100 must all finish before 100 is proven */
    floors_probe_result(&f, 100, "{3/17,4/9}", 0);
    is_int(f.proven, 0, "writers listed: nothing proven yet");
    floors_probe_result(&f, 150, "{4/9,5/2}", 1);
    is_int(f.proven, 0, "one of them still writing: still nothing proven");
    floors_probe_result(&f, 200, "{5/2}", 0);
    is_int(f.proven, 150, "the writers listed at 150 finished: 150 proven (not 200)");
    floors_probe_result(&f, 260, "{}", 0);
    is_int(f.proven, 260, "nobody writing: the highest claimed id is proven at once");
    floors_probe_result(&f, 240, "{}", 0);
    is_int(f.proven, 260, "the proof never goes down");

    /* a claim that saw everything above the floors: both rise to the proof */
    struct floor_claim c = claim_of(&f);
    saw(&c, 3, 4, 250);
    floors_after_claim(&f, &c);
    is_int(f.at[3], 260, "partition 3: all its rows seen, floor at the proof");
    is_int(f.at[5], 260, "partition 5: nothing claimable, floor at the proof");
    is_int(f.at[4], 0, "a partition not in the claim keeps its floor");

    /* the quota filled in partition 3: more may wait above its last row */
    floors_probe_result(&f, 900, "{}", 0);
    c = claim_of(&f);
    saw(&c, 3, 10, 400);
    saw(&c, 5, 2, 880);
    floors_after_claim(&f, &c);
    is_int(f.at[3], 400, "quota filled: the floor stops at the last row returned");
    is_int(f.at[5], 900, "the other partition rises to the proof");

    /* the limit or byte budget cut the claim after id 600 */
    floors_probe_result(&f, 2000, "{}", 0);
    c = claim_of(&f);
    saw(&c, 3, 3, 600);
    c.cut = 1;
    c.cut_at = 600;
    floors_after_claim(&f, &c);
    is_int(f.at[3], 600, "cut claim: no floor beyond the cut");
    is_int(f.at[5], 900, "cut claim: a floor already above the cut stays (it was sent from there)");

    /* a claim from the bottom may lower a floor (rows put back below it) */
    c = claim_of(&f);
    c.sent[0] = 0;
    c.sent[1] = 0;
    saw(&c, 3, 10, 120);
    floors_after_claim(&f, &c);
    is_int(f.at[3], 120, "a claim from the bottom that filled its quota: floor at its last row");
    is_int(f.at[5], 2000, "and the other partition at the proof");

    /* a reset after a claim was sent: its result must not raise the floors */
    c = claim_of(&f);
    floors_reset(&f);
    is_int(f.at[5], 0, "reset: every floor at the bottom");
    floors_after_claim(&f, &c);
    is_int(f.at[3], 0, "a claim sent before the reset changes nothing");
    is_int(f.at[5], 0, "(either partition)");

    /* a claim sent before the proof moved uses the proof it was sent with */
    c = claim_of(&f);
    floors_probe_result(&f, 5000, "{}", 0);
    floors_after_claim(&f, &c);
    is_int(f.at[5], 2000, "the proof at send time bounds the floor, not a later one");

    /* a new session (perhaps another server after a failover): nothing proven carries over */
    floors_probe_result(&f, 6000, "{7/1}", 0);
    floors_forget_proof(&f);
    is_int(f.proven, 0, "a new session: the proof starts over");
    is_int(f.at[5], 0, "and the floors are at the bottom");
    floors_probe_result(&f, 500, "{8/1}", 0);
    is_int(f.proven, 0, "the old session's candidate (6000) is not proven by the new session's first probe");
    floors_probe_result(&f, 700, "{}", 0);
    is_int(f.proven, 700, "the new session proves from its own claims");
    floors_destroy(&f);
    return done();
}
