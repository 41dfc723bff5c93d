/* Prometheus metrics for both programs: histograms and the text exposition format. */
#include "core/metrics.h"

#include <string.h>

void histogram_init(struct histogram *h, const double *bounds, size_t n_bounds)
{
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->n_bounds = n_bounds < METRICS_MAX_BUCKETS ? n_bounds : METRICS_MAX_BUCKETS;
}

void histogram_observe(struct histogram *h, double value)
{
    size_t i = 0;
    while (i < h->n_bounds && value > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += value;
    h->count++;
}

double histogram_quantile(const struct histogram *h, double q)
{
    if (h->count == 0)
        return 0;
    double rank = q * (double)h->count;
    uint64_t seen = 0;
    for (size_t i = 0; i <= h->n_bounds; i++) {
        if (seen + h->counts[i] >= rank && h->counts[i] > 0) {
            double lo = i == 0 ? 0 : h->bounds[i - 1];
            double hi = i < h->n_bounds ? h->bounds[i] : lo;
            return lo + (hi - lo) * ((rank - (double)seen) / (double)h->counts[i]);
        }
        seen += h->counts[i];
    }
    return h->n_bounds ? h->bounds[h->n_bounds - 1] : 0;
}

void metrics_head(struct strbuf *o, const char *name, const char *type, const char *help)
{
    strbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void metrics_counter(struct strbuf *o, const char *name, const char *help, uint64_t v)
{
    metrics_head(o, name, "counter", help);
    strbuf_printf(o, "%s %llu\n", name, (unsigned long long)v);
}

void metrics_gauge(struct strbuf *o, const char *name, const char *help, double v)
{
    metrics_head(o, name, "gauge", help);
    strbuf_printf(o, "%s %.17g\n", name, v);
}

/* Label values: escape backslash, quote and newline. */
void metrics_label_value(struct strbuf *o, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            strbuf_printf(o, "\\%c", *v);
        else if (*v == '\n')
            strbuf_puts(o, "\\n");
        else
            strbuf_append(o, v, 1);
    }
}

void metrics_histogram(struct strbuf *o, const char *name, const char *help, const struct histogram *h)
{
    metrics_head(o, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        strbuf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    strbuf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", name,
                  (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}
