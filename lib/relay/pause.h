/* Paused topics: a topic whose errors belong to the topic (authorization, unknown topic)
 * is left alone until a deadline while other topics flow. Pure (time is a parameter). */
#ifndef OUTBOX_RELAY_PAUSE_H
#define OUTBOX_RELAY_PAUSE_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

struct paused_topic {
    char name[250];
    int64_t until_ms;
};

/* Embedded; zero-initialised, then pauses_destroy. As many topics as fail. */
struct pauses {
    struct paused_topic *topic;
    size_t n, cap;
};

enum pause_result { PAUSE_NEW, PAUSE_EXTENDED };

void pauses_destroy(struct pauses *p);
/* Pauses topic until until_ms (extends an existing pause). */
enum pause_result pauses_add(struct pauses *p, const char *topic, int64_t until_ms);
/* Ends pauses whose deadline has passed by now; calls resumed (may be NULL) for each. */
void pauses_expire(struct pauses *p, int64_t now_ms, void (*resumed)(const char *topic));
int pauses_has(const struct pauses *p, const char *topic);
/* Every pause lasts at least until until_ms. */
void pauses_at_least(struct pauses *p, int64_t until_ms);
/* The paused topics as a text[] literal. */
void pauses_literal(const struct pauses *p, struct strbuf *out);

#endif
