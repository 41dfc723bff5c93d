/* Unit tests: capped exponential backoff with jitter. */
#include "core/backoff.h"
#include "tap.h"

int main(void)
{
    struct backoff b;
    backoff_init(&b, 100, 5000);
    int prev_max = 0;
    for (int i = 0; i < 12; i++) {
        int cap = 100 << (i < 6 ? i : 6);
        if (cap > 5000)
            cap = 5000;
        int d = backoff_next(&b);
        ok(d >= cap / 2 && d <= cap, "attempt %d: %d ms within [%d, %d]", i, d, cap / 2, cap);
        prev_max = d > prev_max ? d : prev_max;
    }
    ok(prev_max <= 5000, "never above the cap");
    backoff_reset(&b);
    int d = backoff_next(&b);
    ok(d >= 50 && d <= 100, "reset starts again at the base (%d)", d);
    return done();
}
