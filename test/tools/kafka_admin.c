/* Test tool: Kafka admin operations the tests need, through librdkafka's admin API.
 *   kafka-admin --bootstrap HOST:PORT create-partitions TOPIC COUNT
 *   kafka-admin --bootstrap HOST:PORT create-topic TOPIC PARTITIONS [NAME=VALUE...]
 *     (replication factor 1; each NAME=VALUE a topic setting, cleanup.policy=compact,delete say)
 *   kafka-admin --bootstrap HOST:PORT delete-records TOPIC PARTITION OFFSET
 *     (deletes the partition's messages below OFFSET, as retention deletes old segments:
 *     the low watermark moves to OFFSET)
 *   kafka-admin --bootstrap HOST:PORT count TOPIC PARTITIONS
 *     (prints the sum of the partitions' high watermarks: the messages a fresh topic holds)
 *   kafka-admin --bootstrap HOST:PORT leaders TOPIC
 *     (prints "partition leader" per partition, the leader's node id, -1 for none)
 *   kafka-admin --bootstrap HOST:PORT produce TOPIC
 *     (produces one message per stdin line "key<TAB>value<TAB>headers": key and value in hex,
 *     "-" for null; headers as name=hexvalue (or name=- for none) joined by ';', empty for none - outbox-check's
 *     --dump fields; the Java client's partitioner; waits for every acknowledgement and
 *     prints "produced N")
 * Exits 0 when the broker accepted the request. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: kafka-admin --bootstrap HOST:PORT create-partitions TOPIC COUNT\n"
                    "       kafka-admin --bootstrap HOST:PORT create-topic TOPIC PARTITIONS [NAME=VALUE...]\n"
                    "       kafka-admin --bootstrap HOST:PORT delete-records TOPIC PARTITION OFFSET\n"
                    "       kafka-admin --bootstrap HOST:PORT count TOPIC PARTITIONS\n"
                    "       kafka-admin --bootstrap HOST:PORT leaders TOPIC\n"
                    "       kafka-admin --bootstrap HOST:PORT produce TOPIC\n");
    return 2;
}

/* Hex text [s, s+n) into out (n/2 bytes); -1 when it is not hex. */
static int unhex(const char *s, size_t n, char *out)
{
    if (n % 2)
        return -1;
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(s + i, "%2x", &v) != 1)
            return -1;
        out[i / 2] = (char)v;
    }
    return 0;
}

static int delivered_failed;
static void produce_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk, (void)opaque;
    if (m->err) {
        fprintf(stderr, "kafka-admin: delivery failed: %s\n", rd_kafka_err2str(m->err));
        delivered_failed++;
    }
}

/* produce: the lines of stdin as messages (see the top of this file). */
static int produce(rd_kafka_t *rk, const char *topic)
{
    char line[1 << 16];
    long n = 0;
    while (fgets(line, sizeof(line), stdin)) {
        line[strcspn(line, "\n")] = '\0';
        char *key = line, *value = strchr(key, '\t'), *hdrs = value ? strchr(value + 1, '\t') : NULL;
        if (!hdrs) {
            fprintf(stderr, "kafka-admin: line %ld: expected key<TAB>value<TAB>headers\n", n + 1);
            return 2;
        }
        *value++ = '\0';
        *hdrs++ = '\0';
        static char kbuf[1 << 15], vbuf[1 << 15], hval[1 << 15];
        size_t klen = strlen(key), vlen = strlen(value);
        int knull = strcmp(key, "-") == 0, vnull = strcmp(value, "-") == 0;
        if ((!knull && unhex(key, klen, kbuf)) || (!vnull && unhex(value, vlen, vbuf))) {
            fprintf(stderr, "kafka-admin: line %ld: key or value is not hex\n", n + 1);
            return 2;
        }
        rd_kafka_headers_t *h = rd_kafka_headers_new(8);
        for (char *item = strtok(hdrs, ";"); item; item = strtok(NULL, ";")) {
            char *eq = strchr(item, '=');
            if (eq && strcmp(eq + 1, "-") == 0) { /* a header without a value */
                *eq = '\0';
                rd_kafka_header_add(h, item, -1, NULL, 0);
                continue;
            }
            if (!eq || unhex(eq + 1, strlen(eq + 1), hval)) {
                fprintf(stderr, "kafka-admin: line %ld: header '%s' is not name=hexvalue\n", n + 1, item);
                rd_kafka_headers_destroy(h);
                return 2;
            }
            *eq = '\0';
            rd_kafka_header_add(h, item, -1, hval, (ssize_t)(strlen(eq + 1) / 2));
        }
        rd_kafka_resp_err_t e = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(knull ? NULL : kbuf, knull ? 0 : klen / 2),
            RD_KAFKA_V_VALUE(vnull ? NULL : vbuf, vnull ? 0 : vlen / 2), RD_KAFKA_V_HEADERS(h),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e) {
            rd_kafka_headers_destroy(h);
            fprintf(stderr, "kafka-admin: line %ld: %s\n", n + 1, rd_kafka_err2str(e));
            return 1;
        }
        n++;
    }
    if (rd_kafka_flush(rk, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR || delivered_failed) {
        fprintf(stderr, "kafka-admin: not every message was acknowledged\n");
        return 1;
    }
    printf("produced %ld\n", n);
    return 0;
}

enum op { CREATE_PARTITIONS, CREATE_TOPIC, DELETE_RECORDS, COUNT, LEADERS, PRODUCE };

/* The error of the one topic or partition the request was about. */
static int result(rd_kafka_event_t *ev, enum op op)
{
    if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "kafka-admin: %s\n", rd_kafka_event_error_string(ev));
        return 1;
    }
    if (op != DELETE_RECORDS) {
        size_t n;
        const rd_kafka_topic_result_t **res =
            op == CREATE_TOPIC
                ? rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n)
                : rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &n);
        if (n == 1 && rd_kafka_topic_result_error(res[0]) == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        fprintf(stderr, "kafka-admin: %s\n", n ? rd_kafka_topic_result_error_string(res[0]) : "no result");
        return 1;
    }
    const rd_kafka_topic_partition_list_t *parts =
        rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(ev));
    if (parts && parts->cnt == 1 && parts->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    fprintf(stderr, "kafka-admin: %s\n", parts && parts->cnt ? rd_kafka_err2str(parts->elems[0].err) : "no result");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[1], "--bootstrap") != 0)
        return usage();
    enum op op;
    if (strcmp(argv[3], "leaders") == 0 && argc == 5)
        op = LEADERS;
    else if (strcmp(argv[3], "produce") == 0 && argc == 5)
        op = PRODUCE;
    else if (strcmp(argv[3], "create-partitions") == 0 && argc == 6)
        op = CREATE_PARTITIONS;
    else if (strcmp(argv[3], "create-topic") == 0 && argc >= 6)
        op = CREATE_TOPIC;
    else if (strcmp(argv[3], "delete-records") == 0 && argc == 7)
        op = DELETE_RECORDS;
    else if (strcmp(argv[3], "count") == 0 && argc == 6)
        op = COUNT;
    else
        return usage();
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[2], err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 2;
    }
    if (op == PRODUCE && (rd_kafka_conf_set(conf, "partitioner", "murmur2_random", err, sizeof(err)) ||
                          rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof(err)))) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 2;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, produce_report);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 1;
    }
    if (op == PRODUCE) {
        int rc = produce(rk, argv[4]);
        rd_kafka_destroy(rk);
        return rc;
    }
    if (op == LEADERS) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[4], NULL);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 10000);
        int rc = 0;
        if (e || md->topic_cnt != 1 || md->topics[0].err) {
            fprintf(stderr, "kafka-admin: %s: %s\n", argv[4], rd_kafka_err2str(e ? e : md->topics[0].err));
            rc = 1;
        } else {
            for (int i = 0; i < md->topics[0].partition_cnt; i++)
                printf("%d %d\n", (int)md->topics[0].partitions[i].id, (int)md->topics[0].partitions[i].leader);
        }
        if (md)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
        rd_kafka_destroy(rk);
        return rc;
    }
    if (op == COUNT) { /* a topic that does not exist yet counts 0 */
        long long sum = 0;
        for (int p = 0; p < atoi(argv[5]); p++) {
            int64_t lo = 0, hi = 0;
            rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, argv[4], p, &lo, &hi, 10000);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                sum += hi;
            else if (e != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
                fprintf(stderr, "kafka-admin: %s/%d: %s\n", argv[4], p, rd_kafka_err2str(e));
                rd_kafka_destroy(rk);
                return 1;
            }
        }
        printf("%lld\n", sum);
        rd_kafka_destroy(rk);
        return 0;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_NewPartitions_t *np = NULL;
    rd_kafka_DeleteRecords_t *dr = NULL;
    rd_kafka_NewTopic_t *nt = NULL;
    if (op == CREATE_TOPIC) {
        if (!(nt = rd_kafka_NewTopic_new(argv[4], atoi(argv[5]), 1, err, sizeof(err)))) {
            fprintf(stderr, "kafka-admin: %s\n", err);
            return 2;
        }
        for (int i = 6; i < argc; i++) {
            char name[256];
            const char *eq = strchr(argv[i], '=');
            if (!eq || eq == argv[i] || (size_t)(eq - argv[i]) >= sizeof(name)) {
                fprintf(stderr, "kafka-admin: %s: not NAME=VALUE\n", argv[i]);
                return 2;
            }
            snprintf(name, sizeof(name), "%.*s", (int)(eq - argv[i]), argv[i]);
            if (rd_kafka_NewTopic_set_config(nt, name, eq + 1) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                fprintf(stderr, "kafka-admin: %s: refused\n", argv[i]);
                return 2;
            }
        }
        rd_kafka_CreateTopics(rk, &nt, 1, NULL, q);
    } else if (op == CREATE_PARTITIONS) {
        if (!(np = rd_kafka_NewPartitions_new(argv[4], (size_t)atoi(argv[5]), err, sizeof(err)))) {
            fprintf(stderr, "kafka-admin: %s\n", err);
            return 2;
        }
        rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    } else {
        rd_kafka_topic_partition_list_t *before = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(before, argv[4], atoi(argv[5]))->offset = atoll(argv[6]);
        dr = rd_kafka_DeleteRecords_new(before);
        rd_kafka_topic_partition_list_destroy(before);
        rd_kafka_DeleteRecords(rk, &dr, 1, NULL, q);
    }
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = 1;
    if (!ev)
        fprintf(stderr, "kafka-admin: no answer within 30 s\n");
    else
        rc = result(ev, op);
    if (ev)
        rd_kafka_event_destroy(ev);
    if (np)
        rd_kafka_NewPartitions_destroy(np);
    if (dr)
        rd_kafka_DeleteRecords_destroy(dr);
    if (nt)
        rd_kafka_NewTopic_destroy(nt);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}
