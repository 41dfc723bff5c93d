/* Unit tests: Kafka errors classified as the row's, the topic's, the producer's or
 * transient, and the claim's per-partition quota. */
#include "relay/relay_int.h"
#include "sink/kafka.h"
#include "tap.h"

int main(void)
{
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE), FAILURE_ROW, "too large: the row's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_INVALID_RECORD), FAILURE_ROW, "invalid record: the row's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_INVALID_MSG), FAILURE_ROW, "corrupt message: the row's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP), FAILURE_ROW,
           "timestamp out of the broker's bounds: the row's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_UNSUPPORTED_COMPRESSION_TYPE), FAILURE_TOPIC,
           "compression the topic refuses: the topic's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED), FAILURE_TOPIC, "ACL: the topic's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART), FAILURE_TOPIC, "unknown topic (broker)");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC), FAILURE_TOPIC, "unknown topic (client)");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_POLICY_VIOLATION), FAILURE_TOPIC, "policy: the topic's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__PURGE_QUEUE), FAILURE_PRODUCER, "purged: not the row's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__FATAL), FAILURE_PRODUCER, "fatal: the producer's");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT), FAILURE_TRANSIENT, "timed out: transient");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS), FAILURE_TRANSIENT, "ISR short: transient");
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__TRANSPORT), FAILURE_TRANSIENT, "transport: transient");
#if RD_KAFKA_VERSION >= 0x020400ff
    /* librdkafka 2.4.0 and later (the image's 2.8.0; its build stage runs these tests): the
     * records of a batch that are not the broker's culprits (KIP-467) */
    is_int(sink_kafka_classify(RD_KAFKA_RESP_ERR__INVALID_DIFFERENT_RECORD), FAILURE_TRANSIENT,
           "another record of the batch was invalid: transient");
#endif

    is_int(claim_quota(1000, 64), 20, "64 partitions, batch 1000: a quarter above the fair share (16)");
    is_int(claim_quota(1000, 1), 1250, "one partition: the whole batch fits");
    is_int(claim_quota(1000, 200), 16, "never below 16 rows");
    is_int(claim_quota(1, 64), 1, "isolating one row: the limit is 1");
    is_int(claim_quota(10, 64), 10, "a batch under 16: the batch");
    is_int(claim_quota(1000, 0), 1250, "no partition count: as one");
    return done();
}
