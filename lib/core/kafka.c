/* Kafka helpers both programs use: one librdkafka log callback for every client, the hint
 * added to a refused login, and --check-config's reachability test. */
#include "core/kafka.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

const char *kafka_auth_hint(const rd_kafka_conf_t *conf)
{
    char mech[64];
    size_t len = sizeof(mech);
    if (rd_kafka_version() >= 0x020601ff ||
        rd_kafka_conf_get(conf, "sasl.mechanisms", mech, &len) != RD_KAFKA_CONF_OK ||
        strncmp(mech, "SCRAM", 5) != 0)
        return "";
    return " (if the user and password are right and the brokers run Kafka 4.x: librdkafka "
           "before 2.6.1 cannot log in with SCRAM to Kafka 4.x brokers; see docs/DEPLOYING.md "
           "\"Secure connections\")";
}

void kafka_warn_old_scram(const rd_kafka_conf_t *conf)
{
    static int warned;
    char mech[64];
    size_t len = sizeof(mech);
    if (warned || !kafka_auth_hint(conf)[0]) /* the same condition as the refused login's hint */
        return;
    warned = 1;
    rd_kafka_conf_get(conf, "sasl.mechanisms", mech, &len);
    log_warn("kafka: librdkafka %s logs in with %s in a way Kafka 4.x brokers refuse (fixed in librdkafka "
             "2.6.1): against Kafka 4.x use a build linked with librdkafka >= 2.6.1; Kafka 3.x brokers accept it",
             rd_kafka_version_str(), mech);
}

/* Runs on librdkafka's threads: the logger is thread-safe. */
void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    int consumer = rd_kafka_type(rk) == RD_KAFKA_CONSUMER;
    if (consumer && strcmp(fac, "CONFWARN") == 0)
        log_debug("kafka: %s: %s", fac, buf); /* the producer's settings, given to a consumer */
    else if (level <= 3)
        log_error("kafka: %s: %s", fac, buf);
    else if (level <= 4)
        log_warn("kafka: %s: %s", fac, buf);
    else if (level <= 6 && !consumer)
        log_info("kafka: %s: %s", fac, buf);
    else
        log_debug("kafka: %s: %s", fac, buf);
}

/* check-config's error callback: keeps the first authentication failure */
static void check_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    char *auth = opaque;
    if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION && !auth[0])
        snprintf(auth, 512, "%s", reason);
}

int kafka_check_reachable(const struct kafka_prop *props, size_t n)
{
    char auth[512] = "";
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_error_cb(conf, check_error_cb);
    rd_kafka_conf_set_opaque(conf, auth);
    char kerr[512];
    if (settings_kafka_apply(conf, props, n, kerr, sizeof(kerr)) != 0) { /* settings checked them already */
        rd_kafka_conf_destroy(conf);
        log_error("check-config: kafka: %s", kerr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr));
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        log_error("check-config: kafka: %s", kerr);
        return 1;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, NULL, &md, 10000);
    int rc = 0;
    if (err)
        rd_kafka_poll(rk, 100); /* serves the error events, an authentication failure among them */
    if (err && auth[0]) {
        log_error("check-config: kafka refused the login: %s%s", auth, kafka_auth_hint(rd_kafka_conf(rk)));
        rc = 1;
    } else if (err) {
        log_error("check-config: kafka unreachable: %s", rd_kafka_err2str(err));
        rc = 1;
    } else {
        log_info("check-config: kafka reachable (%d brokers)", md->broker_cnt);
        rd_kafka_metadata_destroy(md);
    }
    rd_kafka_destroy(rk);
    return rc;
}

int kafka_topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, char *err, size_t errlen)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt) {
        set_err(err, errlen, "topic %s: %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
        return -1;
    }
    const struct rd_kafka_metadata *md = NULL;
    int n = -1;
    rd_kafka_resp_err_t rc = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    if (rc)
        set_err(err, errlen, "topic %s: %s", topic, rd_kafka_err2str(rc));
    else if (md->topic_cnt != 1 || md->topics[0].err)
        set_err(err, errlen, "topic %s: %s", topic,
                rd_kafka_err2str(md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    else
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return n;
}

int kafka_wait_assign_all(rd_kafka_t *rk, const char *topic, int64_t offset, int retry_ms,
                          const volatile sig_atomic_t *stop)
{
    char err[256];
    int n = 0;
    while (!*stop && n <= 0) {
        n = kafka_topic_partitions(rk, topic, 5000, err, sizeof(err));
        if (n <= 0 && !*stop)
            usleep((useconds_t)retry_ms * 1000);
    }
    if (n <= 0)
        return 0;
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(list, topic, p)->offset = offset;
    rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    return n;
}

rd_kafka_t *kafka_reader_new(const char *bootstrap, const char *group, int partition_eof,
                             const char *isolation, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, errlen) ||
        (isolation && rd_kafka_conf_set(conf, "isolation.level", isolation, err, errlen)) ||
        rd_kafka_conf_set(conf, "group.id", group, err, errlen) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, errlen) ||
        rd_kafka_conf_set(conf, "enable.partition.eof", partition_eof ? "true" : "false", err, errlen)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
    if (!rk)
        rd_kafka_conf_destroy(conf);
    return rk;
}
