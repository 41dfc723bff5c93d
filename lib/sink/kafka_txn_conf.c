/* Exactly-once (kafka_txn.c): the transactional producer's settings, and what a broker's
 * error asks of the operator (an ACL, a transaction coordinator). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kafka.h"
#include "core/log.h"
#include "core/settings.h"
#include "core/util.h"
#include "sink/kafka_int.h"

#define PROBE_MS 20000 /* --check-config: how long init_transactions is tried */
#define TXN_MIN_RDKAFKA 0x020002ff /* librdkafka 2.0.2: the oldest this mode is tested with (Debian 12's) */

/* The user's own value of a Kafka property, or NULL. */
static const char *user_prop(const struct sink_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].name, name) == 0)
            return cfg->kafka[i].value;
    return NULL;
}

int kafka_txn_conf(const struct sink_config *cfg, const char *id, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    char v[32], kerr[512];
    if (rd_kafka_version() < TXN_MIN_RDKAFKA)
        return set_err(err, errlen, "OUTBOX_EXACTLY_ONCE: needs librdkafka 2.0.2 or later; this "
                       "build runs %s", rd_kafka_version_str());
    snprintf(v, sizeof(v), "%d", cfg->transaction_timeout_ms);
    const char *txn_timeout = user_prop(cfg, "transaction.timeout.ms");
    const char *msg_timeout = user_prop(cfg, "message.timeout.ms");
    const char *linger = user_prop(cfg, "linger.ms");
    if (!linger)
        linger = user_prop(cfg, "queue.buffering.max.ms"); /* (its alias) */
    const char *set[][2] = {{"transactional.id", id},
                            {"transaction.timeout.ms", txn_timeout ? txn_timeout : v},
                            /* a message not delivered within its transaction aborts it */
                            {"message.timeout.ms", msg_timeout ? msg_timeout : txn_timeout ? txn_timeout : v},
                            /* no wait for more messages: a transaction ends once its messages
                             * are acknowledged, and it bounds the batches anyway (at 1,000
                             * events/s, linger.ms=2 kept each open longer: commit -> consumed
                             * p50 about 3 ms and p99 about 8 ms more; docs/PERFORMANCE.md) */
                            {"linger.ms", linger ? linger : "0"}};
    for (size_t i = 0; i < ARRAY_LEN(set); i++)
        if (rd_kafka_conf_set(conf, set[i][0], set[i][1], kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK)
            return set_err(err, errlen, "exactly-once: %s: %s", set[i][0], kerr);
    return 0;
}

const char *kafka_txn_hint(const struct sink_config *cfg, int code, char *buf, size_t len)
{
    buf[0] = '\0';
    switch (code) {
    case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        snprintf(buf, len, "; the relay's principal needs WRITE and DESCRIBE on TransactionalId %s "
                 "(a prefixed ACL on OUTBOX_TRANSACTIONAL_ID_PREFIX covers every table; "
                 "docs/EXACTLY_ONCE.md)", cfg->transactional_id);
        break;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        snprintf(buf, len, "; the relay's principal needs READ, WRITE and DESCRIBE on the progress "
                 "topic %s, and WRITE and DESCRIBE on the topics it publishes to (docs/EXACTLY_ONCE.md)",
                 cfg->progress_topic);
        break;
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        snprintf(buf, len, "; the relay's principal lacks a cluster ACL: IdempotentWrite (brokers "
                 "before Kafka 3.0), or CREATE to make the progress topic %s (or make it yourself: "
                 "docs/EXACTLY_ONCE.md)", cfg->progress_topic);
        break;
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
        snprintf(buf, len, "; no transaction coordinator answered: the cluster cannot keep "
                 "transactions while its transaction state log (__transaction_state) has fewer "
                 "live brokers than transaction.state.log.replication.factor or "
                 "transaction.state.log.min.isr, or the broker cannot be reached");
        break;
    case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
        snprintf(buf, len, "; the broker does not support transactions (Kafka 0.11 or later)");
        break;
    default:
        break;
    }
    return buf;
}

/* --check-config: the TransactionalId's ACL and a transaction coordinator, through an id of
 * the check's own, the relay's with ".check": every prefixed ACL that covers the relay's id
 * covers it, and fencing it fences no relay (the broker keeps it, idle, for
 * transactional.id.expiration.ms). 0, or -1 with err. */
int kafka_txn_probe(const struct sink_config *cfg, char *err, size_t errlen)
{
    char *id = xasprintf("%s.check", cfg->transactional_id), kerr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *p = NULL;
    if (settings_kafka_apply(conf, cfg->kafka, cfg->n_kafka, err, errlen) == 0 &&
        kafka_txn_conf(cfg, id, conf, err, errlen) == 0) {
        rd_kafka_conf_set(conf, "client.id", "outbox-relay-check", kerr, sizeof(kerr));
        rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
        p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr));
        if (!p)
            set_err(err, errlen, "the check's producer: %s", kerr);
    }
    if (!p) {
        rd_kafka_conf_destroy(conf);
        free(id);
        return -1;
    }
    /* called again while it times out or the coordinator loads, as the relay does, up to 20 s */
    int64_t start = mono_ms();
    rd_kafka_error_t *e;
    while ((e = rd_kafka_init_transactions(p, (int)(PROBE_MS - (mono_ms() - start)))) &&
           rd_kafka_error_is_retriable(e) && mono_ms() - start < PROBE_MS - 100)
        rd_kafka_error_destroy(e);
    if (e && rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED) {
        set_err(err, errlen, "init_transactions with the TransactionalId %s (the relay's %s with "
                "\".check\") was refused: %s; the relay's principal needs WRITE and DESCRIBE on "
                "TransactionalId %s: a prefixed ACL on OUTBOX_TRANSACTIONAL_ID_PREFIX covers both ids, a "
                "literal ACL on the relay's id alone does not cover the check's (grant it too; "
                "docs/EXACTLY_ONCE.md)", id, cfg->transactional_id, rd_kafka_error_string(e),
                cfg->transactional_id);
    } else if (e) {
        char hint[600];
        set_err(err, errlen, "init_transactions with the TransactionalId %s (the relay's %s with "
                "\".check\") failed after %lld ms: %s%s", id, cfg->transactional_id,
                (long long)(mono_ms() - start), rd_kafka_error_string(e),
                kafka_txn_hint(cfg, rd_kafka_error_code(e), hint, sizeof(hint)));
    } else {
        log_info("check-config: exactly-once: the TransactionalId %s (the relay's %s with \".check\") "
                 "may be used: WRITE and DESCRIBE granted, a transaction coordinator answered in %lld ms",
                 id, cfg->transactional_id, (long long)(mono_ms() - start));
    }
    int rc = e ? -1 : 0;
    if (e)
        rd_kafka_error_destroy(e);
    rd_kafka_destroy(p);
    free(id);
    return rc;
}
