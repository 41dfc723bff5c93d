/* The Kafka source (source.h): a consumer in a group whose offsets are stored by hand after
 * each commit, an idempotent producer for dead letters, their callbacks (log, errors,
 * statistics, rebalances), and making them again when a credentials file changes. */
#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

#include "core/kafka.h"
#include "core/log.h"
#include "core/util.h"
#include "source/source_kafka.h"

#define MAX_LAG_PARTS 512

struct kafka_source {
    struct source base; /* first */
    const struct source_config *cfg;
    rd_kafka_t *consumer, *producer;
    char *secrets_seen; /* the file-read Kafka settings when the clients were made, or NULL */
    int recreate;       /* an authentication failure after such a file changed */
    struct source_lag lags[MAX_LAG_PARTS];
    int n_lags, assigned;
    int dlq_done; /* the dead letter in flight: its delivery report came, with dlq_err */
    rd_kafka_resp_err_t dlq_err;
};


static const struct source_ops kafka_ops;

static void kafka_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct kafka_source *ks = opaque;
    if (err != RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        log_warn("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
        return;
    }
    log_error("kafka: authentication failed: %s%s", reason, kafka_auth_hint(rd_kafka_conf(rk)));
    /* a secret read from a file (INBOX_KAFKA_SASL_PASSWORD_FILE) changed since the clients
     * were made: a rotated password; the loop makes them again, reading it anew */
    if (!ks->recreate && settings_kafka_files_changed(ks->cfg->kafka, ks->cfg->n_kafka, ks->secrets_seen)) {
        log_info("kafka: a Kafka setting read from a file changed since the consumer was made: "
                 "making the consumer again with it");
        ks->recreate = 1;
    }
}

/* Consumer lag per partition from librdkafka's statistics (served on the loop's poll). */
static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    struct kafka_source *ks = opaque;
    json_t *doc = json_loadb(json, len, 0, NULL);
    json_t *topics = json_object_get(doc, "topics");
    const char *tname;
    json_t *t;
    ks->n_lags = 0;
    json_object_foreach(topics, tname, t) {
        const char *pname;
        json_t *p;
        json_object_foreach(json_object_get(t, "partitions"), pname, p) {
            json_int_t lag = json_integer_value(json_object_get(p, "consumer_lag"));
            int32_t part = (int32_t)atoi(pname);
            const char *state = json_string_value(json_object_get(p, "fetch_state"));
            if (part < 0 || !state || strcmp(state, "active") != 0 || ks->n_lags == MAX_LAG_PARTS)
                continue;
            struct source_lag *l = &ks->lags[ks->n_lags++];
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
    struct kafka_source *ks = opaque;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        log_info("kafka: %d partitions assigned", parts->cnt);
        rd_kafka_assign(rk, parts);
        ks->assigned = parts->cnt;
    } else {
        rd_kafka_resp_err_t c = rd_kafka_commit(rk, NULL, 0);
        if (c && c != RD_KAFKA_RESP_ERR__NO_OFFSET)
            log_warn("kafka: committing offsets before a rebalance: %s", rd_kafka_err2str(c));
        log_info("kafka: %d partitions revoked", parts->cnt);
        rd_kafka_assign(rk, NULL);
        ks->assigned = 0;
        ks->n_lags = 0;
    }
}

static void dlq_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct kafka_source *ks = opaque;
    ks->dlq_done = 1;
    ks->dlq_err = m->err;
}

static rd_kafka_conf_t *kafka_conf(struct kafka_source *ks, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (settings_kafka_apply(conf, ks->cfg->kafka, ks->cfg->n_kafka, err, errlen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    rd_kafka_conf_set_error_cb(conf, kafka_error);
    rd_kafka_conf_set_opaque(conf, ks);
    return conf;
}

static int make_clients(struct kafka_source *ks, char *err, size_t errlen)
{
    free(ks->secrets_seen); /* taken before they are read: a change in between recreates once more */
    ks->secrets_seen = settings_kafka_file_snapshot(ks->cfg->kafka, ks->cfg->n_kafka);
    ks->recreate = 0;
    rd_kafka_conf_t *conf = kafka_conf(ks, err, errlen);
    if (!conf)
        return -1;
    char kerr[512], group[300];
    snprintf(group, sizeof(group), "outbox-inbox.%s", ks->cfg->name);
    if (!settings_kafka_has(ks->cfg->kafka, ks->cfg->n_kafka, "group.id"))
        rd_kafka_conf_set(conf, "group.id", group, kerr, sizeof(kerr));
    /* committed transactions' messages only (the relay's OUTBOX_EXACTLY_ONCE aborts some);
     * librdkafka's default, set so that it is seen here (a user's setting wins) */
    if (!settings_kafka_has(ks->cfg->kafka, ks->cfg->n_kafka, "isolation.level"))
        rd_kafka_conf_set(conf, "isolation.level", "read_committed", kerr, sizeof(kerr));
    if (!settings_kafka_has(ks->cfg->kafka, ks->cfg->n_kafka, "auto.offset.reset")) /* a new group starts at the oldest message kept */
        rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", kerr, sizeof(kerr));
    /* commits carry only what was applied: offsets are stored by hand, after the commit */
    rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "enable.auto.commit", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set(conf, "statistics.interval.ms", "5000", kerr, sizeof(kerr));
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
    rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
    kafka_warn_old_scram(conf);
    if (!(ks->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the consumer: %s", kerr);
    }
    rd_kafka_poll_set_consumer(ks->consumer);
    rd_kafka_topic_partition_list_t *subs = rd_kafka_topic_partition_list_new(4);
    char *list = xstrdup(ks->cfg->topics), *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
        rd_kafka_topic_partition_list_add(subs, t, RD_KAFKA_PARTITION_UA);
    free(list);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(ks->consumer, subs);
    rd_kafka_topic_partition_list_destroy(subs);
    if (e)
        return set_err(err, errlen, "kafka: cannot subscribe to %s: %s", ks->cfg->topics, rd_kafka_err2str(e));
    if (!ks->cfg->dead_letter_topic[0])
        return 0;
    if (!(conf = kafka_conf(ks, err, errlen)))
        return -1;
    rd_kafka_conf_set(conf, "enable.idempotence", "true", kerr, sizeof(kerr));
    rd_kafka_conf_set_dr_msg_cb(conf, dlq_report);
    if (!(ks->producer = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr)))) {
        rd_kafka_conf_destroy(conf);
        return set_err(err, errlen, "kafka: cannot create the dead-letter producer: %s", kerr);
    }
    return 0;
}

/* Destroys the consumer and the dead-letter producer and makes them again (a rotated
 * secret). The consumer never authenticated, so it is destroyed without the close (which
 * would wait for a group it cannot reach); offsets stored since the last commit are
 * delivered again and counted as duplicates. */
static int k_remake(struct source *base, char *err, size_t errlen)
{
    struct kafka_source *ks = (struct kafka_source *)base;
    if (ks->consumer) {
        rd_kafka_destroy_flags(ks->consumer, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        ks->consumer = NULL;
    }
    if (ks->producer) {
        rd_kafka_destroy(ks->producer);
        ks->producer = NULL;
    }
    ks->n_lags = ks->assigned = 0;
    return make_clients(ks, err, errlen);
}

static int k_remake_wanted(const struct source *base)
{
    return ((const struct kafka_source *)base)->recreate;
}

/* Closes the consumer (committing the stored offsets and leaving the group), flushes the
 * dead-letter producer, and frees everything. */
static void k_free(struct source *base)
{
    struct kafka_source *ks = (struct kafka_source *)base;
    if (ks->consumer) {
        rd_kafka_resp_err_t e = rd_kafka_consumer_close(ks->consumer);
        if (e)
            log_warn("kafka: closing the consumer: %s", rd_kafka_err2str(e));
        rd_kafka_destroy(ks->consumer);
    }
    if (ks->producer) {
        rd_kafka_flush(ks->producer, 5000);
        rd_kafka_destroy(ks->producer);
    }
    free(ks->secrets_seen);
    free(ks);
}

/* What the consumer has ready, up to max, waiting only for the first. */
static int k_poll(struct source *base, struct source_msg *out, int max, int wait_ms)
{
    struct kafka_source *ks = (struct kafka_source *)base;
    int n = 0;
    for (rd_kafka_message_t *m; n < max && (m = rd_kafka_consumer_poll(ks->consumer, n ? 0 : wait_ms));) {
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                log_warn("kafka: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        struct source_msg *sm = &out[n++];
        memset(sm, 0, sizeof(*sm));
        sm->native = m;
        sm->topic = rd_kafka_topic_name(m->rkt);
        sm->partition = m->partition;
        sm->offset = m->offset;
        sm->key = m->key;
        sm->key_len = m->key_len;
        sm->value = m->payload;
        sm->value_len = m->len;
        rd_kafka_timestamp_type_t tstype;
        int64_t ts = rd_kafka_message_timestamp(m, &tstype);
        sm->timestamp_ms = ts > 0 ? ts : 0;
        rd_kafka_headers_t *hdrs;
        if (rd_kafka_message_headers(m, &hdrs) != 0)
            continue;
        size_t cnt = rd_kafka_header_cnt(hdrs);
        struct source_header *h = xcalloc(cnt ? cnt : 1, sizeof(*h));
        const void *val;
        for (size_t i = 0; i < cnt && rd_kafka_header_get_all(hdrs, i, &h[i].name, &val, &h[i].len) == 0; i++)
            h[i].value = val;
        sm->headers = h;
        sm->n_headers = cnt;
    }
    return n;
}

static void k_release(struct source *base, struct source_msg *msgs, int n)
{
    (void)base;
    for (int i = 0; i < n; i++) {
        free((void *)msgs[i].headers);
        rd_kafka_message_destroy(msgs[i].native);
    }
}

/* The offsets after msgs[0..n), all applied: a partition's later message stores over an
 * earlier one. A partition revoked meanwhile refuses: its new owner reads the message
 * again, a duplicate. */
static void k_done(struct source *base, const struct source_msg *msgs, int n)
{
    struct kafka_source *ks = (struct kafka_source *)base;
    if (n == 0)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, msgs[i].topic, msgs[i].partition)->offset = msgs[i].offset + 1;
    rd_kafka_resp_err_t e = rd_kafka_offsets_store(ks->consumer, l);
    if (e)
        log_debug("kafka: offsets not stored: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);
}

static int k_dead_letter(struct source *base, const struct source_msg *m, const struct source_header *extra,
                         size_t n_extra, int (*wait)(void *ctx), void *ctx, char *err, size_t errlen)
{
    struct kafka_source *ks = (struct kafka_source *)base;
    rd_kafka_headers_t *h = rd_kafka_headers_new(m->n_headers + n_extra);
    for (size_t i = 0; i < m->n_headers; i++)
        rd_kafka_header_add(h, m->headers[i].name, -1, m->headers[i].value, (ssize_t)m->headers[i].len);
    for (size_t i = 0; i < n_extra; i++)
        rd_kafka_header_add(h, extra[i].name, -1, extra[i].value, (ssize_t)extra[i].len);
    ks->dlq_done = 0;
    rd_kafka_resp_err_t e = rd_kafka_producev(
        ks->producer, RD_KAFKA_V_TOPIC(ks->cfg->dead_letter_topic), RD_KAFKA_V_KEY(m->key, m->key_len),
        RD_KAFKA_V_VALUE((void *)m->value, m->value_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        return set_err(err, errlen, "%s", rd_kafka_err2str(e));
    }
    while (!ks->dlq_done) {
        rd_kafka_poll(ks->producer, 100);
        if (!ks->dlq_done && wait(ctx))
            return 1;
    }
    return ks->dlq_err ? set_err(err, errlen, "%s", rd_kafka_err2str(ks->dlq_err)) : 0;
}

static int k_assigned(const struct source *base)
{
    return ((const struct kafka_source *)base)->assigned;
}

static const struct source_lag *k_lags(const struct source *base, int *n_lags)
{
    const struct kafka_source *ks = (const struct kafka_source *)base;
    *n_lags = ks->n_lags;
    return ks->lags;
}

static const struct source_ops kafka_ops = {
    .name = "kafka",
    .free = k_free,
    .poll = k_poll,
    .release = k_release,
    .done = k_done,
    .dead_letter = k_dead_letter,
    .remake_wanted = k_remake_wanted,
    .remake = k_remake,
    .assigned = k_assigned,
    .lags = k_lags,
};

struct source *source_kafka_new(const struct source_config *cfg, char *err, size_t errlen)
{
    struct kafka_source *ks = xcalloc(1, sizeof(*ks));
    ks->base.ops = &kafka_ops;
    ks->cfg = cfg;
    if (make_clients(ks, err, errlen) != 0) {
        k_free(&ks->base);
        return NULL;
    }
    return &ks->base;
}
