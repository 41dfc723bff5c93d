/* The RabbitMQ source (source.h): one connection consuming INBOX_RABBITMQ_QUEUES with manual
 * acknowledgements and a bounded prefetch; a message is acknowledged only once the
 * transaction with its dedupe record committed (done), so a crash in between redelivers it
 * (a duplicate the dedupe record catches). A second connection publishes dead letters with
 * publisher confirms (to the queue INBOX_DEAD_LETTER_TOPIC names, through the default
 * exchange) and reads the queues' depths every 5 s (the lag).
 *
 * Messages map to the source's form: topic = the queue, partition 0, offset = the delivery
 * tag (a connection's own: after a reconnect the tags restart, and messages taken on the old
 * connection are never acknowledged on the new one — RabbitMQ delivers them again), key = the
 * header aggregate_id, headers = the AMQP headers whose values are strings (longstr), and
 * message_id as the event id header when the message has no such header (publishers other
 * than this relay put the event id there). */
#include "source/source_rabbitmq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/amqp.h"
#include "core/log.h"
#include "core/util.h"

#define MAX_QUEUES 32
#define DEPTH_EVERY_MS 5000

struct rabbitmq_source {
    struct source base; /* first */
    const struct source_config *cfg;
    amqp_connection_state_t conn; /* consuming, channel 1 */
    amqp_connection_state_t aux;  /* dead letters (channel 1, confirm mode) and queue depths */
    unsigned gen;                 /* connections made: a message's tags belong to one */
    int64_t next_connect_ms, backoff_ms, next_depth_ms;
    int logged_down;
    char *queues[MAX_QUEUES];
    char *tags[MAX_QUEUES]; /* each queue's consumer tag on the current connection */
    int n_queues;
    struct source_lag lags[MAX_QUEUES];
    int n_lags;
    uint64_t dlq_tag;
};

/* What a source_msg's native points to. */
struct rmq_msg {
    amqp_envelope_t env;
    unsigned gen;
    struct source_header *headers;
    char *strings; /* the headers' names and values, NUL-terminated */
};

static const struct source_ops rabbitmq_ops;

/* A connection logged in with channel 1 open, or NULL with err. */
static amqp_connection_state_t open_conn(const struct source_config *cfg, char *err, size_t errlen)
{
    const struct rmq_tls tls = {cfg->rabbitmq_ca_file, cfg->rabbitmq_cert_file, cfg->rabbitmq_key_file};
    return rmq_connect(cfg->rabbitmq_url, &tls, NULL, 30, 15, err, errlen);
}

static void close_conn(amqp_connection_state_t *conn)
{
    if (*conn)
        amqp_destroy_connection(*conn);
    *conn = NULL;
}

/* Consuming every queue (each checked to exist: a passive declare), or -1 with err. */
static int start_consuming(struct rabbitmq_source *rs, char *err, size_t errlen)
{
    char why[512];
    amqp_connection_state_t conn = open_conn(rs->cfg, err, errlen);
    if (!conn)
        return -1;
    /* prefetch: two batches, so the next is on its way while one is applied */
    amqp_basic_qos(conn, 1, 0, (uint16_t)(rs->cfg->batch_size * 2 > 65535 ? 65535 : rs->cfg->batch_size * 2), 0);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    for (int i = 0; r.reply_type == AMQP_RESPONSE_NORMAL && i < rs->n_queues; i++) {
        amqp_queue_declare(conn, 1, amqp_cstring_bytes(rs->queues[i]), 1, 0, 0, 0, amqp_empty_table);
        r = amqp_get_rpc_reply(conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            rmq_reply_str(r, why, sizeof(why));
            amqp_destroy_connection(conn);
            return set_err(err, errlen, "queue '%s': %s", rs->queues[i], why);
        }
        amqp_basic_consume_ok_t *ok =
            amqp_basic_consume(conn, 1, amqp_cstring_bytes(rs->queues[i]), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        r = amqp_get_rpc_reply(conn);
        if (r.reply_type == AMQP_RESPONSE_NORMAL && ok) {
            free(rs->tags[i]);
            rs->tags[i] = xmalloc(ok->consumer_tag.len + 1);
            memcpy(rs->tags[i], ok->consumer_tag.bytes, ok->consumer_tag.len);
            rs->tags[i][ok->consumer_tag.len] = 0;
        }
    }
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rmq_reply_str(r, why, sizeof(why));
        amqp_destroy_connection(conn);
        return set_err(err, errlen, "consuming: %s", why);
    }
    rs->conn = conn;
    rs->gen++;
    return 0;
}

static void connect_if_due(struct rabbitmq_source *rs)
{
    if (rs->conn || mono_ms() < rs->next_connect_ms)
        return;
    char err[768];
    if (start_consuming(rs, err, sizeof(err)) == 0) {
        log_info("rabbitmq: consuming %s", rs->cfg->rabbitmq_queues);
        rs->backoff_ms = 0;
        rs->logged_down = 0;
        return;
    }
    if (!rs->logged_down)
        log_error("rabbitmq: %s (retrying)", err);
    rs->logged_down = 1;
    rs->backoff_ms = rs->backoff_ms ? rs->backoff_ms * 2 : 100;
    if (rs->backoff_ms > rs->cfg->retry_backoff_max_ms)
        rs->backoff_ms = rs->cfg->retry_backoff_max_ms;
    rs->next_connect_ms = mono_ms() + rs->backoff_ms;
}

/* The queues' depths, through the aux connection, at most every 5 s. */
static void refresh_depths(struct rabbitmq_source *rs)
{
    if (mono_ms() < rs->next_depth_ms)
        return;
    rs->next_depth_ms = mono_ms() + DEPTH_EVERY_MS;
    char err[512];
    if (!rs->aux && !(rs->aux = open_conn(rs->cfg, err, sizeof(err))))
        return;
    int n = 0;
    for (int i = 0; i < rs->n_queues; i++) {
        amqp_queue_declare_ok_t *ok =
            amqp_queue_declare(rs->aux, 1, amqp_cstring_bytes(rs->queues[i]), 1, 0, 0, 0, amqp_empty_table);
        if (amqp_get_rpc_reply(rs->aux).reply_type != AMQP_RESPONSE_NORMAL || !ok) {
            close_conn(&rs->aux); /* a missing queue closes the channel: start over next time */
            break;
        }
        struct source_lag *l = &rs->lags[n++];
        snprintf(l->topic, sizeof(l->topic), "%s", rs->queues[i]);
        l->partition = 0;
        l->lag = ok->message_count;
    }
    rs->n_lags = n;
}

static void header_strings(struct rmq_msg *rm, struct source_msg *sm, const struct source_config *cfg)
{
    const amqp_basic_properties_t *p = &rm->env.message.properties;
    const amqp_table_t *t = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? &p->headers : NULL;
    int n = t ? t->num_entries : 0;
    size_t size = 0;
    for (int i = 0; i < n; i++)
        size += t->entries[i].key.len + 1 +
                (t->entries[i].value.kind == AMQP_FIELD_KIND_UTF8 ? t->entries[i].value.value.bytes.len + 1 : 0);
    const char *id_name = strcmp(cfg->event_id_header, "auto") == 0 ? "event_id" : cfg->event_id_header;
    int add_id = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0;
    for (int i = 0; add_id && i < n; i++)
        if (t->entries[i].key.len == strlen(id_name) && memcmp(t->entries[i].key.bytes, id_name, t->entries[i].key.len) == 0)
            add_id = 0; /* the header is there: it wins */
    if (add_id)
        size += strlen(id_name) + 1 + p->message_id.len + 1;
    rm->headers = xcalloc((size_t)n + 1, sizeof(*rm->headers));
    rm->strings = xmalloc(size + 1);
    char *s = rm->strings;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        struct source_header *h = &rm->headers[k++];
        memcpy(s, e->key.bytes, e->key.len);
        s[e->key.len] = 0;
        h->name = s;
        s += e->key.len + 1;
        if (e->value.kind == AMQP_FIELD_KIND_UTF8) {
            memcpy(s, e->value.value.bytes.bytes, e->value.value.bytes.len);
            s[e->value.value.bytes.len] = 0;
            h->value = s;
            h->len = e->value.value.bytes.len;
            s += h->len + 1;
            if (strcmp(h->name, "aggregate_id") == 0) {
                sm->key = h->value;
                sm->key_len = h->len;
            }
        }
    }
    if (add_id) {
        struct source_header *h = &rm->headers[k++];
        strcpy(s, id_name);
        h->name = s;
        s += strlen(id_name) + 1;
        memcpy(s, p->message_id.bytes, p->message_id.len);
        s[p->message_id.len] = 0;
        h->value = s;
        h->len = p->message_id.len;
    }
    sm->headers = rm->headers;
    sm->n_headers = k;
}

static int r_poll(struct source *base, struct source_msg *out, int max, int wait_ms)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)base;
    connect_if_due(rs);
    refresh_depths(rs);
    if (!rs->conn) {
        struct timeval tv = {0, 1000 * (wait_ms < 100 ? wait_ms : 100)};
        select(0, NULL, NULL, NULL, &tv);
        return 0;
    }
    int n = 0;
    while (n < max) {
        struct rmq_msg *rm = xcalloc(1, sizeof(*rm));
        int ms = n ? 0 : wait_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        amqp_maybe_release_buffers(rs->conn);
        amqp_rpc_reply_t r = amqp_consume_message(rs->conn, &rm->env, &tv, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL) {
            free(rm);
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
                break;
            if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
                /* a frame other than a delivery (a cancel, a close): read it to see */
                amqp_frame_t f;
                if (amqp_simple_wait_frame_noblock(rs->conn, &f, &(struct timeval){0, 0}) == AMQP_STATUS_OK &&
                    f.frame_type == AMQP_FRAME_METHOD &&
                    (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                     f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
                     f.payload.method.id == AMQP_BASIC_CANCEL_METHOD)) {
                    log_warn("rabbitmq: the broker ended the consumer (method 0x%08x); connecting anew",
                             (unsigned)f.payload.method.id);
                    close_conn(&rs->conn);
                }
                break;
            }
            char why[512];
            rmq_reply_str(r, why, sizeof(why));
            log_warn("rabbitmq: consuming failed: %s; connecting anew (unacknowledged messages come again)", why);
            close_conn(&rs->conn);
            break;
        }
        rm->gen = rs->gen;
        struct source_msg *sm = &out[n++];
        memset(sm, 0, sizeof(*sm));
        sm->native = rm;
        sm->topic = rs->queues[0]; /* the queue the message came from, by its consumer tag */
        for (int q = 0; q < rs->n_queues; q++)
            if (rs->tags[q] && strlen(rs->tags[q]) == rm->env.consumer_tag.len &&
                memcmp(rs->tags[q], rm->env.consumer_tag.bytes, rm->env.consumer_tag.len) == 0)
                sm->topic = rs->queues[q];
        sm->partition = 0;
        sm->offset = (int64_t)rm->env.delivery_tag;
        sm->value = rm->env.message.body.bytes;
        sm->value_len = rm->env.message.body.len;
        const amqp_basic_properties_t *p = &rm->env.message.properties;
        sm->timestamp_ms = (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) ? (int64_t)p->timestamp * 1000 : 0;
        header_strings(rm, sm, rs->cfg);
    }
    return n;
}

static void r_release(struct source *base, struct source_msg *msgs, int n)
{
    (void)base;
    for (int i = 0; i < n; i++) {
        struct rmq_msg *rm = msgs[i].native;
        amqp_destroy_envelope(&rm->env);
        free(rm->headers);
        free(rm->strings);
        free(rm);
    }
}

/* Acknowledges msgs[0..n) (applied and committed), those of this connection only. */
static void r_done(struct source *base, const struct source_msg *msgs, int n)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)base;
    for (int i = 0; i < n && rs->conn; i++) {
        const struct rmq_msg *rm = msgs[i].native;
        if (rm->gen != rs->gen)
            continue; /* taken on a connection since closed: delivered again */
        if (amqp_basic_ack(rs->conn, 1, rm->env.delivery_tag, 0) != AMQP_STATUS_OK) {
            log_warn("rabbitmq: acknowledging failed; connecting anew (the message comes again)");
            close_conn(&rs->conn);
        }
    }
}

static int r_dead_letter(struct source *base, const struct source_msg *m, const struct source_header *extra,
                         size_t n_extra, int (*wait)(void *ctx), void *ctx, char *err, size_t errlen)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)base;
    const struct rmq_msg *rm = m->native;
    if (!rs->aux && !(rs->aux = open_conn(rs->cfg, err, errlen)))
        return -1;
    if (!rs->dlq_tag) { /* a fresh aux connection: confirm mode */
        amqp_confirm_select(rs->aux, 1);
        if (amqp_get_rpc_reply(rs->aux).reply_type != AMQP_RESPONSE_NORMAL) {
            close_conn(&rs->aux);
            return set_err(err, errlen, "confirm.select refused");
        }
    }
    amqp_basic_properties_t props = rm->env.message.properties;
    size_t n_old = (props._flags & AMQP_BASIC_HEADERS_FLAG) ? (size_t)props.headers.num_entries : 0;
    amqp_table_entry_t *entries = xcalloc(n_old + n_extra + 1, sizeof(*entries));
    for (size_t i = 0; i < n_old; i++)
        entries[i] = props.headers.entries[i];
    for (size_t i = 0; i < n_extra; i++) {
        entries[n_old + i].key = amqp_cstring_bytes(extra[i].name);
        entries[n_old + i].value.kind = AMQP_FIELD_KIND_UTF8;
        entries[n_old + i].value.value.bytes = (amqp_bytes_t){extra[i].len, (void *)extra[i].value};
    }
    props._flags |= AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props.headers = (amqp_table_t){(int)(n_old + n_extra), entries};
    int rc = amqp_basic_publish(rs->aux, 1, amqp_empty_bytes, amqp_cstring_bytes(rs->cfg->dead_letter_topic), 1, 0,
                                &props, rm->env.message.body);
    free(entries);
    if (rc != AMQP_STATUS_OK) {
        close_conn(&rs->aux);
        rs->dlq_tag = 0;
        return set_err(err, errlen, "publishing: %s", amqp_error_string2(rc));
    }
    uint64_t tag = ++rs->dlq_tag;
    int returned = 0;
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, 100000};
        rc = amqp_simple_wait_frame_noblock(rs->aux, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT) {
            if (wait(ctx))
                return 1;
            continue;
        }
        if (rc != AMQP_STATUS_OK || f.frame_type != AMQP_FRAME_METHOD) {
            if (rc == AMQP_STATUS_OK)
                continue;
            close_conn(&rs->aux);
            rs->dlq_tag = 0;
            return set_err(err, errlen, "waiting for the confirm: %s", amqp_error_string2(rc));
        }
        if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
            amqp_message_t ret;
            if (amqp_read_message(rs->aux, f.channel, &ret, 0).reply_type == AMQP_RESPONSE_NORMAL)
                amqp_destroy_message(&ret);
            returned = 1;
        } else if (f.payload.method.id == AMQP_BASIC_ACK_METHOD || f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            const amqp_basic_ack_t *a = f.payload.method.decoded; /* ack and nack start alike */
            if (a->delivery_tag < tag)
                continue;
            if (f.payload.method.id == AMQP_BASIC_NACK_METHOD)
                return set_err(err, errlen, "the broker refused it (basic.nack)");
            if (returned)
                return set_err(err, errlen, "no queue named '%s' (basic.return): declare it",
                               rs->cfg->dead_letter_topic);
            return 0;
        } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                   f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
            close_conn(&rs->aux);
            rs->dlq_tag = 0;
            return set_err(err, errlen, "the broker closed the dead-letter channel");
        }
    }
}

static int r_remake_wanted(const struct source *base)
{
    (void)base;
    return 0;
}

static int r_remake(struct source *base, char *err, size_t errlen)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)base;
    close_conn(&rs->conn);
    return start_consuming(rs, err, errlen);
}

static int r_assigned(const struct source *base)
{
    const struct rabbitmq_source *rs = (const struct rabbitmq_source *)base;
    return rs->conn ? rs->n_queues : 0;
}

static const struct source_lag *r_lags(const struct source *base, int *n_lags)
{
    const struct rabbitmq_source *rs = (const struct rabbitmq_source *)base;
    *n_lags = rs->n_lags;
    return rs->lags;
}

/* Closes the connections: unacknowledged messages go back to their queues. */
static void r_free(struct source *base)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)base;
    if (rs->conn) {
        amqp_connection_close(rs->conn, AMQP_REPLY_SUCCESS);
        close_conn(&rs->conn);
    }
    close_conn(&rs->aux);
    for (int i = 0; i < rs->n_queues; i++) {
        free(rs->queues[i]);
        free(rs->tags[i]);
    }
    free(rs);
}

static const struct source_ops rabbitmq_ops = {
    .name = "rabbitmq",
    .free = r_free,
    .poll = r_poll,
    .release = r_release,
    .done = r_done,
    .dead_letter = r_dead_letter,
    .remake_wanted = r_remake_wanted,
    .remake = r_remake,
    .assigned = r_assigned,
    .lags = r_lags,
};

struct source *source_rabbitmq_new(const struct source_config *cfg, char *err, size_t errlen)
{
    struct rabbitmq_source *rs = xcalloc(1, sizeof(*rs));
    rs->base.ops = &rabbitmq_ops;
    rs->cfg = cfg;
    char *list = xstrdup(cfg->rabbitmq_queues), *save = NULL;
    for (char *q = strtok_r(list, ",", &save); q; q = strtok_r(NULL, ",", &save)) {
        if (rs->n_queues == MAX_QUEUES) {
            free(list);
            r_free(&rs->base);
            set_err(err, errlen, "INBOX_RABBITMQ_QUEUES: at most %d queues", MAX_QUEUES);
            return NULL;
        }
        rs->queues[rs->n_queues++] = xstrdup(q);
    }
    free(list);
    connect_if_due(rs); /* an unreachable broker is retried from poll, as Kafka's would be */
    return &rs->base;
}

int source_rabbitmq_check(const struct source_config *cfg, char *err, size_t errlen)
{
    struct rabbitmq_source *rs = (struct rabbitmq_source *)source_rabbitmq_new(cfg, err, errlen);
    if (!rs)
        return -1;
    int rc = 0;
    if (!rs->conn) {
        rs->next_connect_ms = 0;
        rc = start_consuming(rs, err, errlen);
    }
    r_free(&rs->base);
    return rc;
}
