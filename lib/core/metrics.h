/* Prometheus metrics for both programs: histograms, and the pieces of the text exposition
 * format (each program's own metrics are plain fields owned by its loop, rendered with
 * these for the HTTP thread's snapshot). */
#ifndef OUTBOX_METRICS_H
#define OUTBOX_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#define METRICS_MAX_BUCKETS 32

struct histogram {
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    size_t n_bounds;
    uint64_t counts[METRICS_MAX_BUCKETS + 1];
    double sum;
    uint64_t count;
};

void histogram_init(struct histogram *h, const double *bounds, size_t n_bounds);
void histogram_observe(struct histogram *h, double value);
/* Value at quantile q (0..1) by linear interpolation inside the bucket; 0 if empty. */
double histogram_quantile(const struct histogram *h, double q);

/* Exposition pieces, shared with outbox-inbox's metrics: the HELP/TYPE lines, a label
 * value escaped, a histogram's buckets, sum and count. */
void metrics_head(struct strbuf *o, const char *name, const char *type, const char *help);
/* A family of one unlabelled sample: HELP, TYPE and the value. */
void metrics_counter(struct strbuf *o, const char *name, const char *help, uint64_t v);
void metrics_gauge(struct strbuf *o, const char *name, const char *help, double v);
void metrics_label_value(struct strbuf *o, const char *v);
void metrics_histogram(struct strbuf *o, const char *name, const char *help, const struct histogram *h);

#endif
