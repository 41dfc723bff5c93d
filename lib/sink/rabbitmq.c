/* The RabbitMQ sink (rabbitmq.h).
 *
 * One connection, one channel in confirm mode, owned by the sink's thread. The loop thread
 * queues jobs (a message copied whole, one allocation) and wakes the thread through a pipe;
 * the thread publishes them with mandatory set, reads the broker's frames (basic.ack,
 * basic.nack, basic.return, channel and connection closes, connection.blocked) and hands
 * each job back with its outcome through another pipe, which the loop watches.
 *
 * A message is a success only on its basic.ack, and only if no basic.return came for it
 * first (RabbitMQ returns an unroutable mandatory message, then acks it). A return carries no
 * delivery tag: it is matched to the oldest unconfirmed message with its message id (returns
 * come in publishing order). Whatever is unconfirmed when the connection or channel is lost,
 * or when the oldest confirm is later than OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS, fails as
 * possibly persisted, and the connection is made anew (delivery tags start again on a new
 * channel, so a late confirm can never be taken for another message's). */
#include "sink/rabbitmq.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "sink/rabbitmq_int.h"

static const struct sink_ops rabbitmq_ops;

static void serve(struct rabbitmq_sink *sk)
{
    pthread_mutex_lock(&sk->mu);
    struct job *j = sk->done.head;
    list_init(&sk->done);
    pthread_mutex_unlock(&sk->mu);
    unsigned seen = 0;
    while (j) {
        struct job *next = j->next;
        sk->pending--;
        if (j->break_of > seen)
            seen = j->break_of;
        sk->cb.on_delivery(sk->ctx, j->row_id, j->err, j->err ? j->routing_key : NULL, j->maybe_persisted);
        free(j);
        j = next;
    }
    if (seen) { /* the relay has been told of these breaks: what it queues now may go */
        pthread_mutex_lock(&sk->mu);
        if (seen > sk->seen_gen)
            sk->seen_gen = seen;
        pthread_mutex_unlock(&sk->mu);
    }
}

static void watchdog_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct rabbitmq_sink *sk = w->data;
    long long since = atomic_load(&sk->send_since_ms);
    if (!since || mono_ms() - since < sk->cfg->rabbitmq_confirm_timeout_ms)
        return;
    pthread_mutex_lock(&sk->mu);
    if (sk->sockfd >= 0 && atomic_load(&sk->send_since_ms) == since) {
        atomic_store(&sk->cut_by_watchdog, 1);
        shutdown(sk->sockfd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&sk->mu);
}

static void wake_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct rabbitmq_sink *sk = w->data;
    wake_pipe_drain(sk->to_loop[0]);
    serve(sk);
}

struct sink *sink_rabbitmq_new(struct ev_loop *loop, const struct sink_config *cfg,
                               const struct sink_callbacks *cb, void *ctx, char *err, size_t errlen)
{
    struct rabbitmq_sink *sk = xcalloc(1, sizeof(*sk));
    sk->base.ops = &rabbitmq_ops;
    sk->loop = loop;
    sk->cfg = cfg;
    sk->cb = *cb;
    sk->ctx = ctx;
    sk->sockfd = -1;
    list_init(&sk->in);
    list_init(&sk->done);
    list_init(&sk->out);
    list_init(&sk->ready);
    if (cfg->rabbitmq_strict_key_order)
        sk->keys = xcalloc(KEY_BUCKETS, sizeof(*sk->keys));
    sk->to_thread[0] = sk->to_thread[1] = sk->to_loop[0] = sk->to_loop[1] = -1;
    pthread_mutex_init(&sk->mu, NULL);
    if (wake_pipe_open(sk->to_thread) != 0 || wake_pipe_open(sk->to_loop) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&sk->thread, NULL, rmq_thread_main, sk) != 0) {
        set_err(err, errlen, "cannot start the RabbitMQ thread");
        goto fail;
    }
    sk->thread_started = 1;
    ev_io_init(&sk->wake_io, wake_cb, sk->to_loop[0], EV_READ);
    sk->wake_io.data = sk;
    ev_io_start(loop, &sk->wake_io);
    double every = cfg->rabbitmq_confirm_timeout_ms / 4000.0;
    ev_timer_init(&sk->watchdog, watchdog_cb, every, every);
    sk->watchdog.data = sk;
    ev_timer_start(loop, &sk->watchdog);
    ev_unref(loop); /* the watchdog alone does not keep the loop running */
    return &sk->base;
fail:
    for (int i = 0; i < 2; i++) {
        if (sk->to_thread[i] >= 0)
            close(sk->to_thread[i]);
        if (sk->to_loop[i] >= 0)
            close(sk->to_loop[i]);
    }
    pthread_mutex_destroy(&sk->mu);
    free(sk);
    return NULL;
}

static enum sink_queued r_produce(struct sink *base, const struct message *msg, const char *key,
                                  const char *value, size_t value_len, int64_t timestamp_ms,
                                  int64_t row_id, int *err)
{
    struct rabbitmq_sink *sk = (struct rabbitmq_sink *)base;
    if (value_len > (size_t)sk->cfg->rabbitmq_max_message_bytes) {
        *err = RMQ_ERR_TOO_LARGE;
        return SINK_UNFIT;
    }
    if (sk->pending >= sk->cfg->max_inflight + 1000) {
        *err = 0;
        return SINK_FULL;
    }
    struct job *j = rmq_job_new(sk->cfg, msg, key, value, value_len, timestamp_ms, row_id);
    pthread_mutex_lock(&sk->mu);
    j->gen = sk->seen_gen;
    int was_empty = sk->in.head == NULL;
    list_push(&sk->in, j);
    pthread_mutex_unlock(&sk->mu);
    if (was_empty)
        wake_pipe_poke(sk->to_thread[1]);
    sk->pending++;
    *err = 0;
    return SINK_QUEUED;
}

/* Asks the thread to fail everything (and connect anew), serving completions until none is
 * pending or timeout_ms passed; a send stuck on a broker that stopped reading is cut. */
static void purge_and_drain(struct rabbitmq_sink *sk, int timeout_ms)
{
    pthread_mutex_lock(&sk->mu);
    sk->purge_req++;
    pthread_mutex_unlock(&sk->mu);
    wake_pipe_poke(sk->to_thread[1]);
    int64_t deadline = mono_ms() + timeout_ms, cut = 0;
    for (;;) {
        serve(sk);
        if (sk->pending <= 0)
            return;
        int64_t now = mono_ms();
        if (now >= deadline) {
            if (cut || now >= deadline + 2000)
                return;
            pthread_mutex_lock(&sk->mu);
            if (sk->sockfd >= 0)
                shutdown(sk->sockfd, SHUT_RDWR);
            pthread_mutex_unlock(&sk->mu);
            cut = 1;
            deadline = now + 2000;
        }
        struct pollfd pfd = {sk->to_loop[0], POLLIN, 0};
        if (poll(&pfd, 1, 20) > 0)
            wake_pipe_drain(sk->to_loop[0]);
    }
}

static int r_recreate(struct sink *base, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct rabbitmq_sink *sk = (struct rabbitmq_sink *)base;
    purge_and_drain(sk, 2000);
    log_info("rabbitmq: connection made anew");
    return 0;
}

static void r_abandon(struct sink *base, int timeout_ms)
{
    purge_and_drain((struct rabbitmq_sink *)base, timeout_ms);
}

static void r_poll(struct sink *base)
{
    serve((struct rabbitmq_sink *)base);
}

static int r_outq_len(struct sink *base)
{
    return ((struct rabbitmq_sink *)base)->pending;
}

static int r_brokers_up(struct sink *base)
{
    return atomic_load(&((struct rabbitmq_sink *)base)->connected);
}

static long long r_max_message_bytes(const struct sink *base)
{
    return ((const struct rabbitmq_sink *)base)->cfg->rabbitmq_max_message_bytes;
}

static uint64_t r_unconfirmed(const struct sink *base)
{
    (void)base;
    return 0; /* a basic.ack is the broker's own word */
}

static uint64_t r_partition_changes(const struct sink *base)
{
    (void)base;
    return 0;
}

static void free_list(struct job *j)
{
    while (j) {
        struct job *next = j->next;
        free(j);
        j = next;
    }
}

static void r_free(struct sink *base)
{
    struct rabbitmq_sink *sk = (struct rabbitmq_sink *)base;
    if (!sk)
        return;
    ev_io_stop(sk->loop, &sk->wake_io);
    ev_ref(sk->loop);
    ev_timer_stop(sk->loop, &sk->watchdog);
    pthread_mutex_lock(&sk->mu);
    sk->stop = 1;
    if (sk->sockfd >= 0) /* no callbacks from here on: unblock a stuck send */
        shutdown(sk->sockfd, SHUT_RDWR);
    pthread_mutex_unlock(&sk->mu);
    wake_pipe_poke(sk->to_thread[1]);
    if (sk->thread_started)
        pthread_join(sk->thread, NULL);
    free_list(sk->in.head);
    free_list(sk->done.head);
    free_list(sk->out.head);
    free_list(sk->ready.head);
    for (int b = 0; sk->keys && b < KEY_BUCKETS; b++)
        while (sk->keys[b]) {
            struct key_slot *slot = sk->keys[b];
            sk->keys[b] = slot->next;
            free_list(slot->held.head);
            free(slot);
        }
    free(sk->keys);
    for (int i = 0; i < 2; i++) {
        close(sk->to_thread[i]);
        close(sk->to_loop[i]);
    }
    pthread_mutex_destroy(&sk->mu);
    free(sk);
}

#ifdef OUTBOX_TEST_HOOKS
static void r_test_fatal(struct sink *base)
{
    struct rabbitmq_sink *sk = (struct rabbitmq_sink *)base;
    sk->cb.on_fatal(sk->ctx, "test hook: injected fatal error");
}
#endif

enum failure_reason sink_rabbitmq_classify(int err)
{
    switch (err) {
    case RMQ_ERR_TOO_LARGE:
        return FAILURE_ROW;
    case RMQ_ERR_UNROUTABLE:
        return FAILURE_TOPIC;
    case RMQ_ERR_PURGED:
        return FAILURE_PRODUCER;
    default:
        return FAILURE_TRANSIENT;
    }
}

static const char *r_err_str(int err)
{
    static const char *const names[RMQ_ERR_COUNT] = {
        [0] = "no error",
        [RMQ_ERR_NACK] = "negatively confirmed by the broker (basic.nack)",
        [RMQ_ERR_UNROUTABLE] = "unroutable: no queue is bound to the exchange for this routing key "
                               "(basic.return)",
        [RMQ_ERR_CONNECTION] = "connection or channel lost before the publisher confirm",
        [RMQ_ERR_CONFIRM_TIMEOUT] = "no publisher confirm within OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS",
        [RMQ_ERR_PURGED] = "failed by the relay (reset or shutdown)",
        [RMQ_ERR_TOO_LARGE] = "larger than OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES",
    };
    return err >= 0 && err < RMQ_ERR_COUNT ? names[err] : "unknown RabbitMQ sink error";
}

static const struct sink_ops rabbitmq_ops = {
    .name = "rabbitmq",
    .max_message_name = "OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES",
    .free = r_free,
    .produce = r_produce,
    .recreate = r_recreate,
    .poll = r_poll,
    .outq_len = r_outq_len,
    .brokers_up = r_brokers_up,
    .max_message_bytes = r_max_message_bytes,
    .partition_changes = r_partition_changes,
    .unconfirmed = r_unconfirmed,
    .abandon = r_abandon,
    .classify = sink_rabbitmq_classify,
    .err_str = r_err_str,
    .partition = NULL,
#ifdef OUTBOX_TEST_HOOKS
    .test_fatal = r_test_fatal,
#endif
};
