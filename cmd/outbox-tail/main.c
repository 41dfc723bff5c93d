/* outbox-tail: prints the messages arriving on a topic with their key and headers, from
 * every partition, and for a CloudEvents binary-mode message (a ce_specversion header) a
 * second line with its attributes. For the demo and for operators checking what the relay
 * publishes.
 *   outbox-tail --bootstrap HOST:PORT --topic NAME [--from-beginning] [--read-uncommitted]
 * Kafka messages are read as a read_committed consumer sees them (aborted transactions'
 * messages left out, an open transaction's held back); --read-uncommitted shows them all.
 *   outbox-tail --rabbitmq URL [--exchange NAME] --topic KEY
 * With RabbitMQ it binds a queue of its own (exclusive: gone when it exits; it takes no
 * message from anyone else's queue) to the exchange (default outbox) with the binding key KEY
 * (a routing key, or a pattern: orders.#) and prints what arrives from then on. */
#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/amqp.h"
#include "core/kafka.h"

static volatile sig_atomic_t stop;

/* The CloudEvents attributes of a binary-mode message (Kafka protocol binding: ce_<name>
 * headers, datacontenttype in content-type), the required ones first, then the optional
 * ones and extensions in the message's order: "  cloudevent specversion=1.0 id=... ". */
static void print_cloudevent(rd_kafka_headers_t *hdrs)
{
    const void *val;
    size_t len;
    if (rd_kafka_header_get_last(hdrs, "ce_specversion", &val, &len) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    static const char *const first[] = {"ce_specversion", "ce_id", "ce_source", "ce_type"};
    printf("  cloudevent");
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++)
        if (rd_kafka_header_get_last(hdrs, first[i], &val, &len) == RD_KAFKA_RESP_ERR_NO_ERROR)
            printf(" %s=%.*s", first[i] + 3, (int)len, val ? (const char *)val : "");
    const char *name;
    for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &len) == 0; i++) {
        int required = 0;
        for (size_t j = 0; j < sizeof(first) / sizeof(first[0]); j++)
            required |= strcmp(name, first[j]) == 0;
        if (!required && strncmp(name, "ce_", 3) == 0)
            printf(" %s=%.*s", name + 3, (int)len, val ? (const char *)val : "");
        else if (strcmp(name, "content-type") == 0)
            printf(" datacontenttype=%.*s", (int)len, val ? (const char *)val : "");
    }
    printf("\n");
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static int amqp_failed(amqp_connection_state_t conn, const char *what)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    char why[512];
    rmq_reply_str(r, why, sizeof(why));
    fprintf(stderr, "outbox-tail: %s: %s\n", what, why);
    return 1;
}

static int tail_rabbitmq(const char *url, const char *exchange, const char *key)
{
    char err[768];
    amqp_connection_state_t conn = rmq_connect(url, NULL, NULL, 0, 15, err, sizeof(err));
    if (!conn) {
        fprintf(stderr, "outbox-tail: %s\n", err);
        return 2;
    }
    int rc = 2;
    amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                          amqp_empty_table);
    if (amqp_failed(conn, "declaring the exchange (a durable topic exchange, as the relay declares it)"))
        goto out;
    amqp_queue_declare_ok_t *q = amqp_queue_declare(conn, 1, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
    if (amqp_failed(conn, "declaring a queue") || !q)
        goto out;
    amqp_bytes_t queue = amqp_bytes_malloc_dup(q->queue);
    amqp_queue_bind(conn, 1, queue, amqp_cstring_bytes(exchange), amqp_cstring_bytes(key), amqp_empty_table);
    if (!amqp_failed(conn, "binding") &&
        (amqp_basic_consume(conn, 1, queue, amqp_empty_bytes, 0, 1, 1, amqp_empty_table), !amqp_failed(conn, "consuming"))) {
        fprintf(stderr, "outbox-tail: reading exchange %s, binding key %s\n", exchange, key);
        rc = 0;
    }
    amqp_bytes_free(queue);
    while (rc == 0 && !stop) {
        amqp_envelope_t env;
        struct timeval tv = {0, 500000};
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
            continue;
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            fprintf(stderr, "outbox-tail: the connection ended\n");
            rc = 1;
            break;
        }
        const amqp_basic_properties_t *p = &env.message.properties;
        printf("%.*s", (int)env.routing_key.len, (const char *)env.routing_key.bytes);
        if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
            printf(" message_id=%.*s", (int)p->message_id.len, (const char *)p->message_id.bytes);
        for (int i = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) && i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            if (e->value.kind == AMQP_FIELD_KIND_UTF8)
                printf(" %.*s=%.*s", (int)e->key.len, (const char *)e->key.bytes, (int)e->value.value.bytes.len,
                       (const char *)e->value.value.bytes.bytes);
        }
        printf(" value=%.*s\n", (int)env.message.body.len, (const char *)env.message.body.bytes);
        fflush(stdout);
        amqp_destroy_envelope(&env);
    }
out:
    amqp_destroy_connection(conn);
    return rc;
}

int main(int argc, char **argv)
{
    const char *bootstrap = NULL, *topic = NULL, *rabbitmq = NULL, *exchange = "outbox";
    const char *isolation = "read_committed";
    int from_beginning = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bootstrap") && i + 1 < argc)
            bootstrap = argv[++i];
        else if (!strcmp(argv[i], "--rabbitmq") && i + 1 < argc)
            rabbitmq = argv[++i];
        else if (!strcmp(argv[i], "--exchange") && i + 1 < argc)
            exchange = argv[++i];
        else if (!strcmp(argv[i], "--topic") && i + 1 < argc)
            topic = argv[++i];
        else if (!strcmp(argv[i], "--from-beginning"))
            from_beginning = 1;
        else if (!strcmp(argv[i], "--read-uncommitted"))
            isolation = "read_uncommitted";
        else {
            fprintf(stderr, "usage: outbox-tail --bootstrap HOST:PORT --topic NAME [--from-beginning] "
                            "[--read-uncommitted]\n"
                            "       outbox-tail --rabbitmq URL [--exchange NAME] --topic KEY\n");
            return 2;
        }
    }
    if (rabbitmq && topic) {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        return tail_rabbitmq(rabbitmq, exchange, topic);
    }
    if (!bootstrap || !topic) {
        fprintf(stderr, "outbox-tail: --bootstrap and --topic are required\n");
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    char err[512];
    rd_kafka_t *rk = kafka_reader_new(bootstrap, "outbox-tail", 0, isolation, err, sizeof(err));
    if (!rk) {
        fprintf(stderr, "outbox-tail: %s\n", err);
        return 2;
    }
    /* Wait for the topic (the relay creates it with its first message). */
    int partitions = kafka_wait_assign_all(rk, topic, from_beginning ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_END,
                                           1000, &stop);
    fprintf(stderr, "outbox-tail: reading %s (%d partitions)\n", topic, partitions);

    while (!stop) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        if (!m->err) {
            printf("%s[%d]@%lld key=%.*s", topic, m->partition, (long long)m->offset,
                   (int)m->key_len, (const char *)m->key);
            rd_kafka_headers_t *hdrs;
            if (rd_kafka_message_headers(m, &hdrs) == 0) {
                const char *name;
                const void *val;
                size_t len;
                for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &len) == 0; i++)
                    printf(" %s=%.*s", name, (int)len, (const char *)val);
            }
            printf(" value=%.*s\n", (int)m->len, (const char *)m->payload);
            if (rd_kafka_message_headers(m, &hdrs) == 0)
                print_cloudevent(hdrs);
            fflush(stdout);
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return 0;
}
