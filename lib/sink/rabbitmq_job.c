/* The RabbitMQ sink (rabbitmq_int.h): a message as a job, built whole in one allocation, held
 * behind its key's unconfirmed message under OUTBOX_RABBITMQ_STRICT_KEY_ORDER, and finished
 * with its outcome; a break fails what is unconfirmed or queued (the sink's thread, but for
 * rmq_job_new). */
#include "sink/rabbitmq_int.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

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
struct job *rmq_job_new(const struct sink_config *cfg, const struct message *msg, const char *key,
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

/* ---- strict key order, and finishing (the thread) ---- */

struct key_slot **rmq_key_find(struct rabbitmq_sink *sk, const char *key)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    struct key_slot **pp = &sk->keys[h % KEY_BUCKETS];
    while (*pp && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* A key's place is free again: its next held message becomes ready (it takes the place), or,
 * after a failure, its held messages fail unsent (the relay claims them again in order). */
static void key_release(struct rabbitmq_sink *sk, struct job_list *done, const char *key, int failed)
{
    struct key_slot **pp = rmq_key_find(sk, key), *slot = *pp;
    if (!slot)
        return;
    slot->busy = 0;
    if (failed) {
        struct job *h = slot->held.head;
        list_init(&slot->held);
        while (h) {
            struct job *next = h->next;
            rmq_finish(sk, done, h, RMQ_ERR_CONNECTION, 0);
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
void rmq_keys_drop(struct rabbitmq_sink *sk, struct job_list *done, int err)
{
    if (!sk->keys)
        return;
    for (struct job *j = sk->ready.head; j; j = j->next)
        j->owns_key = 0;
    struct job *r = sk->ready.head;
    list_init(&sk->ready);
    while (r) {
        struct job *next = r->next;
        rmq_finish(sk, done, r, err, 0);
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

void rmq_finish(struct rabbitmq_sink *sk, struct job_list *done, struct job *j, int err, int maybe)
{
    j->err = err;
    j->maybe_persisted = maybe;
    list_push(done, j);
    if (j->owns_key) {
        j->owns_key = 0;
        key_release(sk, done, j->key, err != 0);
    }
}

void rmq_fail_all(struct rabbitmq_sink *sk, struct job_list *done, struct job_list *l, int err, int maybe)
{
    struct job *j = l->head;
    list_init(l);
    while (j) {
        struct job *next = j->next;
        rmq_finish(sk, done, j, err, maybe);
        j = next;
    }
}

/* ---- a break (the thread) ---- */

void rmq_disconnect(struct rabbitmq_sink *sk)
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
void rmq_broken(struct rabbitmq_sink *sk, struct job_list *done, int err, const char *why)
{
    int n = 0, q = 0;
    for (struct job *j = sk->out.head; j; j = j->next)
        n++;
    struct job_list queued;
    list_init(&queued);
    pthread_mutex_lock(&sk->mu);
    for (struct job *j = sk->in.head; j; j = j->next)
        q++;
    list_append(&queued, &sk->in);
    unsigned gen = sk->break_gen + 1;
    if (sk->out.head || queued.head)
        sk->break_gen = gen;
    pthread_mutex_unlock(&sk->mu);
    log_warn("rabbitmq: %s; %d unconfirmed message%s and every one not yet sent (%d queued) will be "
             "published again, connecting anew", why, n, n == 1 ? "" : "s", q);
    for (struct job *j = sk->out.head; j; j = j->next)
        j->break_of = gen;
    for (struct job *j = queued.head; j; j = j->next)
        j->break_of = gen;
    rmq_fail_all(sk, done, &sk->out, err, 1);
    rmq_fail_all(sk, done, &queued, err, 0);
    rmq_keys_drop(sk, done, err);
    rmq_disconnect(sk);
    sk->next_connect_ms = mono_ms() + sk->backoff_ms;
}
