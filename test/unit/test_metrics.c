/* Unit tests: metrics_render's exposition — every line a HELP, a TYPE or a sample of a
 * declared family; the series operators alert on present; label values escaped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/relay_metrics.h"
#include "tap.h"

static int has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

int main(void)
{
    struct metrics m;
    metrics_init(&m);
    m.table = "public.outbox";
    m.pending_rows = 42;
    m.pending_rows_exact = 1;
    m.published_total = 7;
    m.publish_failures_total[FAILURE_TOPIC] = 3;
    m.stall_reason = "kafka_unreachable";
    snprintf(m.paused_topics[0], sizeof(m.paused_topics[0]), "orders\"x\\y");
    m.n_paused_topics = 1;
    histogram_observe(&m.latency, 0.004);
    struct strbuf out;
    strbuf_init(&out);
    metrics_render(&m, "1.2.3", &out);

    ok(has_line(out.buf, "outbox_pending_rows 42"), "pending rows");
    ok(has_line(out.buf, "outbox_published_total 7"), "published counter");
    ok(strstr(out.buf, "outbox_publish_failures_total{reason=\"topic\"} 3") != NULL, "failures by reason");
    ok(strstr(out.buf, "orders\\\"x\\\\y") != NULL, "a label value's quote and backslash escaped");
    ok(strstr(out.buf, "outbox_latency_seconds_count 1") != NULL || strstr(out.buf, "_count 1") != NULL,
       "the latency histogram counted the observation");
    ok(strstr(out.buf, "1.2.3") != NULL, "the version is exported");

    /* every sample line belongs to a family declared by a TYPE line before it */
    char *text = strdup(out.buf), *save = NULL;
    char families[256][128];
    int n_families = 0, lines = 0, orphans = 0, malformed = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lines++;
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            if (n_families < 256 && sscanf(line + 7, "%127s", families[n_families]) == 1)
                n_families++;
            continue;
        }
        size_t name_len = strcspn(line, "{ ");
        const char *space = strrchr(line, ' ');
        char *end;
        if (!space || (strtod(space + 1, &end), *end != '\0'))
            malformed++;
        int known = 0;
        for (int i = 0; i < n_families && !known; i++) {
            size_t fl = strlen(families[i]);
            known = strncmp(line, families[i], fl) == 0 &&
                    (name_len == fl || (name_len > fl && (strncmp(line + fl, "_bucket", 7) == 0 ||
                                                         strncmp(line + fl, "_sum", 4) == 0 ||
                                                         strncmp(line + fl, "_count", 6) == 0)));
        }
        orphans += !known;
    }
    free(text);
    ok(lines > 50, "a full exposition (%d lines, %d families)", lines, n_families);
    is_int(malformed, 0, "every sample ends in a number");
    is_int(orphans, 0, "every sample belongs to a declared family");
    strbuf_destroy(&out);
    return done();
}
