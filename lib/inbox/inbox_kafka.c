/* outbox-inbox's Kafka clients (inbox_int.h): the consumer and the dead-letter producer,
 * their callbacks (log, errors, statistics, rebalances), and remaking them. */
#include <stdlib.h>
#include <string.h>

#include "inbox_int.h"
#include "log.h"
#include "config.h"
#include "sink.h"

static void kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct inbox *ib = opaque;
    if (err != RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
        return;
    }
    log_error("kafka: authentication failed: %s%s", reason, sink_auth_hint(rd_kafka_conf(rk)));
    /* a secret read from a file (INBOX_KAFKA_SASL_PASSWORD_FILE) changed since the clients
     * were made: a rotated password; the loop makes them again, reading it anew */
    if (!ib->kafka_recreate && config_kafka_files_changed(ib->cfg->kafka, ib->cfg->n_kafka, ib->kafka_secrets_seen)) {
        log_info("kafka: a Kafka setting read from a file changed since the consumer was made: "
                 "making the consumer again with it");
        ib->kafka_recreate = 1;
    }
}

/* Consumer lag per partition from librdkafka's statistics (served on the loop's poll). */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    struct inbox *ib = opaque;
    json_t *doc = json_loadb(json, len, 0, NULL);
    json_t *topics = json_object_get(doc, "topics");
    const char *tname;
    json_t *t;
    ib->n_lags = 0;
    json_object_foreach(topics, tname, t) {
        const char *pname;
        json_t *p;
        json_object_foreach(json_object_get(t, "partitions"), pname, p) {
            json_int_t lag = json_integer_value(json_object_get(p, "consumer_lag"));
            int32_t part = (int32_t)atoi(pname);
            const char *state = json_string_value(json_object_get(p, "fetch_state"));
            if (part < 0 || !state || strcmp(state, "active") != 0 || ib->n_lags == MAX_LAG_PARTS)
                continue;
            struct lag *l = &ib->lags[ib->n_lags++];
            snprintf(l->topic, sizeof(l->topic), "%s", tname);
            l->partition = part;
            l->lag = lag < 0 ? 0 : lag;
        }
    }
    json_decref(doc);
    return 0;
}

/* Eager (classic) rebalancing: offsets stored so far are committed before partitions go. */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts,
                         void *opaque)
{
    struct inbox *ib = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_info("kafka: %d partitions assigned", parts->cnt);
        rd_kafka_assign(rk, parts);
        ib->assigned = parts->cnt;
    } else {
        rd_kafka_resp_err_t c = rd_kafka_commit(rk, NULL, 0);
        if (c && c != RD_KAFKA_RESP_ERR__NO_OFFSET)
            log_warn("kafka: committing offsets before a rebalance: %s", rd_kafka_err2str(c));
        log_info("kafka: %d partitions revoked", parts->cnt);
        rd_kafka_assign(rk, NULL);
        ib->assigned = 0;
        ib->n_lags = 0;
    }
}

static void dlq_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct inbox *ib = opaque;
    ib->dlq_done = 1;
    ib->dlq_err = m->err;
}

static rd_kafka_conf_t *kafka_conf(struct inbox *ib, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (config_kafka_apply(conf, ib->cfg->kafka, ib->cfg->n_kafka, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, sink_log_cb);
    rd_kafka_conf_set_error_cb(conf, kafka_error);
    rd_kafka_conf_set_opaque(conf, ib);
    return conf;
}

int inbox_has_prop(const struct inbox_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].name, name) == 0)
            return 1;
    return 0;
}

int inbox_make_kafka(struct inbox *ib, char *err, size_t errlen)
{
    free(ib->kafka_secrets_seen); /* taken before they are read: a change in between recreates once more */
    ib->kafka_secrets_seen = config_kafka_file_snapshot(ib->cfg->kafka, ib->cfg->n_kafka);
    ib->kafka_recreate = 0;
    rd_kafka_conf_t *conf = kafka_conf(ib, err, errlen);
    if (!conf)
        return -1;
    char kerr[512], group[300];
    snprintf(group, sizeof(group), "outbox-inbox.%s", ib->cfg->name);
    if (!inbox_has_prop(ib->cfg, "group.id"))
        rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof(kerr));
    if (!inbox_has_prop(ib->cfg, "auto.offset.reset")) /* a new group starts at the oldest message kept */
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", kerr, sizeof(kerr));
    /* commits carry only what was applied: offsets are stored by hand, after the commit */
    rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "statistics.interval.ms", "5000", kerr, sizeof(kerr));
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    sink_warn_old_scram(conf);
    if (!(ib->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the consumer: %s", kerr);
    }
    rd_kafka_poll_set_consumer(ib->consumer);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(4);
    char *list = xstrdup(ib->cfg->topics), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        rd_kafka_topic_partition_list_add(subs, t, RD_KAFKA_PARTITION_UA);
    free(list);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(ib->consumer, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (e)
        return set_err(err, errlen, "kafka: cannot subscribe to %s: %s", ib->cfg->topics, rd_kafka_err2str(e));
    if (!ib->cfg->dead_letter_topic[0])
        return 0;
    if (!(conf = kafka_conf(ib, err, errlen)))
        return -1;
    rd_kafka_conf_set(conf, "enable.idempotence", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_report);
    if (!(ib->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the dead-letter producer: %s", kerr);
    }
    return 0;
}

/* Destroys the consumer and the dead-letter producer and makes them again (a rotated
 * secret). The consumer never authenticated, so it is destroyed without the close (which
 * would wait for a group it cannot reach); offsets stored since the last commit are
 * delivered again and counted as duplicates. */
int inbox_remake_kafka(struct inbox *ib, char *err, size_t errlen)
{
    if (ib->consumer) {
        rd_kafka_destroy_flags(ib->consumer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        ib->consumer = NULL;
    }
    if (ib->producer) {
        rd_kafka_destroy(ib->producer);
        ib->producer = NULL;
    }
    ib->n_lags = ib->assigned = 0;
    return inbox_make_kafka(ib, err, errlen);
}
