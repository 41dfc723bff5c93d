/* The RabbitMQ sink (rabbitmq_int.h): opening a connection (the thread, and --check-config),
 * and the sink's thread and its loop. */
#include "sink/rabbitmq_int.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

/* ---- opening a connection (the thread, and --check-config) ---- */

static amqp_table_entry_t capability(const char *name)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(name);
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e.value.value.boolean = 1;
    return e;
}

/* Declares the exchange (durable, topic); a user that may not declare (403) finds it
 * passively instead. */
static int declare_exchange(amqp_connection_state_t conn, const char *exchange, char *err, size_t errlen)
{
    char why[512];
    amqp_exchange_declare(conn, RMQ_CHANNEL, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"),
                          0, 1, 0, 0, amqp_empty_table);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    int code = rmq_reply_code(r);
    rmq_reply_str(r, why, sizeof(why));
    if (code == AMQP_PRECONDITION_FAILED)
        return set_err(err, errlen, "exchange '%s' exists with another type or other properties "
                       "(the relay needs a durable topic exchange): %s", exchange, why);
    if (code != AMQP_ACCESS_REFUSED || r.reply.id != AMQP_CHANNEL_CLOSE_METHOD)
        return set_err(err, errlen, "declaring exchange '%s': %s", exchange, why);
    /* may not declare (configure permission): the channel is closed; find it passively */
    amqp_channel_close_ok_t ok = {0};
    amqp_send_method(conn, RMQ_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    amqp_channel_open(conn, RMQ_CHANNEL);
    r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rmq_reply_str(r, why, sizeof(why));
        return set_err(err, errlen, "reopening the channel: %s", why);
    }
    amqp_exchange_declare(conn, RMQ_CHANNEL, amqp_cstring_bytes(exchange), amqp_cstring_bytes("topic"),
                          1, 0, 0, 0, amqp_empty_table);
    r = amqp_get_rpc_reply(conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    rmq_reply_str(r, why, sizeof(why));
    return set_err(err, errlen, "exchange '%s': the user may not declare it and it does not exist "
                   "(%s)", exchange, why);
}

/* A connection logged in, with channel 1 open in confirm mode and the exchange there, or
 * NULL with err (the URL's password never in it). */
amqp_connection_state_t rmq_open(const struct sink_config *cfg, char *err, size_t errlen)
{
    amqp_table_entry_t caps[] = {capability("publisher_confirms"), capability("connection.blocked"),
                                 capability("authentication_failure_close")};
    amqp_table_entry_t props[2];
    props[0].key = amqp_cstring_bytes("product");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes("outbox-relay");
    props[1].key = amqp_cstring_bytes("capabilities");
    props[1].value.kind = AMQP_FIELD_KIND_TABLE;
    props[1].value.value.table = (amqp_table_t){(int)ARRAY_LEN(caps), caps};
    amqp_table_t client = {(int)ARRAY_LEN(props), props};
    const struct rmq_tls tls = {cfg->rabbitmq_ca_file, cfg->rabbitmq_cert_file, cfg->rabbitmq_key_file};
    amqp_connection_state_t conn =
        rmq_connect(cfg->rabbitmq_url, &tls, &client, RMQ_HEARTBEAT_S, RMQ_RPC_TIMEOUT_S, err, errlen);
    if (!conn)
        return NULL;
    if (declare_exchange(conn, cfg->rabbitmq_exchange, err, errlen) != 0) {
        amqp_destroy_connection(conn);
        return NULL;
    }
    amqp_confirm_select(conn, RMQ_CHANNEL);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char why[512];
        rmq_reply_str(r, why, sizeof(why));
        set_err(err, errlen, "confirm.select: %s", why);
        amqp_destroy_connection(conn);
        return NULL;
    }
    return conn;
}

int sink_rabbitmq_check(const struct sink_config *cfg, char *err, size_t errlen)
{
    amqp_connection_state_t conn = rmq_open(cfg, err, errlen);
    if (!conn)
        return -1;
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return 0;
}

const char *sink_rabbitmq_version(void)
{
    return amqp_version();
}

/* ---- the thread ---- */

static void connect_now(struct rabbitmq_sink *sk)
{
    char err[768];
    amqp_connection_state_t conn = rmq_open(sk->cfg, err, sizeof(err));
    if (!conn) {
        if (!sk->failed_logged)
            log_error("rabbitmq: %s (retrying every %d ms at most)", err, sk->cfg->reconnect_max_ms);
        sk->failed_logged = 1;
        sk->backoff_ms = sk->backoff_ms ? sk->backoff_ms * 2 : 100;
        if (sk->backoff_ms > sk->cfg->reconnect_max_ms)
            sk->backoff_ms = sk->cfg->reconnect_max_ms;
        sk->next_connect_ms = mono_ms() + sk->backoff_ms;
        return;
    }
    sk->conn = conn;
    sk->next_tag = 0;
    sk->backoff_ms = 100;
    if (sk->failed_logged)
        log_info("rabbitmq: connected again");
    sk->failed_logged = 0;
    pthread_mutex_lock(&sk->mu);
    sk->sockfd = amqp_get_sockfd(conn);
    pthread_mutex_unlock(&sk->mu);
    atomic_store(&sk->connected, 1);
}

static void post(struct rabbitmq_sink *sk, struct job_list *done)
{
    if (!done->head)
        return;
    pthread_mutex_lock(&sk->mu);
    int was_empty = sk->done.head == NULL;
    list_append(&sk->done, done);
    pthread_mutex_unlock(&sk->mu);
    if (was_empty)
        wake_pipe_poke(sk->to_loop[1]);
}

void *rmq_thread_main(void *arg)
{
    struct rabbitmq_sink *sk = arg;
    for (;;) {
        struct job_list todo, done;
        list_init(&todo);
        list_init(&done);
        pthread_mutex_lock(&sk->mu);
        int stop = sk->stop;
        unsigned purge = sk->purge_req;
        if (purge != sk->purge_seen || sk->conn)
            list_append(&todo, &sk->in);
        pthread_mutex_unlock(&sk->mu);
        if (stop)
            break;
        if (purge != sk->purge_seen) {
            sk->purge_seen = purge;
            rmq_fail_all(sk, &done, &todo, RMQ_ERR_PURGED, 0);
            if (sk->out.head) /* their confirms may still come: a new channel numbers anew */
                rmq_fail_all(sk, &done, &sk->out, RMQ_ERR_PURGED, 1);
            rmq_keys_drop(sk, &done, RMQ_ERR_PURGED);
            rmq_disconnect(sk);
            sk->next_connect_ms = 0;
        }
        if (!sk->conn && mono_ms() >= sk->next_connect_ms)
            connect_now(sk);
        if (sk->ready.head && sk->conn)
            rmq_publish(sk, &sk->ready, &done);
        if (todo.head)
            rmq_publish(sk, &todo, &done);
        if (sk->conn)
            rmq_read_frames(sk, &done);
        if (sk->ready.head && sk->conn) /* what those confirms let go */
            rmq_publish(sk, &sk->ready, &done);
        rmq_check_confirm_timeout(sk, &done);
        post(sk, &done);

        struct pollfd pfd[2] = {{sk->to_thread[0], POLLIN, 0}, {-1, POLLIN, 0}};
        int timeout = 50; /* heartbeats and the confirm timeout are looked at this often */
        if (sk->conn) {
            pfd[1].fd = amqp_get_sockfd(sk->conn);
        } else {
            int64_t left = sk->next_connect_ms - mono_ms();
            timeout = left < 0 ? 0 : left < timeout ? (int)left : timeout;
        }
        if (poll(pfd, 2, timeout) > 0 && (pfd[0].revents & POLLIN))
            wake_pipe_drain(sk->to_thread[0]);
    }
    rmq_disconnect(sk);
    return NULL;
}
