/* The RabbitMQ sink's inside (rabbitmq.h is its outside), shared by its four files:
 *   rabbitmq.c          the loop thread's side: the sink's operations, serving completions,
 *                       the watchdog that cuts a stuck send;
 *   rabbitmq_conn.c     the sink's thread: opening a connection, the thread's loop;
 *   rabbitmq_publish.c  on the thread: publishing, confirms and returns;
 *   rabbitmq_job.c      a message as a job: built whole, held by its key (strict key order),
 *                       finished with its outcome; a break, which fails what is unconfirmed
 *                       or queued.
 * Each file calls only those listed below it (test/circles.sh). Marked "thread" below: runs
 * on the sink's thread only. */
#ifndef OUTBOX_SINK_RABBITMQ_INT_H
#define OUTBOX_SINK_RABBITMQ_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/amqp.h"
#include "sink/rabbitmq.h"


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


static inline void list_init(struct job_list *l)
{
    l->head = NULL;
    l->tail = &l->head;
}

static inline void list_push(struct job_list *l, struct job *j)
{
    j->next = NULL;
    *l->tail = j;
    l->tail = &j->next;
}

static inline void list_append(struct job_list *l, struct job_list *more)
{
    if (!more->head)
        return;
    *l->tail = more->head;
    l->tail = more->tail;
    list_init(more);
}

/* rabbitmq_job.c */
/* The message whole, in one allocation (caller frees). */
struct job *rmq_job_new(const struct sink_config *cfg, const struct message *msg, const char *key,
                    const char *value, size_t value_len, int64_t timestamp_ms, int64_t row_id);
/* thread: the key's slot, or where a new one goes */
struct key_slot **rmq_key_find(struct rabbitmq_sink *sk, const char *key);
/* thread: every held and ready message fails unsent and every key's place is freed */
void rmq_keys_drop(struct rabbitmq_sink *sk, struct job_list *done, int err);
/* thread: j's outcome, onto done; its key's place passes on */
void rmq_finish(struct rabbitmq_sink *sk, struct job_list *done, struct job *j, int err, int maybe);
/* thread: finish every job of l */
void rmq_fail_all(struct rabbitmq_sink *sk, struct job_list *done, struct job_list *l, int err, int maybe);

/* rabbitmq_job.c: a break */
/* thread: drops the connection, if any */
void rmq_disconnect(struct rabbitmq_sink *sk);
/* thread: the connection is gone or no longer trusted: what is unconfirmed fails, possibly
 * persisted, and so does what is queued (unsent); connecting anew after the backoff */
void rmq_broken(struct rabbitmq_sink *sk, struct job_list *done, int err, const char *why);

/* rabbitmq_conn.c */
/* A connection logged in, with channel 1 open in confirm mode and the exchange there, or
 * NULL with err (the URL's password never in it). */
amqp_connection_state_t rmq_open(const struct sink_config *cfg, char *err, size_t errlen);
/* the thread's body (pthread_create's start routine) */
void *rmq_thread_main(void *arg);

/* rabbitmq_publish.c */
/* thread: reads every frame that has come; 0, or -1 once the connection is broken */
int rmq_read_frames(struct rabbitmq_sink *sk, struct job_list *done);
/* thread: publishes the jobs of todo; those left when the connection breaks fail, never sent */
void rmq_publish(struct rabbitmq_sink *sk, struct job_list *todo, struct job_list *done);
/* thread: breaks the connection once the oldest confirm is later than the confirm timeout */
void rmq_check_confirm_timeout(struct rabbitmq_sink *sk, struct job_list *done);

#endif
