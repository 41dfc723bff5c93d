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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/amqp.h"
#include "core/log.h"
#include "core/util.h"

enum rmq_err {
    RMQ_ERR_NACK = 1,        /* basic.nack: the broker could not take the message */
    RMQ_ERR_UNROUTABLE,      /* basic.return: no queue is bound for the routing key */
    RMQ_ERR_CONNECTION,      /* the connection or channel was lost before the confirm */
    RMQ_ERR_CONFIRM_TIMEOUT, /* no confirm within OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS */
    RMQ_ERR_PURGED,          /* failed by the relay (a reset, shutdown) */
    RMQ_ERR_TOO_LARGE,       /* over OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES */
    RMQ_ERR_COUNT
};

#define RMQ_CHANNEL 1
#define RMQ_HEARTBEAT_S 30
#define RMQ_RPC_TIMEOUT_S 15

struct job {
    struct job *next;
    int64_t row_id;
    uint64_t tag; /* delivery tag on the channel, once published */
    int64_t sent_ms;
    int returned;
    int err;
    int maybe_persisted;
    unsigned gen;      /* the breaks the relay had been told of when it queued the job */
    unsigned break_of; /* failed by break number break_of (0: not by a break) */
    int owns_key;      /* strict key order: it holds its key's one unconfirmed place */
    const char *key;   /* the aggregate id (in this allocation), or NULL */
    char *routing_key;
    amqp_basic_properties_t props; /* its strings and headers point into this allocation */
    amqp_bytes_t body;
};

struct job_list {
    struct job *head, **tail;
};

/* OUTBOX_RABBITMQ_STRICT_KEY_ORDER: a key with a message unconfirmed (busy) holds its later
 * messages back, in order, until that confirm. */
#define KEY_BUCKETS 4096
struct key_slot {
    struct key_slot *next;
    int busy;
    struct job_list held;
    char key[]; /* NUL-terminated */
};

struct rabbitmq_sink {
    struct sink base; /* first */
    struct ev_loop *loop;
    const struct sink_config *cfg;
    struct sink_callbacks cb;
    void *ctx;
    int to_thread[2], to_loop[2];
    ev_io wake_io;
    ev_timer watchdog; /* cuts a send stuck longer than the confirm timeout */
    int pending; /* loop thread: jobs queued whose completion was not served */
    pthread_t thread;
    int thread_started;

    pthread_mutex_t mu; /* guards what follows up to the thread's own */
    struct job_list in, done;
    int stop;
    unsigned purge_req;
    int sockfd; /* of the thread's connection, -1 without: shutdown(2) unblocks a stuck send */
    atomic_int connected;
    /* librabbitmq's publish blocks without a deadline while the broker reads nothing (an
     * alarm, a frozen node): the thread notes when a send began, and the loop's watchdog
     * shuts the socket down once it has taken longer than the confirm timeout, so that the
     * timeout holds even then (cut_by_watchdog: the thread reports it as the timeout). */
    atomic_llong send_since_ms;
    atomic_int cut_by_watchdog;
    /* Per-key order through a break: the thread counts breaks that failed messages
     * (break_gen); the loop, once it has served a break's failures (so the relay is
     * resetting and will publish again from the lowest failed row), records seen_gen. A job
     * queued before that (gen < break_gen) could overtake a failed row of its key on the
     * new connection: it fails too, unsent. */
    unsigned break_gen, seen_gen;

    /* the thread's own */
    amqp_connection_state_t conn;
    struct job_list out; /* published, unconfirmed, in tag order */
    uint64_t next_tag;
    unsigned purge_seen;
    int64_t next_connect_ms, backoff_ms;
    int blocked;
    int failed_logged;
    struct key_slot **keys; /* strict key order: KEY_BUCKETS chains, or NULL */
    struct job_list ready;  /* held messages whose key's confirm came: published next */
};

static const struct sink_ops rabbitmq_ops;

static void list_init(struct job_list *l)
{
    l->head = NULL;
    l->tail = &l->head;
}

static void list_push(struct job_list *l, struct job *j)
{
    j->next = NULL;
    *l->tail = j;
    l->tail = &j->next;
}

static void list_append(struct job_list *l, struct job_list *more)
{
    if (!more->head)
        return;
    *l->tail = more->head;
    l->tail = more->tail;
    list_init(more);
}

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
static amqp_connection_state_t rmq_open(const struct sink_config *cfg, char *err, size_t errlen)
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

/* ---- jobs ---- */

static size_t bytes_size(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

/* Copies s into the job's allocation at *p. */
static amqp_bytes_t put(char **p, const char *s)
{
    size_t n = strlen(s);
    memcpy(*p, s, n + 1);
    amqp_bytes_t b = {n, *p};
    *p += n + 1;
    return b;
}

static void add_header(amqp_table_entry_t *e, char **p, const char *name, const char *value)
{
    e->key = put(p, name);
    if (value) {
        e->value.kind = AMQP_FIELD_KIND_UTF8;
        e->value.value.bytes = put(p, value);
    } else {
        e->value.kind = AMQP_FIELD_KIND_VOID;
    }
}

/* The message whole, in one allocation. */
static struct job *job_new(const struct sink_config *cfg, const struct message *msg, const char *key,
                           const char *value, size_t value_len, int64_t timestamp_ms, int64_t row_id)
{
    size_t n_hdrs = msg->n_headers + (key ? 1 : 0);
    size_t size = sizeof(struct job) + n_hdrs * sizeof(amqp_table_entry_t) + bytes_size(msg->topic) +
                  bytes_size(msg->event_id) + bytes_size(msg->event_type) + bytes_size(msg->content_type) +
                  bytes_size(cfg->relay_name) + value_len + 1;
    for (size_t i = 0; i < msg->n_headers; i++)
        size += bytes_size(msg->headers[i].name) + bytes_size(msg->headers[i].value);
    if (key)
        size += sizeof("aggregate_id") + strlen(key) + 1;
    struct job *j = xcalloc(1, size);
    amqp_table_entry_t *entries = (amqp_table_entry_t *)(j + 1);
    char *p = (char *)(entries + n_hdrs);
    j->row_id = row_id;
    j->routing_key = p;
    put(&p, msg->topic);
    amqp_basic_properties_t *pr = &j->props;
    pr->_flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG |
                 AMQP_BASIC_HEADERS_FLAG;
    pr->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    pr->timestamp = (uint64_t)(timestamp_ms / 1000); /* AMQP timestamps are seconds */
    pr->app_id = put(&p, cfg->relay_name);
    if (msg->event_id) {
        pr->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        pr->message_id = put(&p, msg->event_id);
    }
    if (msg->event_type) {
        pr->_flags |= AMQP_BASIC_TYPE_FLAG;
        pr->type = put(&p, msg->event_type);
    }
    if (msg->content_type) {
        pr->_flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        pr->content_type = put(&p, msg->content_type);
    }
    size_t n = 0;
    for (size_t i = 0; i < msg->n_headers; i++)
        add_header(&entries[n++], &p, msg->headers[i].name, msg->headers[i].value);
    if (key) {
        add_header(&entries[n], &p, "aggregate_id", key);
        j->key = (const char *)entries[n].value.value.bytes.bytes;
        n++;
    }
    pr->headers = (amqp_table_t){(int)n, entries};
    if (value_len)
        memcpy(p, value, value_len);
    j->body = (amqp_bytes_t){value_len, p};
    return j;
}

/* ---- the thread ---- */

static struct key_slot **key_find(struct rabbitmq_sink *sk, const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    struct key_slot **pp = &sk->keys[h % KEY_BUCKETS];
    while (*pp && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

static void finish(struct rabbitmq_sink *sk, struct job_list *done, struct job *j, int err, int maybe);

/* A key's place is free again: its next held message becomes ready (it takes the place), or,
 * after a failure, its held messages fail unsent (the relay claims them again in order). */
static void key_release(struct rabbitmq_sink *sk, struct job_list *done, const char *key, int failed)
{
    struct key_slot **pp = key_find(sk, key), *slot = *pp;
    if (!slot)
        return;
    slot->busy = 0;
    if (failed) {
        struct job *h = slot->held.head;
        list_init(&slot->held);
        while (h) {
            struct job *next = h->next;
            finish(sk, done, h, RMQ_ERR_CONNECTION, 0);
            h = next;
        }
    } else if (slot->held.head) {
        struct job *h = slot->held.head;
        slot->held.head = h->next;
        if (!slot->held.head)
            slot->held.tail = &slot->held.head;
        h->owns_key = 1;
        slot->busy = 1;
        list_push(&sk->ready, h);
        return;
    }
    *pp = slot->next;
    free(slot);
}

/* Every held and ready message fails unsent and every key's place is freed (a break, a purge). */
static void keys_drop(struct rabbitmq_sink *sk, struct job_list *done, int err)
{
    if (!sk->keys)
        return;
    for (struct job *j = sk->ready.head; j; j = j->next)
        j->owns_key = 0;
    struct job *r = sk->ready.head;
    list_init(&sk->ready);
    while (r) {
        struct job *next = r->next;
        finish(sk, done, r, err, 0);
        r = next;
    }
    for (int b = 0; b < KEY_BUCKETS; b++) {
        while (sk->keys[b]) {
            struct key_slot *slot = sk->keys[b];
            sk->keys[b] = slot->next;
            struct job *h = slot->held.head;
            while (h) {
                struct job *next = h->next;
                h->err = err;
                h->maybe_persisted = 0;
                list_push(done, h);
                h = next;
            }
            free(slot);
        }
    }
}

static void finish(struct rabbitmq_sink *sk, struct job_list *done, struct job *j, int err, int maybe)
{
    j->err = err;
    j->maybe_persisted = maybe;
    list_push(done, j);
    if (j->owns_key) {
        j->owns_key = 0;
        key_release(sk, done, j->key, err != 0);
    }
}

static void fail_all(struct rabbitmq_sink *sk, struct job_list *done, struct job_list *l, int err, int maybe)
{
    struct job *j = l->head;
    list_init(l);
    while (j) {
        struct job *next = j->next;
        finish(sk, done, j, err, maybe);
        j = next;
    }
}

static void disconnect(struct rabbitmq_sink *sk)
{
    if (!sk->conn)
        return;
    pthread_mutex_lock(&sk->mu);
    sk->sockfd = -1;
    pthread_mutex_unlock(&sk->mu);
    atomic_store(&sk->connected, 0);
    amqp_destroy_connection(sk->conn); /* closes the socket; no close handshake to wait for */
    sk->conn = NULL;
    sk->blocked = 0;
}

/* The connection is gone or no longer trusted: what is unconfirmed fails, possibly persisted,
 * and so does what is queued (unsent), in a new break the loop must see served before later
 * jobs are published (see break_gen). */
static void broken(struct rabbitmq_sink *sk, struct job_list *done, int err, const char *why)
{
    int n = 0;
    for (struct job *j = sk->out.head; j; j = j->next)
        n++;
    log_warn("rabbitmq: %s; %d unconfirmed message%s will be published again, connecting anew", why,
             n, n == 1 ? "" : "s");
    struct job_list queued;
    list_init(&queued);
    pthread_mutex_lock(&sk->mu);
    list_append(&queued, &sk->in);
    unsigned gen = sk->break_gen + 1;
    if (sk->out.head || queued.head)
        sk->break_gen = gen;
    pthread_mutex_unlock(&sk->mu);
    for (struct job *j = sk->out.head; j; j = j->next)
        j->break_of = gen;
    for (struct job *j = queued.head; j; j = j->next)
        j->break_of = gen;
    fail_all(sk, done, &sk->out, err, 1);
    fail_all(sk, done, &queued, err, 0);
    keys_drop(sk, done, err);
    disconnect(sk);
    sk->next_connect_ms = mono_ms() + sk->backoff_ms;
}

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

/* basic.ack (ok) or basic.nack of tag, or of every tag up to it (multiple). */
static void confirm(struct rabbitmq_sink *sk, struct job_list *done, uint64_t tag, int multiple, int ok)
{
    struct job **pp = &sk->out.head;
    while (*pp) {
        struct job *j = *pp;
        if (j->tag > tag)
            break;
        if (!multiple && j->tag != tag) {
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (!j->next)
            sk->out.tail = pp;
        if (!ok)
            finish(sk, done, j, RMQ_ERR_NACK, 1);
        else if (j->returned)
            finish(sk, done, j, RMQ_ERR_UNROUTABLE, 0);
        else
            finish(sk, done, j, 0, 1);
        if (!multiple)
            break;
    }
}

/* basic.return: the oldest unconfirmed message with the returned one's id. */
static void returned(struct rabbitmq_sink *sk, const amqp_basic_return_t *ret, const amqp_message_t *m)
{
    const amqp_bytes_t *id = (m->properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? &m->properties.message_id : NULL;
    for (struct job *j = sk->out.head; j; j = j->next) {
        if (j->returned)
            continue;
        const amqp_bytes_t *jid = (j->props._flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? &j->props.message_id : NULL;
        int same = (!id && !jid) || (id && jid && id->len == jid->len && memcmp(id->bytes, jid->bytes, id->len) == 0);
        if (!same || strlen(j->routing_key) != ret->routing_key.len ||
            memcmp(j->routing_key, ret->routing_key.bytes, ret->routing_key.len) != 0)
            continue;
        j->returned = 1;
        log_debug("rabbitmq: row %lld returned by the broker: %u %.*s (routing key %s)", (long long)j->row_id,
                  ret->reply_code, (int)ret->reply_text.len, (const char *)ret->reply_text.bytes, j->routing_key);
        return;
    }
    log_warn("rabbitmq: a returned message matches no unconfirmed one (routing key %.*s)",
             (int)ret->routing_key.len, (const char *)ret->routing_key.bytes);
}

/* Reads every frame that has come; 0, or -1 once the connection is broken. */
static int read_frames(struct rabbitmq_sink *sk, struct job_list *done)
{
    char why[512];
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, 0};
        int rc = amqp_simple_wait_frame_noblock(sk->conn, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            return 0;
        if (rc != AMQP_STATUS_OK) {
            snprintf(why, sizeof(why), "connection lost: %s", amqp_error_string2(rc));
            broken(sk, done, RMQ_ERR_CONNECTION, why);
            return -1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
            const amqp_basic_ack_t *a = f.payload.method.decoded;
            confirm(sk, done, a->delivery_tag, a->multiple, 1);
            break;
        }
        case AMQP_BASIC_NACK_METHOD: {
            const amqp_basic_nack_t *a = f.payload.method.decoded;
            confirm(sk, done, a->delivery_tag, a->multiple, 0);
            break;
        }
        case AMQP_BASIC_RETURN_METHOD: {
            amqp_basic_return_t ret = *(const amqp_basic_return_t *)f.payload.method.decoded;
            amqp_message_t m;
            amqp_rpc_reply_t r = amqp_read_message(sk->conn, f.channel, &m, 0);
            if (r.reply_type != AMQP_RESPONSE_NORMAL) {
                rmq_reply_str(r, why, sizeof(why));
                broken(sk, done, RMQ_ERR_CONNECTION, why);
                return -1;
            }
            returned(sk, &ret, &m);
            amqp_destroy_message(&m);
            break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD: {
            const amqp_channel_close_t *c = f.payload.method.decoded;
            snprintf(why, sizeof(why), "the broker closed the channel: %u %.*s", c->reply_code,
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
            broken(sk, done, RMQ_ERR_CONNECTION, why);
            return -1;
        }
        case AMQP_CONNECTION_CLOSE_METHOD: {
            const amqp_connection_close_t *c = f.payload.method.decoded;
            snprintf(why, sizeof(why), "the broker closed the connection: %u %.*s", c->reply_code,
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
            broken(sk, done, RMQ_ERR_CONNECTION, why);
            return -1;
        }
        case AMQP_CONNECTION_BLOCKED_METHOD: {
            const amqp_connection_blocked_t *b = f.payload.method.decoded;
            log_warn("rabbitmq: the broker blocks publishing (%.*s): messages wait until it unblocks",
                     (int)b->reason.len, (const char *)b->reason.bytes);
            sk->blocked = 1;
            break;
        }
        case AMQP_CONNECTION_UNBLOCKED_METHOD:
            log_info("rabbitmq: the broker unblocked publishing");
            sk->blocked = 0;
            break;
        default:
            break;
        }
        amqp_maybe_release_buffers(sk->conn);
    }
}

/* Publishes the jobs taken from the queue; those left when the connection breaks fail, never
 * sent. */
static void publish(struct rabbitmq_sink *sk, struct job_list *todo, struct job_list *done)
{
    amqp_bytes_t exchange = amqp_cstring_bytes(sk->cfg->rabbitmq_exchange);
    int n = 0;
    pthread_mutex_lock(&sk->mu);
    unsigned break_gen = sk->break_gen;
    pthread_mutex_unlock(&sk->mu);
    while (todo->head) {
        struct job *j = todo->head;
        if (!sk->conn || j->gen < break_gen) { /* see break_gen */
            if (sk->conn) {
                todo->head = j->next;
                if (!todo->head)
                    todo->tail = &todo->head;
                j->break_of = break_gen;
                finish(sk, done, j, RMQ_ERR_CONNECTION, 0);
                continue;
            }
            fail_all(sk, done, todo, RMQ_ERR_CONNECTION, 0);
            return;
        }
        todo->head = j->next;
        if (!todo->head)
            todo->tail = &todo->head;
        if (sk->keys && j->key && !j->owns_key) { /* strict key order */
            struct key_slot **pp = key_find(sk, j->key);
            if (!*pp) {
                size_t len = strlen(j->key);
                *pp = xcalloc(1, sizeof(**pp) + len + 1);
                memcpy((*pp)->key, j->key, len + 1);
                list_init(&(*pp)->held);
            }
            if ((*pp)->busy) {
                list_push(&(*pp)->held, j);
                continue;
            }
            (*pp)->busy = 1;
            j->owns_key = 1;
        }
        j->tag = ++sk->next_tag;
        j->sent_ms = mono_ms();
        list_push(&sk->out, j);
        atomic_store(&sk->send_since_ms, (long long)j->sent_ms);
        int rc = amqp_basic_publish(sk->conn, RMQ_CHANNEL, exchange, amqp_cstring_bytes(j->routing_key),
                                    1, 0, &j->props, j->body);
        atomic_store(&sk->send_since_ms, 0LL);
        if (rc != AMQP_STATUS_OK) {
            char why[256];
            if (atomic_exchange(&sk->cut_by_watchdog, 0)) {
                snprintf(why, sizeof(why), "no publisher confirm for row %lld within %d ms%s (a send to the broker "
                         "waited that long)", (long long)sk->out.head->row_id, sk->cfg->rabbitmq_confirm_timeout_ms,
                         sk->blocked ? " (the broker blocks publishing)" : "");
                broken(sk, done, RMQ_ERR_CONFIRM_TIMEOUT, why);
                sk->next_connect_ms = mono_ms();
            } else {
                snprintf(why, sizeof(why), "publishing failed: %s", amqp_error_string2(rc));
                broken(sk, done, RMQ_ERR_CONNECTION, why);
            }
            continue;
        }
        if (++n % 256 == 0) { /* confirms keep coming while a long queue is sent */
            read_frames(sk, done);
            pthread_mutex_lock(&sk->mu);
            break_gen = sk->break_gen;
            pthread_mutex_unlock(&sk->mu);
        }
    }
}

static void check_confirm_timeout(struct rabbitmq_sink *sk, struct job_list *done)
{
    struct job *oldest = sk->out.head;
    if (!sk->conn || !oldest || mono_ms() - oldest->sent_ms < sk->cfg->rabbitmq_confirm_timeout_ms)
        return;
    char why[256];
    snprintf(why, sizeof(why), "no publisher confirm for row %lld within %d ms%s", (long long)oldest->row_id,
             sk->cfg->rabbitmq_confirm_timeout_ms, sk->blocked ? " (the broker blocks publishing)" : "");
    broken(sk, done, RMQ_ERR_CONFIRM_TIMEOUT, why);
    sk->next_connect_ms = mono_ms();
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

static void *run(void *arg)
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
            fail_all(sk, &done, &todo, RMQ_ERR_PURGED, 0);
            if (sk->out.head) /* their confirms may still come: a new channel numbers anew */
                fail_all(sk, &done, &sk->out, RMQ_ERR_PURGED, 1);
            keys_drop(sk, &done, RMQ_ERR_PURGED);
            disconnect(sk);
            sk->next_connect_ms = 0;
        }
        if (!sk->conn && mono_ms() >= sk->next_connect_ms)
            connect_now(sk);
        if (sk->ready.head && sk->conn)
            publish(sk, &sk->ready, &done);
        if (todo.head)
            publish(sk, &todo, &done);
        if (sk->conn)
            read_frames(sk, &done);
        if (sk->ready.head && sk->conn) /* what those confirms let go */
            publish(sk, &sk->ready, &done);
        check_confirm_timeout(sk, &done);
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
    disconnect(sk);
    return NULL;
}

/* ---- the loop thread ---- */

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
    if (pthread_create(&sk->thread, NULL, run, sk) != 0) {
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
    struct job *j = job_new(sk->cfg, msg, key, value, value_len, timestamp_ms, row_id);
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
