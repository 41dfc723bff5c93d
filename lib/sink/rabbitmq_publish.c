/* The RabbitMQ sink (rabbitmq_int.h), on its thread: publishing with mandatory set, and the
 * broker's frames that answer it: basic.ack and basic.nack (confirms), basic.return (matched
 * to the oldest unconfirmed message with its id), channel and connection closes, and
 * connection.blocked. */
#include "sink/rabbitmq_int.h"

#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

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
            rmq_finish(sk, done, j, RMQ_ERR_NACK, 1);
        else if (j->returned)
            rmq_finish(sk, done, j, RMQ_ERR_UNROUTABLE, 0);
        else
            rmq_finish(sk, done, j, 0, 1);
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
int rmq_read_frames(struct rabbitmq_sink *sk, struct job_list *done)
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
            rmq_broken(sk, done, RMQ_ERR_CONNECTION, why);
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
                rmq_broken(sk, done, RMQ_ERR_CONNECTION, why);
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
            rmq_broken(sk, done, RMQ_ERR_CONNECTION, why);
            return -1;
        }
        case AMQP_CONNECTION_CLOSE_METHOD: {
            const amqp_connection_close_t *c = f.payload.method.decoded;
            snprintf(why, sizeof(why), "the broker closed the connection: %u %.*s", c->reply_code,
                     (int)c->reply_text.len, (const char *)c->reply_text.bytes);
            rmq_broken(sk, done, RMQ_ERR_CONNECTION, why);
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
void rmq_publish(struct rabbitmq_sink *sk, struct job_list *todo, struct job_list *done)
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
                rmq_finish(sk, done, j, RMQ_ERR_CONNECTION, 0);
                continue;
            }
            rmq_fail_all(sk, done, todo, RMQ_ERR_CONNECTION, 0);
            return;
        }
        todo->head = j->next;
        if (!todo->head)
            todo->tail = &todo->head;
        if (sk->keys && j->key && !j->owns_key) { /* strict key order */
            struct key_slot **pp = rmq_key_find(sk, j->key);
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
                rmq_broken(sk, done, RMQ_ERR_CONFIRM_TIMEOUT, why);
                sk->next_connect_ms = mono_ms();
            } else {
                snprintf(why, sizeof(why), "publishing failed: %s", amqp_error_string2(rc));
                rmq_broken(sk, done, RMQ_ERR_CONNECTION, why);
            }
            continue;
        }
        if (++n % 256 == 0) { /* confirms keep coming while a long queue is sent */
            rmq_read_frames(sk, done);
            pthread_mutex_lock(&sk->mu);
            break_gen = sk->break_gen;
            pthread_mutex_unlock(&sk->mu);
        }
    }
}

void rmq_check_confirm_timeout(struct rabbitmq_sink *sk, struct job_list *done)
{
    struct job *oldest = sk->out.head;
    if (!sk->conn || !oldest || mono_ms() - oldest->sent_ms < sk->cfg->rabbitmq_confirm_timeout_ms)
        return;
    char why[256];
    snprintf(why, sizeof(why), "no publisher confirm for row %lld within %d ms%s", (long long)oldest->row_id,
             sk->cfg->rabbitmq_confirm_timeout_ms, sk->blocked ? " (the broker blocks publishing)" : "");
    rmq_broken(sk, done, RMQ_ERR_CONFIRM_TIMEOUT, why);
    sk->next_connect_ms = mono_ms();
}
