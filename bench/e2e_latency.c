/* Benchmark helper: end-to-end latency, commit -> consumed. Reads every partition of a
 * topic from its end and, for each message, takes now - message timestamp (the relay sets
 * the timestamp to the row's created_at). Runs until SIGTERM/SIGINT, then prints
 *   LATENCY count=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..
 * Consumer fetch settings are tuned for latency (fetch.wait.max.ms=5). The figure is an
 * upper bound of commit -> Kafka acknowledgement: it adds the consumer's fetch.
 * With --payload-ts FIELD the time is read from the message value instead, a JSON object
 * with "FIELD": <ms since the epoch> (the writer's clock_timestamp() at its insert): the
 * same measure for a peer whose message timestamp is not the row's (bench/debezium.sh).
 *   e2e-latency --bootstrap B --topic T [--payload-ts FIELD] */
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/kafka.h"

static volatile sig_atomic_t stop;
static void on_signal(int s) { (void)s; stop = 1; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *bootstrap = NULL, *topic = NULL, *field = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bootstrap") && i + 1 < argc)
            bootstrap = argv[++i];
        else if (!strcmp(argv[i], "--payload-ts") && i + 1 < argc)
            field = argv[++i];
        else if (!strcmp(argv[i], "--topic") && i + 1 < argc)
            topic = argv[++i];
    }
    if (!bootstrap || !topic) {
        fprintf(stderr, "usage: e2e-latency --bootstrap B --topic T [--payload-ts FIELD]\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "e2e-latency", err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.wait.max.ms", "5", err, sizeof(err));
    rd_kafka_conf_set(conf, "fetch.error.backoff.ms", "5", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    int parts = kafka_wait_assign_all(rk, topic, RD_KAFKA_OFFSET_END, 200, &stop);
    fprintf(stderr, "e2e-latency: reading %s (%d partitions)\n", topic, parts);
    char needle[128];
    snprintf(needle, sizeof(needle), "\"%s\": ", field ? field : "");
    size_t n = 0, cap = 1 << 16, unstamped = 0;
    double *lat = malloc(cap * sizeof(double));
    while (!stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (!m->err) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            double now_ms = ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
            int64_t stamp = field ? -1 : rd_kafka_message_timestamp(m, NULL);
            if (field) { /* the value is not NUL-terminated: copy what can hold the field */
                char head[256];
                size_t len = m->len < sizeof(head) - 1 ? m->len : sizeof(head) - 1;
                memcpy(head, m->payload ? m->payload : "", m->payload ? len : 0);
                head[m->payload ? len : 0] = '\0';
                const char *at = strstr(head, needle);
                if (at)
                    stamp = strtoll(at + strlen(needle), NULL, 10);
            }
            if (stamp <= 0) {
                unstamped++;
                rd_kafka_message_destroy(m);
                continue;
            }
            if (n == cap)
                lat = realloc(lat, (cap *= 2) * sizeof(double));
            lat[n++] = now_ms - (double)stamp;
        }
        rd_kafka_message_destroy(m);
    }
    qsort(lat, n, sizeof(double), cmp_double);
#define Q(q) (n ? lat[(size_t)((q) * (double)(n - 1))] : 0)
    if (unstamped)
        fprintf(stderr, "e2e-latency: %zu messages without a time were left out\n", unstamped);
    printf("LATENCY count=%zu p50_ms=%.1f p99_ms=%.1f p999_ms=%.1f max_ms=%.1f\n", n, Q(0.5), Q(0.99),
           Q(0.999), n ? lat[n - 1] : 0);
    free(lat);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}
