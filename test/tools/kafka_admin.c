/* Test tool: Kafka admin operations the tests need, through librdkafka's admin API.
 *   kafka-admin --bootstrap HOST:PORT create-partitions TOPIC COUNT
 * Exits 0 when the broker accepted the request. */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 6 || strcmp(argv[1], "--bootstrap") != 0 || strcmp(argv[3], "create-partitions") != 0) {
        fprintf(stderr, "usage: kafka-admin --bootstrap HOST:PORT create-partitions TOPIC COUNT\n");
        return 2;
    }
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", argv[2], err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 1;
    }
    rd_kafka_NewPartitions_t *np = rd_kafka_NewPartitions_new(argv[4], (size_t)atoi(argv[5]), err, sizeof(err));
    if (!np) {
        fprintf(stderr, "kafka-admin: %s\n", err);
        return 2;
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    int rc = 1;
    if (!ev) {
        fprintf(stderr, "kafka-admin: no answer within 30 s\n");
    } else if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "kafka-admin: %s\n", rd_kafka_event_error_string(ev));
    } else {
        size_t n;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreatePartitions_result_topics(rd_kafka_event_CreatePartitions_result(ev), &n);
        if (n == 1 && rd_kafka_topic_result_error(res[0]) == RD_KAFKA_RESP_ERR_NO_ERROR)
            rc = 0;
        else
            fprintf(stderr, "kafka-admin: %s\n", n ? rd_kafka_topic_result_error_string(res[0]) : "no result");
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_NewPartitions_destroy(np);
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    return rc;
}
