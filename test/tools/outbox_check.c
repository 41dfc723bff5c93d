/* Test checker: consumes every partition of the given topics from the beginning up to
 * the high watermark and compares with the rows the outbox table holds.
 *
 *   outbox-check --bootstrap HOST:PORT --topics T1,T2 --expected FILE [--exact] [--values]
 *                [--no-partition-check] [--id-header NAME] [--dump FILE]
 *                [--max-duplicates N] [--require-lease] [--allow-empty]
 *                [--transactional [--read-uncommitted]]
 *   outbox-check --partition-of COUNT   (keys on stdin, one per line: "key<TAB>partition")
 *
 * FILE has one line per committed row: "id<TAB>event_id<TAB>aggregate_id", and with
 * --values a fourth column, the value Kafka must hold: "x" and its bytes in hex ("x" alone
 * for an empty value), or "-" for none (a null value): every delivery is compared byte for
 * byte (value_mismatches). --id-header names the header that carries the event id (default
 * event_id; id for Debezium-shaped messages). --dump writes one line per delivery, in the
 * order read: "event id<TAB>partition<TAB>key<TAB>value<TAB>headers<TAB>timestamp", key and
 * value in hex ("-" for null), headers as name=hexvalue joined by ";" in the message's order,
 * the message's timestamp in ms since the epoch (-1 if it has none).
 * Prints "CHECK expected=.. delivered_unique=.. lost=.. duplicates=.. order_violations=..
 * partition_mismatches=.. unexpected=.. fenced=.. stale_duplicates=.. fencing_violations=.."
 * and exits 1 if anything was lost, reordered per key (first deliveries out of id order),
 * in the wrong partition (murmur2), unknown, published by a relay that had lost its lease
 * (see below), delivered twice (--exact: any duplicate; --max-duplicates N: more than N),
 * or (--require-lease) without a readable outbox_lease header (lease_missing).
 * Messages are read with isolation.level=read_committed (what a consumer of the relay's
 * exactly-once mode reads); --read-uncommitted reads aborted transactions' messages too.
 * --transactional: topics written in transactions, whose last offsets may be transaction
 * markers no consumer is given: a partition's end is where the consumer is told it reached
 * it (its last stable offset) rather than its high watermark.
 * It exits 2 when it cannot tell: an expected set with no row (unless --allow-empty: a
 * failed query upstream must not read as "nothing lost"), a malformed line, a topic or
 * partition count it cannot read.
 *
 * Fencing, from Kafka alone: the relay tags each message with outbox_lease =
 * "<lease partition>/<token>/<relay name>/<pid>", the token growing with every acquisition of that lease
 * partition. Within one Kafka partition, a lease partition's tokens must not go down for
 * first deliveries: a message with a smaller token than one already read there is
 * counted in stale_duplicates when its event was delivered before (harmless: what a
 * frozen relay's producer sent as it woke up), and is a fencing violation otherwise. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kafka.h"
#include "check_common.h"
#include "murmur2.h"

struct expected_row {
    long long id;
    char event_id[40];
    char *key;
    char *value_hex; /* --values: the expected value as hex, NULL for no value */
    int seen;
};

struct key_state {
    char *key;
    long long last_first_id;
    int partition;
    char *topic;
};

static struct expected_row *rows;
static size_t n_rows;
static struct key_state *keys;
static size_t n_keys, cap_keys;
static rd_kafka_topic_partition_list_t *assign; /* global: reachable at any exit */

/* Read progress per assigned partition: done when the next offset reaches the high
 * watermark taken before reading (EOF alone is not trusted). */
struct part_progress {
    char topic[256];
    int32_t partition;
    int64_t high;
    int64_t next;
    int done; /* read up to its end */
};
static struct part_progress progress[4096];
static int n_progress;

static struct part_progress *progress_of(const char *topic, int32_t partition)
{
    for (int i = 0; i < n_progress; i++)
        if (progress[i].partition == partition && strcmp(progress[i].topic, topic) == 0)
            return &progress[i];
    return NULL;
}

static int cmp_event(const void *a, const void *b)
{
    return strcmp(((const struct expected_row *)a)->event_id, ((const struct expected_row *)b)->event_id);
}

static struct expected_row *find_event(const char *event_id)
{
    struct expected_row probe = {0};
    snprintf(probe.event_id, sizeof(probe.event_id), "%s", event_id);
    return bsearch(&probe, rows, n_rows, sizeof(*rows), cmp_event);
}

/* Whether a message's value is the expected one (hex, NULL for none). */
static int value_matches(const rd_kafka_message_t *m, const char *hex)
{
    if (!hex)
        return m->payload == NULL;
    return m->payload && check_bytes_are_hex(m->payload, m->len, hex);
}

/* Linear probe hash of keys. */
static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603ULL;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}

static struct key_state *key_get(const char *key)
{
    if (n_keys * 2 >= cap_keys) {
        size_t old_cap = cap_keys;
        struct key_state *old = keys;
        cap_keys = cap_keys ? cap_keys * 2 : 1024;
        keys = calloc(cap_keys, sizeof(*keys));
        for (size_t i = 0; i < old_cap; i++) {
            if (!old[i].key)
                continue;
            size_t j = hash_str(old[i].key) % cap_keys;
            while (keys[j].key)
                j = (j + 1) % cap_keys;
            keys[j] = old[i];
        }
        free(old);
    }
    size_t j = hash_str(key) % cap_keys;
    while (keys[j].key && strcmp(keys[j].key, key) != 0)
        j = (j + 1) % cap_keys;
    if (!keys[j].key) {
        keys[j].key = strdup(key);
        keys[j].partition = -1;
        n_keys++;
    }
    return &keys[j];
}

/* Splits line at tabs in place, keeping empty fields (strtok would merge them); returns
 * the number of fields, at most max. */
static int split_tabs(char *line, char **field, int max)
{
    int n = 0;
    while (n < max) {
        field[n++] = line;
        char *tab = strchr(line, '\t');
        if (!tab)
            break;
        *tab = '\0';
        line = tab + 1;
    }
    return n;
}

/* Reads the expected rows; exits 2 on a line that is not "id<TAB>event_id<TAB>key" (plus
 * the value with --values): a file the caller wrote wrong must not read as fewer rows. */
static void load_expected(const char *path, int values)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1024;
    rows = malloc(cap * sizeof(*rows));
    char *line = NULL;
    size_t linecap = 0;
    long lineno = 0;
    while (getline(&line, &linecap, f) > 0) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        char *field[5], *end = NULL;
        int n = split_tabs(line, field, 5);
        long long id = n > 0 ? strtoll(field[0], &end, 10) : 0;
        if (values ? n != 4 : n < 3 || n > 4) { /* without --values a fourth field is ignored */
            fprintf(stderr, "outbox-check: %s:%ld: %d fields, want %s (id, event id, key, value)\n", path, lineno,
                    n, values ? "4" : "3 or 4");
            exit(2);
        }
        if (!end || *end || end == field[0] || !field[1][0] || strlen(field[1]) >= sizeof(rows->event_id)) {
            fprintf(stderr, "outbox-check: %s:%ld: malformed id or event id\n", path, lineno);
            exit(2);
        }
        if (values && field[3][0] != 'x' && strcmp(field[3], "-")) {
            fprintf(stderr, "outbox-check: %s:%ld: value must be x<hex> or -\n", path, lineno);
            exit(2);
        }
        if (n_rows == cap) {
            struct expected_row *grown = realloc(rows, (cap *= 2) * sizeof(*rows));
            if (!grown) {
                fprintf(stderr, "outbox-check: out of memory\n");
                exit(2);
            }
            rows = grown;
        }
        rows[n_rows].id = id;
        snprintf(rows[n_rows].event_id, sizeof(rows[n_rows].event_id), "%s", field[1]);
        rows[n_rows].key = strdup(field[2]);
        rows[n_rows].value_hex = values && field[3][0] == 'x' ? strdup(field[3] + 1) : NULL;
        rows[n_rows].seen = 0;
        n_rows++;
    }
    free(line);
    fclose(f);
    qsort(rows, n_rows, sizeof(*rows), cmp_event);
}

static void put_hex(FILE *f, const void *p, size_t n)
{
    if (!p) {
        fputc('-', f);
        return;
    }
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%02x", ((const unsigned char *)p)[i]);
}

/* One delivery as a --dump line (see the top of this file). */
static void dump_message(FILE *f, const char *event_id, const rd_kafka_message_t *m,
                         rd_kafka_headers_t *hdrs)
{
    fprintf(f, "%s\t%d\t", event_id, (int)m->partition);
    put_hex(f, m->key, m->key_len);
    fputc('\t', f);
    put_hex(f, m->payload, m->len);
    fputc('\t', f);
    const char *name;
    const void *v;
    size_t vlen;
    for (size_t i = 0; hdrs && rd_kafka_header_get_all(hdrs, i, &name, &v, &vlen) == 0; i++) {
        fprintf(f, "%s%s=", i ? ";" : "", name);
        put_hex(f, v, vlen);
    }
    fprintf(f, "\t%lld\n", (long long)rd_kafka_message_timestamp(m, NULL));
}

int main(int argc, char **argv)
{
    const char *bootstrap = NULL, *topics = NULL, *expected = NULL;
    int exact = 0, partition_check = 1, verbose = 0, values = 0, require_lease = 0, allow_empty = 0;
    long long max_duplicates = -1;
    const char *isolation = "read_committed";
    int transactional = 0;
    if (argc == 3 && !strcmp(argv[1], "--partition-of")) { /* the Java client's partition */
        int count = atoi(argv[2]);
        char line[4096];
        if (count < 1)
            return 2;
        while (fgets(line, sizeof(line), stdin)) {
            line[strcspn(line, "\n")] = '\0';
            printf("%s\t%d\n", line, kafka_key_partition(line, strlen(line), count));
        }
        return 0;
    }
    const char *id_header = "event_id";
    FILE *dump = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bootstrap") && i + 1 < argc)
            bootstrap = argv[++i];
        else if (!strcmp(argv[i], "--topics") && i + 1 < argc)
            topics = argv[++i];
        else if (!strcmp(argv[i], "--expected") && i + 1 < argc)
            expected = argv[++i];
        else if (!strcmp(argv[i], "--values"))
            values = 1;
        else if (!strcmp(argv[i], "--read-uncommitted"))
            isolation = "read_uncommitted";
        else if (!strcmp(argv[i], "--transactional"))
            transactional = 1;
        else if (!strcmp(argv[i], "--exact"))
            exact = 1;
        else if (!strcmp(argv[i], "--max-duplicates") && i + 1 < argc)
            max_duplicates = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--require-lease"))
            require_lease = 1;
        else if (!strcmp(argv[i], "--allow-empty"))
            allow_empty = 1;
        else if (!strcmp(argv[i], "--no-partition-check"))
            partition_check = 0;
        else if (!strcmp(argv[i], "--verbose"))
            verbose = 1;
        else if (!strcmp(argv[i], "--id-header") && i + 1 < argc)
            id_header = argv[++i];
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) {
            if (!(dump = fopen(argv[++i], "w"))) {
                perror(argv[i]);
                return 2;
            }
        }
        else {
            fprintf(stderr, "usage: outbox-check --bootstrap B --topics T1,T2 --expected FILE "
                            "[--exact] [--no-partition-check] [--values] [--verbose] "
                            "[--id-header NAME] [--dump FILE] [--max-duplicates N] [--require-lease] "
                            "[--allow-empty] [--transactional [--read-uncommitted]]\n");
            return 2;
        }
    }
    if (!bootstrap || !topics || !expected) {
        fprintf(stderr, "outbox-check: --bootstrap, --topics and --expected are required\n");
        return 2;
    }
    load_expected(expected, values);
    if (n_rows == 0 && !allow_empty) {
        fprintf(stderr, "outbox-check: %s holds no row: nothing to check (--allow-empty if meant)\n", expected);
        return 2;
    }

    char errstr[512];
    rd_kafka_t *rk = kafka_reader_new(bootstrap, "outbox-check", 1, isolation, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "outbox-check: %s\n", errstr);
        return 2;
    }

    /* Assign every partition of every topic from the beginning; remember high watermarks. */
    assign = rd_kafka_topic_partition_list_new(64);
    char *list = strdup(topics);
    long long total_to_read = 0;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
        int np = kafka_topic_partitions(rk, t, 10000, errstr, sizeof(errstr));
        if (np < 0) {
            fprintf(stderr, "outbox-check: %s\n", errstr);
            return 2;
        }
        for (int p = 0; p < np; p++) {
            int64_t lo, hi;
            rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(rk, t, p, &lo, &hi, 10000);
            if (err) {
                fprintf(stderr, "outbox-check: watermarks %s/%d: %s\n", t, p, rd_kafka_err2str(err));
                return 2;
            }
            if (hi > lo && n_progress < 4096) {
                rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_add(assign, t, p);
                tp->offset = RD_KAFKA_OFFSET_BEGINNING;
                total_to_read += hi - lo;
                struct part_progress *pp = &progress[n_progress++];
                snprintf(pp->topic, sizeof(pp->topic), "%s", t);
                pp->partition = p;
                pp->high = hi;
                pp->next = lo;
            }
        }
        fprintf(stderr, "outbox-check: topic %s has %d partitions\n", t, np);
    }
    free(list);

    long long delivered = 0, duplicates = 0, order_violations = 0, mismatches = 0, unexpected = 0;
    long long fenced = 0, stale_duplicates = 0, fencing_violations = 0, value_mismatches = 0, lease_missing = 0;
    int eof_left = n_progress; /* partitions not yet read up to their high watermark */
    if (assign->cnt)
        rd_kafka_assign(rk, assign);
    /* Partition counts per topic, for the murmur2 check. */
    while (eof_left > 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 10000);
        if (!m) {
            fprintf(stderr, "outbox-check: no message for 10 s with %d partitions unread\n", eof_left);
            return 2;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            struct part_progress *pp = progress_of(rd_kafka_topic_name(m->rkt), m->partition);
            if (pp && transactional && !pp->done) {
                pp->done = 1; /* the rest are transaction markers or aborted messages */
                eof_left--;
            } else if (pp && pp->next < pp->high) {
                fprintf(stderr, "outbox-check: early EOF on %s/%d at %lld of %lld; reading on\n",
                        pp->topic, pp->partition, (long long)pp->next, (long long)pp->high);
            }
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->err) {
            fprintf(stderr, "outbox-check: consume: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        struct part_progress *pp = progress_of(rd_kafka_topic_name(m->rkt), m->partition);
        if (pp && !pp->done && m->offset + 1 >= pp->high) {
            pp->done = 1;
            eof_left--;
        }
        if (pp && m->offset + 1 > pp->next)
            pp->next = m->offset + 1;
        delivered++;
        rd_kafka_headers_t *hdrs = NULL;
        const void *val = NULL;
        size_t vlen = 0;
        char event_id[64] = "";
        if (rd_kafka_message_headers(m, &hdrs) == 0 &&
            rd_kafka_header_get_last(hdrs, id_header, &val, &vlen) == 0 && vlen < sizeof(event_id)) {
            memcpy(event_id, val, vlen);
            event_id[vlen] = '\0';
        }
        if (dump)
            dump_message(dump, event_id, m, hdrs);
        struct expected_row *row = find_event(event_id);
        if (!row) {
            unexpected++;
            rd_kafka_message_destroy(m);
            continue;
        }
        char key[1024];
        snprintf(key, sizeof(key), "%.*s", (int)m->key_len, (const char *)m->key);
        const char *topic = rd_kafka_topic_name(m->rkt);
        if (strcmp(key, row->key) != 0) {
            fprintf(stderr, "outbox-check: event %s has key '%s', row says '%s'\n", event_id, key, row->key);
            mismatches++;
        }
        if (partition_check) {
            const struct rd_kafka_metadata *md = NULL;
            static char last_topic[256];
            static int last_np;
            if (strcmp(last_topic, topic) != 0) {
                rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, m->rkt, &md, 10000);
                if (err || md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt < 1) {
                    fprintf(stderr, "outbox-check: partition count of %s unknown (%s): cannot check partitions\n",
                            topic, rd_kafka_err2str(err ? err : md->topic_cnt == 1 ? md->topics[0].err : err));
                    return 2;
                }
                last_np = md->topics[0].partition_cnt;
                rd_kafka_metadata_destroy(md);
                snprintf(last_topic, sizeof(last_topic), "%s", topic);
            }
            if (last_np > 0 && kafka_key_partition(m->key, m->key_len, last_np) != m->partition) {
                if (mismatches < 5)
                    fprintf(stderr, "outbox-check: key '%s' in partition %d, murmur2 says %d\n", key,
                            m->partition, kafka_key_partition(m->key, m->key_len, last_np));
                mismatches++;
            }
        }
        const void *lv = NULL;
        size_t llen = 0;
        int lease_p;
        long long token;
        if (hdrs && rd_kafka_header_get_last(hdrs, "outbox_lease", &lv, &llen) == 0 &&
            check_lease_token(lv, llen, &lease_p, &token)) {
            char fkey[1400];
            snprintf(fkey, sizeof(fkey), "lease|%s|%d|%d", topic, (int)m->partition, lease_p);
            struct key_state *fs = key_get(fkey);
            fenced++;
            if (token < fs->last_first_id) {
                if (row->seen) {
                    stale_duplicates++;
                } else {
                    if (fencing_violations < 10)
                        fprintf(stderr, "outbox-check: id %lld first delivered in %s/%d with lease "
                                "token %d/%lld after token %lld of lease partition %d\n", row->id, topic,
                                (int)m->partition, lease_p, token, fs->last_first_id, lease_p);
                    fencing_violations++;
                }
            } else {
                fs->last_first_id = token;
            }
        } else if (require_lease) {
            if (lease_missing++ < 5)
                fprintf(stderr, "outbox-check: id %lld in %s/%d has no readable outbox_lease header\n", row->id,
                        topic, (int)m->partition);
        }
        if (values && !value_matches(m, row->value_hex)) {
            if (value_mismatches++ < 5)
                fprintf(stderr, "outbox-check: id %lld: value of %zu bytes differs from the row's "
                        "(%zu bytes)\n", row->id, m->payload ? m->len : 0,
                        row->value_hex ? strlen(row->value_hex) / 2 : 0);
        }
        if (row->seen++) {
            duplicates++;
        } else {
            /* order is per key within a topic: the same key may appear in several topics */
            char tkey[1400];
            snprintf(tkey, sizeof(tkey), "%s|%s", topic, key);
            struct key_state *ks = key_get(tkey);
            if (ks->last_first_id >= row->id) {
                if (order_violations < 10)
                    fprintf(stderr, "outbox-check: key '%s': first delivery of id %lld after id %lld\n",
                            key, row->id, ks->last_first_id);
                order_violations++;
            }
            if (ks->partition >= 0 && ks->partition != m->partition) {
                fprintf(stderr, "outbox-check: key '%s' seen in two partitions\n", key);
                mismatches++;
            }
            ks->last_first_id = row->id;
            ks->partition = m->partition;
            if (!ks->topic)
                ks->topic = strdup(topic);
        }
        if (verbose)
            printf("%s\t%d\t%lld\t%s\t%lld\n", topic, m->partition, (long long)m->offset, key, row->id);
        rd_kafka_message_destroy(m);
    }

    long long unique = 0, lost = 0;
    for (size_t i = 0; i < n_rows; i++) {
        if (rows[i].seen)
            unique++;
        else if (lost++ < 10)
            fprintf(stderr, "outbox-check: lost id %lld event %s key %s\n", rows[i].id,
                    rows[i].event_id, rows[i].key);
    }
    printf("CHECK expected=%zu delivered_unique=%lld lost=%lld duplicates=%lld order_violations=%lld "
           "partition_mismatches=%lld unexpected=%lld fenced=%lld stale_duplicates=%lld "
           "fencing_violations=%lld value_mismatches=%lld lease_missing=%lld\n",
           n_rows, unique, lost, duplicates, order_violations, mismatches, unexpected, fenced,
           stale_duplicates, fencing_violations, value_mismatches, lease_missing);
    if (dump && fclose(dump) != 0) {
        perror("outbox-check: --dump");
        return 2;
    }
    rd_kafka_topic_partition_list_destroy(assign);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (max_duplicates >= 0 && duplicates > max_duplicates)
        fprintf(stderr, "outbox-check: %lld duplicates, at most %lld allowed\n", duplicates, max_duplicates);
    int bad = lost || order_violations || mismatches || unexpected || fencing_violations || value_mismatches ||
              lease_missing || (exact && duplicates) || (max_duplicates >= 0 && duplicates > max_duplicates);
    return bad ? 1 : 0;
}
