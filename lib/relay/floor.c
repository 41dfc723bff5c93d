/* Proven floors per lease partition (floor.h). */
#include "relay/floor.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void floors_init(struct floors *f)
{
    memset(f, 0, sizeof(*f));
}

void floors_destroy(struct floors *f)
{
    free(f->writers);
    f->writers = NULL;
}

void floors_reset(struct floors *f)
{
    memset(f->at, 0, sizeof(f->at));
    f->epoch++;
}

void floors_forget_proof(struct floors *f)
{
    floors_reset(f);
    free(f->writers);
    f->writers = NULL;
    f->proven = 0;
    f->candidate = 0;
}

void floors_probe_result(struct floors *f, int64_t claimed_high, const char *writers,
                         long still_writing)
{
    /* the previous probe's writers have all finished: its candidate is proven */
    if (f->writers && still_writing == 0 && f->candidate > f->proven)
        f->proven = f->candidate;
    free(f->writers);
    f->writers = xstrdup(writers);
    f->candidate = claimed_high;
    /* nobody writing now: every id drawn before this probe is final already */
    if (strcmp(writers, "{}") == 0 && claimed_high > f->proven)
        f->proven = claimed_high;
}

void floors_after_claim(struct floors *f, const struct floor_claim *c)
{
    if (c->epoch != f->epoch)
        return; /* rows were put back since: the floors are at the bottom again */
    for (int i = 0; i < c->nparts; i++) {
        int p = c->parts[i];
        int64_t to = c->proven;
        if (c->count[p] >= c->quota && c->last[p] < to)
            to = c->last[p]; /* more rows of p may wait above the last one returned */
        if (c->cut && c->cut_at < to)
            to = c->cut_at; /* rows above the cut were not looked at */
        f->at[p] = to > c->sent[i] ? to : c->sent[i];
    }
}
