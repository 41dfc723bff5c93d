/* Unit tests: paused topics (add, extend, expire at the deadline, capacity, literal). */
#include <stdio.h>

#include "relay/pause.h"
#include "tap.h"

static int resumed_count;
static void resumed(const char *topic)
{
    (void)topic;
    resumed_count++;
}

int main(void)
{
    struct pauses p = {0};
    is_int(pauses_add(&p, "orders", 1000), PAUSE_NEW, "first pause");
    is_int(pauses_add(&p, "pay\"ments", 2000), PAUSE_NEW, "second topic");
    is_int(pauses_add(&p, "orders", 3000), PAUSE_EXTENDED, "pausing again extends");
    is_int(p.n, 2, "two paused");
    ok(pauses_has(&p, "orders") && !pauses_has(&p, "other"), "lookup");
    struct strbuf sb;
    strbuf_init(&sb);
    pauses_literal(&p, &sb);
    is_str(sb.buf, "{\"orders\",\"pay\\\"ments\"}", "text[] literal, quoted and escaped");

    {   /* every pause at least until a time (a reset's first claim); a later one stays */
        struct pauses q = {0};
        pauses_add(&q, "a", 100);
        pauses_add(&q, "b", 5000);
        pauses_at_least(&q, 1200);
        pauses_expire(&q, 1199, NULL);
        is_int(q.n, 2, "a pause shorter than the back-off lasts past the resumed claim");
        pauses_expire(&q, 1200, NULL);
        ok(q.n == 1 && pauses_has(&q, "b"), "then ends; a longer one keeps its own deadline");
        pauses_destroy(&q);
    }
    pauses_expire(&p, 1999, resumed);
    is_int(p.n, 2, "nothing expires before its deadline");
    pauses_expire(&p, 2000, resumed);
    is_int(p.n, 1, "the 2000 ms pause ends at 2000");
    ok(pauses_has(&p, "orders"), "orders was extended to 3000, still paused");
    is_int(resumed_count, 1, "one resume reported");
    pauses_expire(&p, 5000, NULL);
    is_int(p.n, 0, "all resumed");

    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        pauses_add(&p, name, 100);
    }
    is_int(p.n, 100, "a hundred topics paused: no fixed limit");
    ok(pauses_has(&p, "t0") && pauses_has(&p, "t99"), "the first and the last");
    is_int(pauses_add(&p, "t3", 200), PAUSE_EXTENDED, "extended");
    pauses_expire(&p, 150, NULL);
    is_int(p.n, 1, "only the extended one remains");
    ok(pauses_has(&p, "t3"), "it is t3");
    strbuf_destroy(&sb);
    pauses_destroy(&p);
    return done();
}
