/* Unit tests: proven claim floors (the proof from two probes, a floor raised only to what
 * a claim saw, cut claims, quota-filled partitions, resets invalidating claims in flight). */
#include <string.h>

#include <stdio.h>

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

#define ID 100000000 /* the identity far above every claimed id */

int main(void)
{
    struct floors f;
    floors_init(&f);

    /* the first probe tells the identity's value: nothing claimed enters the proof before */
    floors_probe_result(&f, 50, "{}", ID, 0);
    is_int(f.proven, 0, "the first probe: no identity value read before it, nothing proven");

    /* the proof: the writers listed with a candidate must all end, whoever starts meanwhile */
    floors_probe_result(&f, 100, "{3/17,4/9}", ID, 250);
    is_int(f.proven, 0, "writers listed: nothing proven yet");
    floors_probe_result(&f, 150, "{4/9,5/2}", ID, 500);
    is_int(f.proven, 0, "one of them still writing (a new one started): still nothing proven");
    is_int(f.nqueued, 2, "the newer candidate waits behind it");
    floors_probe_result(&f, 200, "{5/2,6/1}", ID, 750);
    is_int(f.proven, 100, "the writers listed at 100 ended: 100 proven, though others write now");
    floors_probe_result(&f, 210, "{6/1,7/3}", ID, 1000);
    is_int(f.proven, 150, "5/2 ended: 150 proven (6/1 started after it was listed)");
    floors_probe_result(&f, 260, "{}", ID, 1250);
    is_int(f.proven, 260, "nobody writing: the highest claimed id is proven at once");
    is_int(f.nqueued, 0, "and nothing waits");
    floors_probe_result(&f, 240, "{}", ID, 1500);
    is_int(f.proven, 260, "the proof never goes down");

    /* writers overlapping at every probe, each open for a few probes: the proof moves */
    {
        char lit[64];
        int64_t before = f.proven;
        for (int i = 0; i < 40; i++) {
            /* writer i is open from probe i to probe i+3: four open at every probe */
            snprintf(lit, sizeof(lit), "{%d/1,%d/1,%d/1,%d/1}", 100 + i, 101 + i, 102 + i, 103 + i);
            floors_probe_result(&f, 300 + 10 * i, lit, ID, 2000 + 250 * i);
        }
        ok(f.proven > before && f.proven >= 300 + 10 * 35, "overlapping writers: proven up to %lld",
           (long long)f.proven);
        is_int(floors_held_ms(&f, 2000 + 250 * 39), 750, "the oldest waiting candidate is 3 probes old");
    }

    /* a writer that never ends: nothing listed with it is proven, however long */
    floors_probe_result(&f, 1000, "{}", ID, 20000);
    floors_probe_result(&f, 1100, "{9/9,10/1}", ID, 20250);
    for (int i = 0; i < 30; i++) { /* beside it, a new short writer at every probe */
        char lit[32];
        snprintf(lit, sizeof(lit), "{9/9,%d/1}", 200 + i);
        floors_probe_result(&f, 1200 + i, lit, ID, 20500 + 250 * i);
    }
    is_int(f.proven, 1000, "a writer open across 30 probes holds the proof below its candidate");
    is_int(floors_held_ms(&f, 20500 + 250 * 29), 250 * 30, "held for 30 probes");
    {
        char who[64];
        floors_holders(&f, who, sizeof(who));
        const char *named = who;
        is_str(named, "{9/9}", "the writer holding it back is named");
    }
    ok(f.nqueued <= FLOOR_CANDIDATES, "the queue stays bounded (%d)", f.nqueued);
    floors_probe_result(&f, 1300, "{500/1}", ID, 30000);
    is_int(f.proven, 1229, "it ended: every waiting candidate is proven (the newest, 1229, replaced the others)");
    is_int(f.nqueued, 1, "the one listed with the new writer waits");
    floors_probe_result(&f, 1300, "{}", 1300, 30250);
    is_int(f.proven, 1300, "then everything claimed");

    /* an id beyond the identity never enters the proof */
    floors_probe_result(&f, 1000000, "{}", 1400, 30500);
    is_int(f.proven, 1300, "id 1,000,000 claimed: capped at the identity's value of the probe before (1300)");
    floors_probe_result(&f, 1000000, "{}", 1500, 30750);
    is_int(f.proven, 1400, "the proof stops at the identity's value of the probe before");
    floors_probe_result(&f, 1000000, "{}", -1, 31000);
    is_int(f.proven, 1500, "a role that cannot read the sequence: the last value read still caps this one");
    floors_probe_result(&f, 1000000, "{}", -1, 31250);
    is_int(f.proven, 1000000, "then ids are not capped (as before the check)");

    /* the floors (a session started over, its proof at 260) */
    floors_forget_proof(&f);
    floors_probe_result(&f, 0, "{}", ID, 31500);
    floors_probe_result(&f, 260, "{}", ID, 31750);
    /* a claim that saw everything above the floors: both rise to the proof */
    struct floor_claim c = claim_of(&f);
    saw(&c, 3, 4, 250);
    floors_after_claim(&f, &c);
    is_int(f.at[3], 260, "partition 3: all its rows seen, floor at the proof");
    is_int(f.at[5], 260, "partition 5: nothing claimable, floor at the proof");
    is_int(f.at[4], 0, "a partition not in the claim keeps its floor");

    /* the quota filled in partition 3: more may wait above its last row */
    floors_probe_result(&f, 900, "{}", ID, 40000);
    c = claim_of(&f);
    saw(&c, 3, 10, 400);
    saw(&c, 5, 2, 880);
    floors_after_claim(&f, &c);
    is_int(f.at[3], 400, "quota filled: the floor stops at the last row returned");
    is_int(f.at[5], 900, "the other partition rises to the proof");

    /* the limit or byte budget cut the claim after id 600 */
    floors_probe_result(&f, 2000, "{}", ID, 40250);
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
    floors_probe_result(&f, 5000, "{}", ID, 40500);
    floors_after_claim(&f, &c);
    is_int(f.at[5], 2000, "the proof at send time bounds the floor, not a later one");

    /* a new session (perhaps another server after a failover): nothing proven carries over */
    floors_probe_result(&f, 6000, "{7/1}", ID, 40750);
    floors_forget_proof(&f);
    is_int(f.proven, 0, "a new session: the proof starts over");
    is_int(f.at[5], 0, "and the floors are at the bottom");
    is_int(f.nqueued, 0, "no candidate of the old session waits");
    floors_probe_result(&f, 500, "{8/1}", ID, 41000);
    is_int(f.proven, 0, "the old session's candidate (6000) is not proven by the new session's first probe");
    floors_probe_result(&f, 700, "{}", ID, 41250);
    is_int(f.proven, 700, "the new session proves from its own claims");
    floors_destroy(&f);
    return done();
}
