/* Test tool: librdkafka's mock cluster served over loopback, driven from stdin, for
 * fault injection (the relay runs as a separate process and connects to it).
 *
 *   mock-kafka --brokers N --topic NAME:PARTITIONS [--topic ...]
 *
 * Prints "BOOTSTRAP <servers>" then reads commands, one per line:
 *   errors COUNT ERR...       the next COUNT Produce requests fail, cycling through ERR
 *                             (names like NOT_LEADER_FOR_PARTITION, or numeric codes)
 *   down ID | up ID           take broker ID down / bring it up
 *   rtt ID MS                 add round-trip time to broker ID
 *   leader TOPIC PART ID      move a partition's leader
 *   topic_error TOPIC ERR     metadata for TOPIC answers ERR (NO_ERROR clears it)
 *   broker_errors ID COUNT ERR  the next COUNT Produce requests to broker ID fail with ERR
 *   quit                      exit (also on end of input) */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCE_API_KEY 0

static rd_kafka_resp_err_t parse_err(const char *s)
{
    if (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
        return (rd_kafka_resp_err_t)atoi(s);
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++)
        if (descs[i].name && strcmp(descs[i].name, s) == 0)
            return descs[i].code;
    fprintf(stderr, "mock-kafka: unknown error name %s\n", s);
    return RD_KAFKA_RESP_ERR_UNKNOWN;
}

int main(int argc, char **argv)
{
    int brokers = 3;
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "mock-kafka: %s\n", errstr);
        return 2;
    }
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--brokers") && i + 1 < argc)
            brokers = atoi(argv[++i]);
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (!mc) {
        fprintf(stderr, "mock-kafka: cannot create the mock cluster\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--topic") && i + 1 < argc) {
            char *spec = argv[++i];
            char *colon = strchr(spec, ':');
            int parts = colon ? atoi(colon + 1) : 6;
            if (colon)
                *colon = '\0';
            rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, spec, parts, brokers >= 3 ? 3 : 1);
            if (err) {
                fprintf(stderr, "mock-kafka: topic %s: %s\n", spec, rd_kafka_err2str(err));
                return 2;
            }
        }
    }
    printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);

    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        char *cmd = strtok(line, " \t\n");
        if (!cmd)
            continue;
        if (!strcmp(cmd, "quit"))
            break;
        if (!strcmp(cmd, "errors")) {
            char *cnt_s = strtok(NULL, " \t\n");
            rd_kafka_resp_err_t errs[64];
            size_t n = 0;
            for (char *e; n < 64 && (e = strtok(NULL, " \t\n"));)
                errs[n++] = parse_err(e);
            size_t cnt = cnt_s ? (size_t)atoi(cnt_s) : 0;
            if (!n || !cnt) {
                fprintf(stderr, "mock-kafka: usage: errors COUNT ERR...\n");
                continue;
            }
            rd_kafka_resp_err_t *all = calloc(cnt, sizeof(*all));
            for (size_t i = 0; i < cnt; i++)
                all[i] = errs[i % n];
            rd_kafka_mock_push_request_errors_array(mc, PRODUCE_API_KEY, cnt, all);
            free(all);
        } else if (!strcmp(cmd, "down") || !strcmp(cmd, "up")) {
            char *id = strtok(NULL, " \t\n");
            if (!id)
                continue;
            if (!strcmp(cmd, "down"))
                rd_kafka_mock_broker_set_down(mc, atoi(id));
            else
                rd_kafka_mock_broker_set_up(mc, atoi(id));
        } else if (!strcmp(cmd, "rtt")) {
            char *id = strtok(NULL, " \t\n"), *ms = strtok(NULL, " \t\n");
            if (id && ms)
                rd_kafka_mock_broker_set_rtt(mc, atoi(id), atoi(ms));
        } else if (!strcmp(cmd, "leader")) {
            char *t = strtok(NULL, " \t\n"), *p = strtok(NULL, " \t\n"), *id = strtok(NULL, " \t\n");
            if (t && p && id)
                rd_kafka_mock_partition_set_leader(mc, t, atoi(p), atoi(id));
        } else if (!strcmp(cmd, "broker_errors")) {
            char *id = strtok(NULL, " \t\n"), *cnt = strtok(NULL, " \t\n"), *e = strtok(NULL, " \t\n");
            if (id && cnt && e)
                for (int i = 0; i < atoi(cnt); i++)
                    rd_kafka_mock_broker_push_request_error_rtts(mc, atoi(id), PRODUCE_API_KEY, 1,
                                                                 parse_err(e), 0);
        } else if (!strcmp(cmd, "topic_error")) {
            char *t = strtok(NULL, " \t\n"), *e = strtok(NULL, " \t\n");
            if (t && e)
                rd_kafka_mock_topic_set_error(mc, t, parse_err(e));
        } else {
            fprintf(stderr, "mock-kafka: unknown command %s\n", cmd);
            continue;
        }
        fprintf(stderr, "mock-kafka: done %s\n", cmd);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}
