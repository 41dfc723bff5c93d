/* Probe of librdkafka's mock cluster alone (no relay, no database): does an idempotent,
 * gapless producer with the relay's delivery settings lose acknowledged messages when the
 * mock moves partition leaders while it produces?
 *
 *   mock-probe [--rounds N] [--messages N] [--moves N] [--rtt MS] [--errors N]
 *              [--pace-us US] [--in-flight N]
 *
 * Each round: a fresh topic (6 partitions, 3 brokers), N keyed messages whose value is
 * their number, every partition's leader moved --moves times while they are produced
 * (with --rtt, broker 1 answers MS later, as mock_faults sets it; with --errors, the next
 * N Produce requests after the first tenth fail with NOT_LEADER_FOR_PARTITION and
 * REQUEST_TIMED_OUT in turn, as mock_faults injects them);
 * with --pace-us, the producer waits US microseconds after each message, as a relay fed by
 * writers does, so that several small Produce requests per partition are in flight at once;
 * --in-flight sets max.in.flight.requests.per.connection (librdkafka's default: 5);
 * then every partition is read back from offset 0 to its high watermark. Prints per round
 * and in total: acknowledged, acknowledged but absent from the log ("lost"), present more
 * than once, fatal errors. Exit 0 always (it measures; the caller decides). */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PARTITIONS 6

struct round {
    int n;
    unsigned char *acked;  /* per message: delivery report without error */
    unsigned short *seen;  /* per message: copies in the log */
    int fatal;
    int implicit_acks; /* librdkafka's IMPLICITACK debug lines (debug=eos) */
    int64_t log_end; /* sum of the partitions' high watermarks */
};

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct round *r = opaque;
    long i = (long)(intptr_t)m->_private;
    if (!m->err && i >= 0 && i < r->n)
        r->acked[i] = 1;
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    struct round *r = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        r->fatal++;
        fprintf(stderr, "# fatal: %s\n", reason);
    }
}

/* Counts librdkafka's "implicitly acked by subsequent batch success" lines: messages of a
 * failed request that librdkafka reports delivered because a later request of the same
 * partition succeeded - sound only if the broker checks idempotent sequence numbers.
 * Runs on librdkafka's threads: the count is read after the producer is destroyed. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    struct round *r = rd_kafka_opaque(rk);
    if (!strcmp(fac, "IMPLICITACK")) {
        __atomic_add_fetch(&r->implicit_acks, 1, __ATOMIC_RELAXED);
        fprintf(stderr, "# %s\n", buf);
    } else if (level <= 4 && strcmp(fac, "CONFWARN"))
        fprintf(stderr, "# %s: %s\n", fac, buf);
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char errstr[256];
    if (rd_kafka_conf_set(conf, k, v, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "mock-probe: %s=%s: %s\n", k, v, errstr);
        exit(2);
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reads every partition of topic from 0 to its high watermark, counting copies of each
 * message number. */
static void read_back(const char *bootstrap, const char *topic, struct round *r)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char errstr[256];
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "group.id", "mock-probe");
    set(conf, "enable.auto.commit", "false");
    set(conf, "enable.partition.eof", "true");
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!c) {
        fprintf(stderr, "mock-probe: consumer: %s\n", errstr);
        exit(2);
    }
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(PARTITIONS);
    int64_t high[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++) {
        int64_t lo;
        if (rd_kafka_query_watermark_offsets(c, topic, p, &lo, &high[p], 10000)) {
            fprintf(stderr, "mock-probe: watermarks of %s [%d] unknown\n", topic, p);
            exit(2);
        }
        if (lo != 0)
            fprintf(stderr, "# partition %d starts at %lld, not 0\n", p, (long long)lo);
        r->log_end += high[p];
        rd_kafka_topic_partition_list_add(parts, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(c, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    int done = 0, at_end[PARTITIONS] = {0};
    for (int p = 0; p < PARTITIONS; p++)
        if (high[p] == 0)
            at_end[p] = 1, done++;
    while (done < PARTITIONS) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 1000);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF || (!m->err && m->offset + 1 >= high[m->partition])) {
            if (!m->err) {
                long i = strtol(m->payload ? (const char *)m->payload : "-1", NULL, 10);
                if (i >= 0 && i < r->n)
                    r->seen[i]++;
            }
            if (!at_end[m->partition] && (m->err || m->offset + 1 >= high[m->partition]))
                at_end[m->partition] = 1, done++;
        } else if (!m->err) {
            char buf[256];
            size_t len = m->len < sizeof(buf) - 1 ? m->len : sizeof(buf) - 1;
            memcpy(buf, m->payload, len);
            buf[len] = '\0';
            long i = strtol(buf, NULL, 10);
            if (i >= 0 && i < r->n)
                r->seen[i]++;
        } else {
            fprintf(stderr, "# consumer: %s\n", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
}

int main(int argc, char **argv)
{
    int rounds = 10, messages = 20000, moves = 6, rtt = 0, errors = 0, pace_us = 0, in_flight = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--messages") && i + 1 < argc)
            messages = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--moves") && i + 1 < argc)
            moves = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rtt") && i + 1 < argc)
            rtt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--errors") && i + 1 < argc)
            errors = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pace-us") && i + 1 < argc)
            pace_us = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--in-flight") && i + 1 < argc)
            in_flight = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mock-probe [--rounds N] [--messages N] [--moves N] [--rtt MS] [--errors N] [--pace-us US] [--in-flight N]\n");
            return 2;
        }
    }
    char errstr[256];
    rd_kafka_conf_t *mconf = rd_kafka_conf_new();
    rd_kafka_t *mrk = rd_kafka_new(RD_KAFKA_PRODUCER, mconf, errstr, sizeof(errstr));
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(mrk, 3);
    const char *bootstrap = rd_kafka_mock_cluster_bootstraps(mc);
    if (rtt > 0)
        rd_kafka_mock_broker_set_rtt(mc, 1, rtt);
    long total_acked = 0, total_lost = 0, total_dup = 0, rounds_lost = 0, total_fatal = 0, total_implicit = 0;
    for (int round = 0; round < rounds; round++) {
        char topic[64];
        snprintf(topic, sizeof(topic), "probe%d", round);
        rd_kafka_mock_topic_create(mc, topic, PARTITIONS, 3);
        struct round r = {.n = messages};
        r.acked = calloc((size_t)messages, 1);
        r.seen = calloc((size_t)messages, sizeof(*r.seen));
        rd_kafka_conf_t *conf = rd_kafka_conf_new();
        /* the relay's delivery settings (lib/sink/kafka.c) */
        set(conf, "bootstrap.servers", bootstrap);
        set(conf, "enable.idempotence", "true");
        set(conf, "enable.gapless.guarantee", "true");
        set(conf, "acks", "all");
        set(conf, "message.timeout.ms", "0");
        set(conf, "linger.ms", "2");
        set(conf, "batch.num.messages", "10000");
        set(conf, "compression.codec", "lz4");
        set(conf, "partitioner", "murmur2_random");
        if (in_flight > 0) {
            char v[16];
            snprintf(v, sizeof(v), "%d", in_flight);
            set(conf, "max.in.flight.requests.per.connection", v);
        }
        rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
        rd_kafka_conf_set_error_cb(conf, error_cb);
        rd_kafka_conf_set_log_cb(conf, log_cb);
        set(conf, "debug", "eos");
        rd_kafka_conf_set_opaque(conf, &r);
        rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
        if (!p) {
            fprintf(stderr, "mock-probe: producer: %s\n", errstr);
            return 2;
        }
        int move_every = moves > 0 ? messages / (moves + 1) : messages + 1, moved = 0;
        for (int i = 0; i < messages && !r.fatal; i++) {
            char key[16], val[256];
            snprintf(key, sizeof(key), "k%d", i % 100);
            snprintf(val, sizeof(val), "%d %0200d", i, i); /* about a writer row's size */
            while (rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                                     RD_KAFKA_V_VALUE(val, strlen(val)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                     RD_KAFKA_V_OPAQUE((void *)(intptr_t)i), RD_KAFKA_V_END) ==
                   RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(p, 10);
            rd_kafka_poll(p, 0);
            if (pace_us > 0) {
                struct timespec ts = {pace_us / 1000000, (long)(pace_us % 1000000) * 1000L};
                nanosleep(&ts, NULL);
            }
            if (errors > 0 && i == messages / 10) {
                rd_kafka_resp_err_t errs[64];
                int cnt = errors < 64 ? errors : 64;
                for (int e = 0; e < cnt; e++)
                    errs[e] = e % 2 ? RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT
                                    : RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION;
                rd_kafka_mock_push_request_errors_array(mc, 0 /* Produce */, (size_t)cnt, errs);
            }
            if (i > 0 && i % move_every == 0 && moved < moves) {
                moved++;
                for (int part = 0; part < PARTITIONS; part++)
                    rd_kafka_mock_partition_set_leader(mc, topic, part, 1 + (part + moved) % 3);
                sleep_ms(20); /* let requests meet the new leaders while more are produced */
            }
        }
        while (rd_kafka_outq_len(p) > 0 && !r.fatal)
            rd_kafka_poll(p, 100);
        rd_kafka_destroy(p);
        read_back(bootstrap, topic, &r);
        long acked = 0, lost = 0, dup = 0;
        for (int i = 0; i < messages; i++) {
            acked += r.acked[i];
            if (r.acked[i] && !r.seen[i]) {
                lost++;
                if (lost <= 5)
                    fprintf(stderr, "# round %d: message %d acknowledged, not in the log\n", round, i);
            }
            if (r.seen[i] > 1)
                dup++;
        }
        printf("round %d: produced %d acknowledged %ld lost %ld duplicated %ld fatal %d implicit_acks %d (messages in the log: %lld)\n",
               round, messages, acked, lost, dup, r.fatal, r.implicit_acks, (long long)r.log_end);
        fflush(stdout);
        total_acked += acked;
        total_lost += lost;
        total_dup += dup;
        total_fatal += r.fatal;
        total_implicit += r.implicit_acks;
        rounds_lost += lost > 0;
        free(r.acked);
        free(r.seen);
    }
    printf("PROBE rounds=%d acknowledged=%ld lost=%ld rounds_with_loss=%ld duplicated=%ld fatal=%ld implicit_acks=%ld\n",
           rounds, total_acked, total_lost, rounds_lost, total_dup, total_fatal, total_implicit);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(mrk);
    return 0;
}
