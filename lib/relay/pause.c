/* Paused topics (see pause.h). */
#include "relay/pause.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pauses_destroy(struct pauses *p)
{
    free(p->topic);
    memset(p, 0, sizeof(*p));
}

enum pause_result pauses_add(struct pauses *p, const char *topic, int64_t until_ms)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->topic[i].name, topic) == 0) {
            p->topic[i].until_ms = until_ms;
            return PAUSE_EXTENDED;
        }
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 8;
        p->topic = xrealloc(p->topic, p->cap * sizeof(*p->topic));
    }
    snprintf(p->topic[p->n].name, sizeof(p->topic[0].name), "%s", topic);
    p->topic[p->n++].until_ms = until_ms;
    return PAUSE_NEW;
}

void pauses_expire(struct pauses *p, int64_t now_ms, void (*resumed)(const char *topic))
{
    for (size_t i = 0; i < p->n;) {
        if (p->topic[i].until_ms <= now_ms) {
            if (resumed)
                resumed(p->topic[i].name);
            p->topic[i] = p->topic[--p->n];
        } else {
            i++;
        }
    }
}

void pauses_at_least(struct pauses *p, int64_t until_ms)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->topic[i].until_ms < until_ms)
            p->topic[i].until_ms = until_ms;
}

int pauses_has(const struct pauses *p, const char *topic)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->topic[i].name, topic) == 0)
            return 1;
    return 0;
}

void pauses_literal(const struct pauses *p, struct strbuf *out)
{
    pgarray_open(out);
    for (size_t i = 0; i < p->n; i++)
        pgarray_str(out, p->topic[i].name);
    pgarray_close(out);
}
