/* Exactly-once (kafka_txn.c), on the transactions' thread after the fence: this table's
 * last progress record, read with read_committed from the start of its partition of the
 * progress topic up to its end (compaction keeps it short), which a new producer's fence
 * has made the end of every transaction of this id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/kafka.h"
#include "core/log.h"
#include "core/settings.h"
#include "sink/kafka_int.h"

#define READ_TIMEOUT_MS 30000

/* The progress topic's cleanup.policy must compact: with delete alone, retention would
 * remove a table's last record and a takeover would publish its rows again. 0, or -1 with
 * msg; a policy that cannot be read is logged, not refused. *min_isr: its
 * min.insync.replicas, -1 when not read. */
static int check_policy(rd_kafka_t *c, const char *topic, int *min_isr, int *warned, char *msg, size_t msglen)
{
    rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
    rd_kafka_queue_t *q = rd_kafka_queue_new(c);
    rd_kafka_DescribeConfigs(c, &res, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 3000);
    const rd_kafka_DescribeConfigs_result_t *r = ev ? rd_kafka_event_DescribeConfigs_result(ev) : NULL;
    size_t n = 0, nconf = 0;
    const rd_kafka_ConfigResource_t **rs = r ? rd_kafka_DescribeConfigs_result_resources(r, &n) : NULL;
    const rd_kafka_ConfigEntry_t **entries = n == 1 ? rd_kafka_ConfigResource_configs(rs[0], &nconf) : NULL;
    const char *policy = NULL;
    *min_isr = -1;
    for (size_t i = 0; i < nconf; i++) {
        const char *name = rd_kafka_ConfigEntry_name(entries[i]), *v = rd_kafka_ConfigEntry_value(entries[i]);
        if (strcmp(name, "cleanup.policy") == 0)
            policy = v;
        else if (strcmp(name, "min.insync.replicas") == 0 && v)
            *min_isr = atoi(v);
    }
    int rc = 0;
    if (!policy && !(*warned)++) { /* (DESCRIBE_CONFIGS not granted, say): said once, not refused */
        log_warn("kafka: the progress topic %s: its cleanup.policy could not be read (%s); it must "
                 "be compact (docs/EXACTLY_ONCE.md)", topic,
                 !ev ? "no answer" : rd_kafka_event_error(ev) ? rd_kafka_event_error_string(ev)
                 : n == 1 && rd_kafka_ConfigResource_error(rs[0]) ? rd_kafka_ConfigResource_error_string(rs[0])
                                                                   : "not in the answer");
    } else if (policy && !strstr(policy, "compact")) {
        snprintf(msg, msglen, "the progress topic %s has cleanup.policy=%s: retention would delete a "
                 "table's last progress record, and a relay taking the table over would then publish "
                 "its rows again; set cleanup.policy=compact (kafka-configs --alter --add-config "
                 "cleanup.policy=compact) or name another topic (OUTBOX_PROGRESS_TOPIC)", topic, policy);
        rc = -1;
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_ConfigResource_destroy(res);
    return rc;
}

/* The progress topic as the broker describes it: its partition count (0: it does not
 * exist) and its first partition's replicas; -1 with msg (the error, and what to grant). */
static int progress_describe(const struct sink_config *cfg, rd_kafka_t *c, int *replicas, char *msg,
                             size_t msglen)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(c, cfg->progress_topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(c, 0, rkt, &md, 3000);
    const rd_kafka_metadata_topic_t *mt = !e && md && md->topic_cnt == 1 ? &md->topics[0] : NULL;
    if (!e)
        e = mt ? mt->err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    int count = -1;
    *replicas = 0;
    if (!e) {
        count = mt->partition_cnt;
        *replicas = count > 0 ? mt->partitions[0].replica_cnt : 0;
    } else if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
        count = 0;
    } else {
        char hint[400];
        snprintf(msg, msglen, "the progress topic %s: %s%s", cfg->progress_topic, rd_kafka_err2str(e),
                 kafka_txn_hint(cfg, e, hint, sizeof(hint)));
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return count;
}

/* Until the topic just made has a leader in the consumer's metadata (about 2 s at most): the read
 * then starts at once. Else librdkafka asks for an unknown topic's leader again only at its
 * once-a-second scan (seen: every first read of a new progress topic took a second more). */
static void await_leader(struct kafka_sink *sk, const struct sink_config *cfg, rd_kafka_t *c)
{
    int64_t deadline = mono_ms() + 2000;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(c, cfg->progress_topic, NULL);
    for (;;) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(c, 0, rkt, &md, 500);
        int led = !e && md && md->topic_cnt == 1 && !md->topics[0].err && md->topics[0].partition_cnt > 0 &&
                  md->topics[0].partitions[0].leader >= 0;
        if (md)
            rd_kafka_metadata_destroy(md);
        if (led || mono_ms() >= deadline || kafka_txn_cancelled(sk->txn))
            break;
        usleep(20 * 1000);
    }
    rd_kafka_topic_destroy(rkt);
}

/* "N replicas and min.insync.replicas M" into buf; 1 when either is below what
 * docs/EXACTLY_ONCE.md asks (3 and 2; a min.insync.replicas that could not be read is not). */
static int replication(int replicas, int min_isr, char *buf, size_t len)
{
    char isr[32] = "not readable";
    if (min_isr >= 0)
        snprintf(isr, sizeof(isr), "%d", min_isr);
    snprintf(buf, len, "%d replica%s and min.insync.replicas %s", replicas, replicas == 1 ? "" : "s", isr);
    return replicas < 3 || (min_isr >= 0 && min_isr < 2);
}

/* The progress topic's partition that holds key, or -1 with msg; creates the topic
 * (compacted, one partition) when it does not exist, and then returns its partition 0: the
 * read of the new, empty topic fetches once like any other, so that a missing READ shows at
 * this takeover, not at the next one. */
static int progress_partition(struct kafka_sink *sk, rd_kafka_t *c, char *msg, size_t msglen)
{
    const struct sink_config *cfg = sk->cfg;
    int replicas, count = progress_describe(cfg, c, &replicas, msg, msglen);
    if (count == 0) {
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(cfg->progress_topic, 1, -1, msg, msglen);
        /* compacted, in small segments that are soon cleaned: the read at each takeover goes
         * from the partition's start */
        static const char *const topic_conf[][2] = {{"cleanup.policy", "compact"},
                                                    {"segment.bytes", "16777216"},
                                                    {"segment.ms", "600000"},
                                                    {"min.cleanable.dirty.ratio", "0.1"}};
        for (size_t i = 0; i < ARRAY_LEN(topic_conf); i++)
            rd_kafka_NewTopic_set_config(nt, topic_conf[i][0], topic_conf[i][1]);
        rd_kafka_queue_t *q = rd_kafka_queue_new(c);
        rd_kafka_CreateTopics(c, &nt, 1, NULL, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 5000);
        const rd_kafka_CreateTopics_result_t *res = ev ? rd_kafka_event_CreateTopics_result(ev) : NULL;
        size_t n = 0;
        const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &n) : NULL;
        int created = ev && !rd_kafka_event_error(ev) && n == 1 && !rd_kafka_topic_result_error(tr[0]);
        if (created) { /* else (made meanwhile by another relay too) read on the next try */
            log_info("kafka: created the progress topic %s (compacted, one partition, the broker's "
                     "default replication factor)", cfg->progress_topic);
            await_leader(sk, cfg, c);
        } else {
            char hint[400];
            int code = !ev ? 0 : rd_kafka_event_error(ev) ? (int)rd_kafka_event_error(ev)
                     : n == 1 ? (int)rd_kafka_topic_result_error(tr[0]) : 0;
            int denied = code == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                         code == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED;
            if (denied)
                snprintf(hint, sizeof(hint), "; the relay's principal needs CREATE on the progress topic "
                         "(or the cluster) to make it, or make it yourself (docs/EXACTLY_ONCE.md)");
            snprintf(msg, msglen, "creating the progress topic %s: %s%s", cfg->progress_topic,
                     !ev ? "no answer" : rd_kafka_event_error(ev) ? rd_kafka_event_error_string(ev)
                     : n == 1 ? rd_kafka_topic_result_error_string(tr[0]) : "no result",
                     denied ? hint : kafka_txn_hint(cfg, code, hint, sizeof(hint)));
        }
        if (ev)
            rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_NewTopic_destroy(nt);
        return created ? 0 : -1;
    }
    int min_isr;
    char repl[100];
    if (count < 0 || check_policy(c, cfg->progress_topic, &min_isr, &sk->txn->policy_warned, msg, msglen) != 0)
        return -1;
    if (replication(replicas, min_isr, repl, sizeof(repl)) && !sk->txn->replicas_warned) { /* (a test's single broker) */
        sk->txn->replicas_warned = 1;
        log_warn("kafka: the progress topic %s has %s: a broker's loss can lose a record it "
                 "acknowledged, and a takeover would then publish rows again (docs/EXACTLY_ONCE.md: "
                 "replication 3, min.insync.replicas 2)", cfg->progress_topic, repl);
    }
    return rd_kafka_msg_partitioner_murmur2_random(NULL, cfg->progress_key, strlen(cfg->progress_key),
                                                   count, NULL, NULL);
}

/* Whether the read reached end: the high watermark the first fetch after the fence saw
 * (not the end a read_committed consumer is told of, the last stable offset, which an open
 * transaction of another table holds back below this table's newer records; and a busy
 * partition may not tell of an end at all). The consumer's position passes transaction
 * markers and aborted batches too. */
static int read_done(rd_kafka_t *c, const char *topic, int32_t part, int64_t *end)
{
    int64_t lo = -1, hi = -1;
    if (*end < 0 && rd_kafka_get_watermark_offsets(c, topic, part, &lo, &hi) == 0 && hi >= 0) {
        *end = hi;
        if (lo >= hi) /* nothing in it */
            return 1;
    }
    if (*end < 0)
        return 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, part);
    int done = rd_kafka_position(c, l) == RD_KAFKA_RESP_ERR_NO_ERROR && l->elems[0].offset >= *end;
    rd_kafka_topic_partition_list_destroy(l);
    return done;
}

/* The progress read's consumer: the user's Kafka settings, read_committed, no group (the
 * partition is read with the simple consumer, so the principal needs no group ACL: with a
 * group.id librdkafka looks the group's coordinator up, which a cluster with ACLs refuses
 * without READ on the group; and nothing is committed). NULL with msg. */
static rd_kafka_t *progress_consumer(const struct sink_config *cfg, char *msg, size_t msglen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char kerr[512];
    if (settings_kafka_apply(conf, cfg->kafka, cfg->n_kafka, msg, msglen) != 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    static const char *const consumer[][2] = {{"isolation.level", "read_committed"},
                                              {"enable.partition.eof", "true"},
                                              /* the read's last fetch finds nothing more: its
                                               * answer comes after this wait (librdkafka's
                                               * default: 500 ms per acquisition) */
                                              {"fetch.wait.max.ms", "10"},
                                              {"fetch.error.backoff.ms", "50"},
                                              {"auto.offset.reset", "earliest"}, /* (below) */
                                              {"enable.auto.offset.store", "false"},
                                              {"auto.commit.enable", "false"},
                                              {"client.id", "outbox-relay-progress"}};
    for (size_t i = 0; i < ARRAY_LEN(consumer); i++)
        rd_kafka_conf_set(conf, consumer[i][0], consumer[i][1], kerr, sizeof(kerr));
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof(kerr));
    if (!c) {
        rd_kafka_conf_destroy(conf);
        snprintf(msg, msglen, "the progress record's consumer: %s", kerr);
    }
    return c;
}

int sink_kafka_txn_check(const struct sink_config *cfg, char *err, size_t errlen)
{
    char perr[1024];
    int probe = kafka_txn_probe(cfg, perr, sizeof(perr));
    rd_kafka_t *c = progress_consumer(cfg, err, errlen);
    if (!c) {
        if (probe != 0)
            log_error("check-config: exactly-once: %s", perr);
        return -1;
    }
    int replicas, min_isr, warned = 0, rc = 0, count = progress_describe(cfg, c, &replicas, err, errlen);
    char repl[100];
    if (count == 0)
        log_info("check-config: exactly-once: the progress topic %s does not exist yet; the relay "
                 "makes it (compacted, one partition), which needs CREATE on it", cfg->progress_topic);
    else if (count < 0 || check_policy(c, cfg->progress_topic, &min_isr, &warned, err, errlen) != 0)
        rc = -1;
    else if (replication(replicas, min_isr, repl, sizeof(repl)))
        log_warn("check-config: exactly-once: the progress topic %s: %s (below replication 3 and "
                 "min.insync.replicas 2: a broker's loss can lose a record; docs/EXACTLY_ONCE.md)",
                 cfg->progress_topic, repl);
    else
        log_info("check-config: exactly-once: the progress topic %s: %s", cfg->progress_topic, repl);
    rd_kafka_destroy(c);
    if (probe != 0) { /* both said: the topic's here, the TransactionalId's by the caller */
        if (rc != 0)
            log_error("check-config: exactly-once: %s", err);
        snprintf(err, errlen, "%s", perr);
        rc = -1;
    }
    return rc;
}

/* Reads this table's last progress record with read_committed, from the start of its
 * partition up to the end (compaction keeps it short). The end is the high watermark the
 * first fetch after the fence sees, not the first end the consumer is told of: that is the
 * last stable offset, which an open transaction of another table's relay holds back below
 * records of this table committed after it began. 0, or -1 with msg. */
int kafka_txn_read(struct kafka_sink *sk, char *msg, size_t msglen)
{
    struct kafka_txn *t = sk->txn;
    const struct sink_config *cfg = sk->cfg;
    rd_kafka_t *c = progress_consumer(cfg, msg, msglen);
    if (!c)
        return -1;
    int rc = -1, part = progress_partition(sk, c, msg, msglen), warned = 0;
    rd_kafka_message_t *last = NULL;
    rd_kafka_topic_t *rkt = part >= 0 ? rd_kafka_topic_new(c, cfg->progress_topic, NULL) : NULL;
    /* from offset 0, not OFFSET_BEGINNING: a logical offset is looked up first, and a lookup
     * made before the partition has joined its leader's thread is tried again only after
     * 500 ms (seen: one first read in three of a new progress topic); a start that
     * retention has moved past 0 is found by auto.offset.reset=earliest */
    if (rkt && rd_kafka_consume_start(rkt, part, 0) == -1) {
        snprintf(msg, msglen, "reading the progress record: %s", rd_kafka_err2str(rd_kafka_last_error()));
        rd_kafka_topic_destroy(rkt);
        rkt = NULL;
    }
    if (rkt) {
        int64_t deadline = mono_ms() + READ_TIMEOUT_MS, end = -1;
        size_t keylen = strlen(cfg->progress_key);
        t->progress_part = part;
        snprintf(msg, msglen, "the progress record was not read within %d ms (an open transaction of "
                 "another producer holds the partition's last stable offset back?)", READ_TIMEOUT_MS);
        while (mono_ms() < deadline && !kafka_txn_cancelled(t)) {
            rd_kafka_message_t *m = rd_kafka_consume(rkt, part, 100);
            if (m && !m->err && m->key_len == keylen && memcmp(m->key, cfg->progress_key, keylen) == 0) {
                if (last)
                    rd_kafka_message_destroy(last);
                last = m;
            } else if (m) {
                int denied = m->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
                if (denied) { /* (no READ on the progress topic: not worth the 30 s) */
                    char hint[400];
                    snprintf(msg, msglen, "reading the progress record: %s%s", rd_kafka_message_errstr(m),
                             kafka_txn_hint(cfg, m->err, hint, sizeof(hint)));
                } else if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && !warned++)
                    log_warn("kafka: reading the progress record: %s", rd_kafka_message_errstr(m));
                rd_kafka_message_destroy(m);
                if (denied)
                    break;
            }
            if (read_done(c, cfg->progress_topic, part, &end)) {
                rc = 0;
                break;
            }
        }
        rd_kafka_consume_stop(rkt, part);
        rd_kafka_topic_destroy(rkt);
    }
    if (rc == 0)
        msg[0] = '\0';
    if (rc == 0 && last && last->payload)
        rc = progress_parse(last->payload, last->len, &t->rec_id, &t->rec_event_id, &t->n_rec, msg, msglen);
    if (last)
        rd_kafka_message_destroy(last);
    rd_kafka_destroy(c);
    return rc;
}

