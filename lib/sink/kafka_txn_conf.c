/* Exactly-once (kafka_txn.c): the transactional producer's settings, and what a broker's
 * error asks of the operator (an ACL, a transaction coordinator). */
#include <stdio.h>
#include <string.h>

#include "sink/kafka_int.h"

#define TXN_MIN_RDKAFKA 0x020002ff /* librdkafka 2.0.2: the oldest this mode is tested with (Debian 12's) */

/* The user's own value of a Kafka property, or NULL. */
static const char *user_prop(const struct sink_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->n_kafka; i++)
        if (strcmp(cfg->kafka[i].name, name) == 0)
            return cfg->kafka[i].value;
    return NULL;
}

int kafka_txn_conf(const struct kafka_sink *sk, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    const struct sink_config *cfg = sk->cfg;
    char v[32], kerr[512];
    if (rd_kafka_version() < TXN_MIN_RDKAFKA)
        return set_err(err, errlen, "OUTBOX_EXACTLY_ONCE: needs librdkafka 2.0.2 or later; this "
                       "build runs %s", rd_kafka_version_str());
    snprintf(v, sizeof(v), "%d", cfg->transaction_timeout_ms);
    const char *txn_timeout = user_prop(cfg, "transaction.timeout.ms");
    const char *msg_timeout = user_prop(cfg, "message.timeout.ms");
    const char *set[][2] = {{"transactional.id", cfg->transactional_id},
                            {"transaction.timeout.ms", txn_timeout ? txn_timeout : v},
                            /* a message not delivered within its transaction aborts it */
                            {"message.timeout.ms", msg_timeout ? msg_timeout : txn_timeout ? txn_timeout : v}};
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
