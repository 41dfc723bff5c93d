/* What the RabbitMQ sink and outbox-inbox's RabbitMQ source share: reading an amqp:// or
 * amqps:// URI, connecting (TLS with a CA, optionally a client certificate; peer and host name
 * always verified), logging in, opening channel 1, and saying what a broker's reply means. */
#ifndef OUTBOX_CORE_AMQP_H
#define OUTBOX_CORE_AMQP_H

#include <stddef.h>

#ifdef OUTBOX_RABBITMQ_C_HEADERS
#include <rabbitmq-c/amqp.h> /* librabbitmq 0.12 and later (Debian 13: 0.15), meson.build */
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h> /* librabbitmq 0.11 (Debian 12) */
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif

/* TLS files for amqps:// (NULL or "": none; no CA file: the system's CAs). */
struct rmq_tls {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
};

/* A URI librabbitmq reads (amqp://user:password@host:port/vhost, or amqps://). 0 or -1 with
 * err (the password never in it). */
int rmq_check_url(const char *url, char *err, size_t errlen);
/* Connected, logged in (client_props may be NULL), channel 1 open; NULL with err, which names
 * host, port, user and vhost but never the password. timeout_s bounds the connection, the
 * handshake and every RPC. */
amqp_connection_state_t rmq_connect(const char *url, const struct rmq_tls *tls, const amqp_table_t *client_props,
                                    int heartbeat_s, int timeout_s, char *err, size_t errlen);
/* A reply in words: the library's error, or the broker's close with its code and text. */
void rmq_reply_str(amqp_rpc_reply_t r, char *buf, size_t n);
/* The reply code of a channel or connection close, 0 for anything else. */
int rmq_reply_code(amqp_rpc_reply_t r);

#endif
