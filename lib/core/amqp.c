/* RabbitMQ connections (amqp.h). */
#include "core/amqp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int rmq_check_url(const char *url, char *err, size_t errlen)
{
    char *copy = xstrdup(url);
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    int rc = amqp_parse_url(copy, &info);
    free(copy);
    if (rc != AMQP_STATUS_OK)
        return set_err(err, errlen, "not an AMQP URI librabbitmq reads (%s); expected "
                       "amqp://user:password@host:port/vhost or amqps://...", amqp_error_string2(rc));
    return 0;
}

void rmq_reply_str(amqp_rpc_reply_t r, char *buf, size_t n)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(buf, n, "no error");
        return;
    case AMQP_RESPONSE_NONE:
        snprintf(buf, n, "no reply from the broker");
        return;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(buf, n, "%s", amqp_error_string2(r.library_error));
        return;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, n, "the broker closed the connection: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, n, "the broker closed the channel: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        } else {
            snprintf(buf, n, "unexpected broker method 0x%08x", (unsigned)r.reply.id);
        }
        return;
    }
    snprintf(buf, n, "unknown reply");
}

int rmq_reply_code(amqp_rpc_reply_t r)
{
    if (r.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION)
        return 0;
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
        return ((const amqp_connection_close_t *)r.reply.decoded)->reply_code;
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD)
        return ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
    return 0;
}

static int set_str(const char *s)
{
    return s && s[0];
}

/* The socket for info: TCP, or TLS with the files of tls. NULL with err. */
static amqp_socket_t *make_socket(amqp_connection_state_t conn, const struct amqp_connection_info *info,
                                  const struct rmq_tls *tls, char *err, size_t errlen)
{
    if (!info->ssl) {
        amqp_socket_t *sock = amqp_tcp_socket_new(conn);
        if (!sock)
            set_err(err, errlen, "cannot make a socket");
        return sock;
    }
    amqp_socket_t *sock = amqp_ssl_socket_new(conn);
    if (!sock) {
        set_err(err, errlen, "cannot make a TLS socket");
        return NULL;
    }
    amqp_ssl_socket_set_verify_peer(sock, 1);
    amqp_ssl_socket_set_verify_hostname(sock, 1);
    if (tls && set_str(tls->ca_file) && amqp_ssl_socket_set_cacert(sock, tls->ca_file) != AMQP_STATUS_OK) {
        set_err(err, errlen, "cannot read the CA file %s", tls->ca_file);
        return NULL;
    }
    if (tls && set_str(tls->cert_file) &&
        amqp_ssl_socket_set_key(sock, tls->cert_file, tls->key_file) != AMQP_STATUS_OK) {
        set_err(err, errlen, "cannot read the client certificate %s or its key %s", tls->cert_file,
                tls->key_file ? tls->key_file : "");
        return NULL;
    }
    return sock;
}

amqp_connection_state_t rmq_connect(const char *url_in, const struct rmq_tls *tls, const amqp_table_t *client_props,
                                    int heartbeat_s, int timeout_s, char *err, size_t errlen)
{
    char *url = xstrdup(url_in), why[512];
    struct amqp_connection_info info;
    amqp_default_connection_info(&info);
    amqp_connection_state_t conn = NULL;
    if (amqp_parse_url(url, &info) != AMQP_STATUS_OK) {
        set_err(err, errlen, "not an AMQP URI");
        goto fail;
    }
    conn = amqp_new_connection();
    struct timeval tv = {timeout_s, 0};
    amqp_set_handshake_timeout(conn, &tv);
    amqp_set_rpc_timeout(conn, &tv);
    amqp_socket_t *sock = make_socket(conn, &info, tls, err, errlen);
    if (!sock)
        goto fail;
    int rc = amqp_socket_open_noblock(sock, info.host, info.port, &tv);
    if (rc != AMQP_STATUS_OK) {
        set_err(err, errlen, "cannot connect to %s:%d%s: %s", info.host, info.port, info.ssl ? " (TLS)" : "",
                amqp_error_string2(rc));
        goto fail;
    }
    amqp_rpc_reply_t r =
        client_props ? amqp_login_with_properties(conn, info.vhost, 0, 131072, heartbeat_s, client_props,
                                                  AMQP_SASL_METHOD_PLAIN, info.user, info.password)
                     : amqp_login(conn, info.vhost, 0, 131072, heartbeat_s, AMQP_SASL_METHOD_PLAIN, info.user,
                                  info.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rmq_reply_str(r, why, sizeof(why));
        /* A URL ending in '/' names the empty vhost (RabbitMQ's URI spec), not the default one:
         * the broker's "vhost  not found" does not say so. */
        set_err(err, errlen, "logging in to %s:%d as '%s', vhost '%s': %s%s", info.host, info.port, info.user,
                info.vhost, why,
                info.vhost[0] ? ""
                              : " (the URL ends in '/', which names the empty vhost ''; for the default vhost '/' "
                                "leave the path out, amqp://host:port, or write it as %2F, amqp://host:port/%2F)");
        goto fail;
    }
    amqp_channel_open(conn, 1);
    r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rmq_reply_str(r, why, sizeof(why));
        set_err(err, errlen, "opening a channel: %s", why);
        goto fail;
    }
    free(url);
    return conn;
fail:
    if (conn)
        amqp_destroy_connection(conn);
    free(url);
    return NULL;
}
