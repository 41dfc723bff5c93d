/* Proven floors per lease partition (floor.h). */
#include "relay/floor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

void floors_init(struct floors *f)
{
    memset(f, 0, sizeof(*f));
}

static void candidate_free(struct floor_candidate *c)
{
    for (int i = 0; i < c->nwriters; i++)
        free(c->writers[i]);
    free(c->writers);
    memset(c, 0, sizeof(*c));
}

/* Drops the first n candidates of the queue. */
static void queue_drop(struct floors *f, int n)
{
    for (int i = 0; i < n; i++)
        candidate_free(&f->queue[i]);
    memmove(f->queue, f->queue + n, (size_t)(f->nqueued - n) * sizeof(f->queue[0]));
    memset(f->queue + f->nqueued - n, 0, (size_t)n * sizeof(f->queue[0]));
    f->nqueued -= n;
}

void floors_destroy(struct floors *f)
{
    queue_drop(f, f->nqueued);
}

void floors_reset(struct floors *f)
{
    memset(f->at, 0, sizeof(f->at));
    f->epoch++;
}

void floors_forget_proof(struct floors *f)
{
    floors_reset(f);
    queue_drop(f, f->nqueued);
    f->proven = 0;
    f->identity = 0;
}

/* The elements of a text[] literal of virtual transaction ids ("{3/17,4/9}"; an element
 * may be quoted). Returns how many; *out is the caller's to free (each element too). */
static int parse_writers(const char *lit, char ***out)
{
    int n = 0, cap = 0;
    char **v = NULL;
    const char *p = lit;
    if (*p == '{')
        p++;
    while (*p && *p != '}') {
        const char *start = p;
        size_t len;
        if (*p == '"') {
            start = ++p;
            while (*p && *p != '"')
                p++;
            len = (size_t)(p - start);
            if (*p == '"')
                p++;
        } else {
            while (*p && *p != ',' && *p != '}')
                p++;
            len = (size_t)(p - start);
        }
        if (len > 0) {
            if (n == cap) {
                cap = cap ? cap * 2 : 8;
                v = xrealloc(v, (size_t)cap * sizeof(*v));
            }
            v[n++] = xstrndup(start, len);
        }
        if (*p == ',')
            p++;
    }
    *out = v;
    return n;
}

static int listed(char *const *set, int n, const char *w)
{
    for (int i = 0; i < n; i++)
        if (strcmp(set[i], w) == 0)
            return 1;
    return 0;
}

void floors_probe_result(struct floors *f, int64_t claimed_high, const char *writers,
                         int64_t identity, int64_t now_ms)
{
    char **now = NULL;
    int nnow = parse_writers(writers, &now);
    /* what may enter the proof: no id beyond the identity's value at the previous probe
     * (read by an earlier statement of this session, so before this probe's locks); none
     * before the first probe told it */
    int64_t high = claimed_high < f->identity ? claimed_high : f->identity;
    f->identity = identity < 0 ? INT64_MAX : identity;
    /* each waiting candidate keeps only its writers still writing; those left with none
     * are proven, oldest first (a later one's list holds every writer left in an earlier
     * one's, so an empty list behind a non-empty one does not occur; were it to, it waits) */
    int proven_upto = 0;
    for (int q = 0; q < f->nqueued; q++) {
        struct floor_candidate *c = &f->queue[q];
        int keep = 0;
        for (int i = 0; i < c->nwriters; i++) {
            if (listed(now, nnow, c->writers[i]))
                c->writers[keep++] = c->writers[i];
            else
                free(c->writers[i]);
        }
        c->nwriters = keep;
        if (keep == 0 && proven_upto == q) {
            if (c->high > f->proven)
                f->proven = c->high;
            proven_upto = q + 1;
        }
    }
    queue_drop(f, proven_upto);
    if (nnow == 0) {
        /* nobody writing now: every id drawn before this probe is final already */
        if (high > f->proven)
            f->proven = high;
        queue_drop(f, f->nqueued);
    } else if (high > f->proven && (f->nqueued == 0 || high > f->queue[f->nqueued - 1].high)) {
        if (f->nqueued == FLOOR_CANDIDATES) /* full: the newest gives way to a newer one */
            candidate_free(&f->queue[--f->nqueued]);
        struct floor_candidate *c = &f->queue[f->nqueued++];
        c->high = high;
        c->since_ms = now_ms;
        c->nwriters = nnow;
        c->writers = now;
        now = NULL;
        nnow = 0;
    }
    for (int i = 0; i < nnow; i++)
        free(now[i]);
    free(now);
}

int64_t floors_held_ms(const struct floors *f, int64_t now_ms)
{
    return f->nqueued ? now_ms - f->queue[0].since_ms : 0;
}

void floors_holders(const struct floors *f, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    if (f->nqueued)
        for (int i = 0; i < f->queue[0].nwriters && used + 1 < len; i++)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "," : "", f->queue[0].writers[i]);
    if (used + 2 <= len)
        snprintf(buf + used, len - used, "}");
    else
        snprintf(buf, len, "{}"); /* too many to name: none named rather than a broken list */
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
