/* Unit tests: keep mode's audit pace (keep.c's keep_audit_span), no server. A whole pass over
 * a partition's retained ids ends within a quarter of OUTBOX_RETENTION at a steady rate,
 * while W moves on, up to about 35,000 events/s (where the span's cap is reached); a small
 * table or no retention keeps the least span. The model is a relay holding all 64
 * partitions, each with a turn every quarter period and nothing else slowing them. */
#include <stdint.h>

#include "loop_fixture.h"
#include "tap.h"

/* One partition of a relay holding all 64: four turns per period. The table retains
 * rate x retention ids; W moves by rate x the time between turns. Returns the seconds a pass
 * from the lowest row to W takes. */
static double pass_seconds(double rate, int retention_s, int period_ms)
{
    double gap_s = period_ms / 1000.0 / 4;
    int64_t w = (int64_t)(rate * retention_s), low = 1, from = low - 1;
    double t = 0;
    for (;;) {
        int64_t span = keep_audit_span(w - low + 1, retention_s, period_ms);
        from += span;
        t += gap_s;
        if (from >= w)
            return t;
        w += (int64_t)(rate * gap_s);
        low += (int64_t)(rate * gap_s); /* retention deletes as many as are written */
        if (t > 10.0 * retention_s)
            return t;
    }
}

int main(void)
{
    is_int(keep_audit_span(100, 86400, 60000), 80000, "a small table: the least span");
    is_int(keep_audit_span(864000000, 0, 60000), 80000, "no retention: the least span");
    is_int(keep_audit_span(864000000, 86400, 60000), 900001,
           "24 h at 10,000 events/s: 864 million ids over 960 turns (a sixth of the retention)");
    is_int(keep_audit_span(2000000, 60, 86400000), 2000001,
           "a period longer than the retention: the whole partition in one turn");
    is_int(keep_audit_span(864000000 + 26 * 864000000LL, 86400, 60000), 3200000,
           "a row parked for good a month ago holds the lowest row down: the span is capped");
    is_int(keep_audit_span(1000000000, 60, 86400000), 3200000, "... as it is for a period longer than the retention");
    static const double rates[] = {100, 1000, 5300, 10000, 30000};
    static const int retentions[] = {3600, 86400, 7 * 86400};
    for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
        for (size_t j = 0; j < sizeof(retentions) / sizeof(retentions[0]); j++) {
            double t = pass_seconds(rates[i], retentions[j], 60000);
            ok(t <= retentions[j] / 4.0, "%.0f events/s, retention %d s: a pass takes %.0f s (at most %.0f)",
               rates[i], retentions[j], t, retentions[j] / 4.0);
            /* where the pace scaled up from the least span, a pass ends in about a fifth */
            if (keep_audit_span((int64_t)(rates[i] * retentions[j]), retentions[j], 60000) > 80000)
                ok(t > retentions[j] / 5.5, "... and not wastefully sooner (%.0f s)", t);
        }
    /* the cap's limit, as the docs state it: above about 35,000 events/s with 24 h */
    double t = pass_seconds(50000, 86400, 60000);
    ok(t > 86400 / 4.0, "50,000 events/s, 24 h: capped turns, a pass takes %.0f s (more than a quarter)", t);
    return done();
}
