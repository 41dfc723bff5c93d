/* Exactly-once into Kafka (OUTBOX_EXACTLY_ONCE; kafka_int.h): the producer's messages go in
 * Kafka transactions, each with a progress record of every row committed to Kafka that
 * PostgreSQL has not been seen to record, and their reports reach the relay only once the
 * transaction committed (so a row is recorded in PostgreSQL only after its commit). A
 * producer first fences every older one of its transactional.id (init_transactions: their
 * open transaction is aborted) and reads the last progress record with read_committed; the
 * relay records those rows before it claims. The calls that block (init, commit, abort, the
 * read) run on a thread of the sink's own, one job at a time, so the loop (lease renewals,
 * reports) never waits on a broker. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/kafka.h"
#include "core/log.h"
#include "core/settings.h"
#include "sink/progress.h"
#include "sink/kafka_int.h"

#define JOB_TIMEOUT_MS 1000    /* each blocking call; retriable timeouts are called again */
#define TXN_MAX_ROWS 8000      /* rows in a progress record (committed and not recorded; with
                                * the rows kept for the standbys, at most EOS_TAIL_MAX_ROWS more:
                                * a record stays under about 900 KB) */
static const double commit_bounds[] = {0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5};
#define ROW_OPAQUE(i) ((void *)(intptr_t)((i) + 1)) /* NULL: the progress record's message */

/* ---- the thread ------------------------------------------------------------------ */

/* init_transactions, called again while it times out (retriable) and the job stands;
 * said after 3 s, then every 30 s. */
static rd_kafka_error_t *init_fence(struct kafka_sink *sk, rd_kafka_t *rk)
{
    int64_t due = mono_ms() + 3000;
    for (;;) {
        rd_kafka_error_t *e = rd_kafka_init_transactions(rk, JOB_TIMEOUT_MS);
        if (!e || !rd_kafka_error_is_retriable(e) || kafka_txn_cancelled(sk->txn))
            return e;
        if (mono_ms() >= due) {
            char hint[400];
            log_warn("kafka: exactly-once: fencing older producers (init_transactions) still fails: "
                     "%s%s; nothing is published until it succeeds; trying again", rd_kafka_error_string(e),
                     kafka_txn_hint(sk->cfg, rd_kafka_error_code(e), hint, sizeof(hint)));
            due = mono_ms() + 30000;
        }
        rd_kafka_error_destroy(e);
    }
}

/* The pause after a commit or an abort (OUTBOX_TRANSACTION_GAP_MS), while the transaction
 * still ends: no message is taken meanwhile. The commit's answer (EndTxn) comes once the
 * coordinator logged it as prepared; it writes the markers after. An AddPartitionsToTxn for
 * the next transaction sent before they are written is answered CONCURRENT_TRANSACTIONS, and
 * librdkafka sends it again only after 20 ms (on one broker: 46 % of those sent within 3 ms
 * of the commit's answer, 6 % of those sent later; docs/PERFORMANCE.md). An abort writes
 * markers too. The loop serves reports meanwhile. */
static void gap(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void *txn_thread(void *arg)
{
    struct kafka_sink *sk = arg;
    struct kafka_txn *t = sk->txn;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->quit && (t->job == JOB_NONE || t->done_job != JOB_NONE))
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->quit)
            break;
        enum txn_job job = t->job;
        rd_kafka_t *rk = sk->rk;
        pthread_mutex_unlock(&t->mu);
        rd_kafka_error_t *e = NULL;
        char msg[1024] = "";
        int64_t ended;
        if (job == JOB_INIT) {
            e = t->initialized ? NULL : init_fence(sk, rk);
            t->initialized = !e;
            if (!e && kafka_txn_read(sk, msg, sizeof(msg)) != 0 && !msg[0])
                snprintf(msg, sizeof(msg), "reading the progress record failed");
            ended = mono_ms();
        } else {
            e = job == JOB_COMMIT ? rd_kafka_commit_transaction(rk, JOB_TIMEOUT_MS)
                                  : rd_kafka_abort_transaction(rk, JOB_TIMEOUT_MS);
            ended = mono_ms();
            if (!e && sk->cfg->transaction_gap_ms > 0)
                gap(sk->cfg->transaction_gap_ms);
        }
        pthread_mutex_lock(&t->mu);
        t->ended_ms = ended; /* the commit histogram leaves the gap out */
        t->job = JOB_NONE;
        t->done_job = job;
        t->done_err = e;
        snprintf(t->done_msg, sizeof(t->done_msg), "%s", msg);
        pthread_cond_broadcast(&t->cv);
        wake_pipe_poke(t->wake[1]);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

static void ask(struct kafka_txn *t, enum txn_job job)
{
    pthread_mutex_lock(&t->mu);
    t->job = job;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void free_rec(struct kafka_txn *t)
{
    for (size_t i = 0; i < t->n_rec; i++)
        free(t->rec_event_id[i]);
    free(t->rec_id);
    free(t->rec_event_id);
    t->rec_id = NULL;
    t->rec_event_id = NULL;
    t->n_rec = 0;
}

/* Waits (loop thread) until the thread has no job: the one running ends within its timeout
 * (an init's read is cancelled). Its result is dropped. */
static void wait_idle(struct kafka_txn *t)
{
    pthread_mutex_lock(&t->mu);
    t->cancel = 1;
    for (;;) {
        if (t->done_job != JOB_NONE) { /* a result not taken: the thread waits for that */
            if (t->done_err)
                rd_kafka_error_destroy(t->done_err);
            t->done_err = NULL;
            t->done_job = JOB_NONE;
            pthread_cond_broadcast(&t->cv);
        }
        if (t->job == JOB_NONE)
            break;
        pthread_cond_wait(&t->cv, &t->mu);
    }
    t->cancel = 0;
    pthread_mutex_unlock(&t->mu);
    free_rec(t);
}

/* ---- the loop's side ------------------------------------------------------------- */

/* Every message of the transaction is reported as failed: its own error, or code. The
 * list is detached first: the reports may reach code that produces again. */
static void fail_held(struct kafka_sink *sk, int code, int report)
{
    struct kafka_txn *t = sk->txn;
    struct txn_held *h = t->held;
    size_t n = t->n_held;
    t->held = NULL;
    t->n_held = t->cap_held = t->outstanding = 0;
    t->failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (report)
            kafka_report(sk, h[i].row_id, h[i].err ? h[i].err : code, h[i].topic,
                         h[i].err ? h[i].maybe_persisted : 0);
        free(h[i].event_id);
    }
    free(h);
}

/* The transaction committed: its rows join the committed ones, and the relay hears of
 * their delivery only now. */
static void commit_ok(struct kafka_sink *sk)
{
    struct kafka_txn *t = sk->txn;
    if (t->failed) { /* the progress record's report failed, yet the commit went: whether it is
                      * in Kafka is not known. Nothing is reported delivered; the producer is made
                      * anew, and its fence and read of the record tell what committed. */
        t->state = TXN_CLOSED;
        t->epoch = 0;
        log_error("kafka: exactly-once: a transaction committed although its progress record's "
                  "delivery failed; the producer is made anew and reads the record again");
        fail_held(sk, RD_KAFKA_RESP_ERR__FATAL, 1);
        if (!sk->fatal_reported) {
            sk->fatal_reported = 1;
            sk->cb.on_fatal(sk->ctx, "exactly-once: a progress record's delivery failed in a committed transaction");
        }
        return;
    }
    t->state = TXN_IDLE;
    t->stats.committed++;
    histogram_observe(&t->stats.commit, (double)(t->ended_ms - t->ending_ms) / 1000.0);
    struct txn_held *h = t->held;
    size_t n = t->n_held;
    t->held = NULL;
    t->n_held = t->cap_held = t->outstanding = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i].event_id)
            progress_put(&t->committed, h[i].row_id, h[i].event_id);
    for (size_t i = 0; i < n; i++) {
        kafka_report(sk, h[i].row_id, 0, NULL, 0);
        free(h[i].event_id);
    }
    free(h);
}

void kafka_txn_note_fatal(struct kafka_sink *sk, int code)
{
    struct kafka_txn *t = sk->txn;
    if (!t->fence_counted && (code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
                              code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH)) {
        t->fence_counted = 1; /* once per producer: its job's error and its error event both say so */
        t->stats.fenced++;
    }
}

/* Fenced by a newer producer of the id, or another fatal error: nothing of the open
 * transaction committed; the relay makes the producer anew (on_fatal), which fences again
 * before it produces. */
static void txn_fatal(struct kafka_sink *sk, const rd_kafka_error_t *e, const char *what)
{
    struct kafka_txn *t = sk->txn;
    kafka_txn_note_fatal(sk, rd_kafka_error_code(e));
    char why[600];
    snprintf(why, sizeof(why), "exactly-once: %s: %s", what, rd_kafka_error_string(e));
    log_error("kafka: %s (the transaction's rows stay PENDING; the producer is made anew and fences "
              "older ones again before it produces)", why);
    t->state = TXN_CLOSED;
    t->epoch = 0;
    fail_held(sk, RD_KAFKA_RESP_ERR__FATAL, 1);
    if (!sk->fatal_reported) {
        sk->fatal_reported = 1;
        sk->cb.on_fatal(sk->ctx, why);
    }
}

/* The progress record of this transaction: every row committed and not recorded (or kept
 * for the standbys), and the transaction's own so far, by id and event id. early: the first
 * record, right after the first row, which only registers the partition early: it lists
 * that row alone (the record at the end comes later in the partition and commits with it,
 * so a takeover never reads the first one as the table's last), and one that cannot be
 * queued is left out (0), not a reason to abort. */
static int produce_progress(struct kafka_sink *sk, int early)
{
    struct kafka_txn *t = sk->txn;
    struct progress_rows mine = {0};
    for (size_t i = 0; i < t->n_held; i++)
        if (t->held[i].event_id)
            progress_put(&mine, t->held[i].row_id, t->held[i].event_id);
    struct strbuf sb;
    strbuf_init(&sb);
    progress_value(early ? NULL : &t->committed, &mine, &sb);
    progress_clear(&mine);
    const char *key = sk->cfg->progress_key;
    rd_kafka_resp_err_t err = rd_kafka_producev(
        sk->rk, RD_KAFKA_V_RKT(t->progress_rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_PARTITION(t->progress_part), /* where kafka_txn_read reads it */
        RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE(sb.buf, sb.len), RD_KAFKA_V_OPAQUE(NULL),
        RD_KAFKA_V_END);
    strbuf_destroy(&sb);
    if (err && early) {
        log_debug("kafka: exactly-once: the first progress record was left out: %s", rd_kafka_err2str(err));
        return 0;
    }
    if (err)
        log_warn("kafka: exactly-once: the progress record could not be produced: %s; the "
                 "transaction is aborted", rd_kafka_err2str(err));
    return err ? -1 : 0;
}

/* Every message of the open transaction is reported on: commit it with its progress
 * record, or abort it when one failed. */
void kafka_txn_end(struct kafka_sink *sk)
{
    struct kafka_txn *t = sk->txn;
    ev_timer_stop(sk->loop, &t->hold_timer); /* (a hold's, if any) */
    t->state = TXN_ENDING;
    t->ending_ms = mono_ms();
#ifdef OUTBOX_TEST_HOOKS
    if (t->test_kill_before_commit > 0 && t->rows_produced >= (uint64_t)t->test_kill_before_commit) {
        log_warn("test hook: SIGKILL before committing a transaction of %zu messages", t->n_held);
        kill(getpid(), SIGKILL);
    }
#endif
    if (!t->failed && produce_progress(sk, 0) != 0)
        t->failed = 1;
    ask(t, t->failed ? JOB_ABORT : JOB_COMMIT);
}

enum sink_queued kafka_txn_admit(struct kafka_sink *sk, int64_t row_id, void **opaque, int *errp)
{
    struct kafka_txn *t = sk->txn;
    *errp = 0;
    if (t->state == TXN_CLOSED || t->state == TXN_OPENING) {
        *errp = RD_KAFKA_RESP_ERR__STATE; /* not fenced in yet: the relay does not claim then */
        return SINK_FAILED;
    }
    /* a dead-letter copy (row_id < 0) goes in a transaction of its own, so that a failing
     * dead-letter topic aborts no row's transaction */
    int mixed = t->state == TXN_OPEN && t->n_held && (row_id < 0) != (t->held[0].row_id < 0);
    size_t unrecorded = t->committed.n - (t->kept < t->committed.n ? t->kept : t->committed.n);
    if (!t->ready || t->state == TXN_ENDING || mixed || unrecorded + t->n_held >= TXN_MAX_ROWS ||
        (t->state == TXN_OPEN && t->n_held && mono_ms() - t->opened_ms >= TXN_MAX_MS))
        return SINK_FULL; /* goes on once the transaction ended, or rows were recorded */
    if (t->state == TXN_IDLE) {
        rd_kafka_error_t *e = rd_kafka_begin_transaction(sk->rk);
        if (e) {
            *errp = rd_kafka_error_code(e);
            log_warn("kafka: exactly-once: beginning a transaction: %s", rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
            return SINK_FAILED;
        }
        t->state = TXN_OPEN;
    }
    if (!t->n_held)
        t->opened_ms = mono_ms();
    *opaque = ROW_OPAQUE(t->n_held);
    return SINK_QUEUED;
}

void kafka_txn_held(struct kafka_sink *sk, rd_kafka_topic_t *rkt, int64_t row_id, const char *event_id)
{
    struct kafka_txn *t = sk->txn;
    if (t->n_held == t->cap_held) {
        t->cap_held = t->cap_held ? t->cap_held * 2 : 256;
        t->held = xrealloc(t->held, t->cap_held * sizeof(*t->held));
    }
    t->held[t->n_held++] = (struct txn_held){row_id, row_id > 0 && event_id ? xstrdup(event_id) : NULL, 0,
                                             rd_kafka_topic_name(rkt), 0};
    t->outstanding++;
    t->rows_produced++;
    /* A first progress record right after the transaction's first row: the progress
     * partition joins the transaction while the rows go, so the record at the end (the one
     * that counts: later in the partition, committed with this one) waits for no
     * AddPartitionsToTxn round trip of its own before the commit. */
    if (t->n_held == 1 && row_id > 0 && !t->failed)
        produce_progress(sk, 1);
}

void kafka_txn_report(struct kafka_sink *sk, void *opaque, int err, const char *topic, int maybe_persisted)
{
    struct kafka_txn *t = sk->txn;
    (void)topic;
    if (!opaque) { /* the progress record: the commit fails with it */
        long held;
        char hint[400];
        int purged = err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
        if (err && !purged && log_limit_due(&t->progress_err_log, 30000, &held)) /* (a purge follows another error) */
            log_warn("kafka: exactly-once: a progress record's delivery failed: %s%s; its transaction "
                     "is aborted and its rows go again", rd_kafka_err2str((rd_kafka_resp_err_t)err),
                     kafka_txn_hint(sk->cfg, err, hint, sizeof(hint)));
        if (err)
            t->failed = 1;
        return;
    }
    size_t i = (size_t)(intptr_t)opaque - 1;
    if ((t->state != TXN_OPEN && t->state != TXN_ENDING) || i >= t->n_held)
        return;
    if (err) {
        t->held[i].err = err;
        t->held[i].maybe_persisted = maybe_persisted;
        t->failed = 1;
    }
    if (t->outstanding)
        t->outstanding--;
    if (t->state == TXN_OPEN && t->outstanding == 0 && !kafka_txn_held_open(sk))
        kafka_txn_end(sk);
}

static void init_done(struct kafka_sink *sk, rd_kafka_error_t *e, const char *msg)
{
    struct kafka_txn *t = sk->txn;
    if (t->state != TXN_OPENING) {
        free_rec(t);
        return;
    }
    if (e || msg[0]) {
        char why[1500], hint[400];
        snprintf(why, sizeof(why), "%s%s", e ? rd_kafka_error_string(e) : msg,
                 e ? kafka_txn_hint(sk->cfg, rd_kafka_error_code(e), hint, sizeof(hint)) : "");
        t->state = TXN_CLOSED;
        free_rec(t);
        sk->cb.on_recovered(sk->ctx, 0, 0, NULL, NULL, 0, why); /* asked again later */
        if (e && rd_kafka_error_is_fatal(e))
            txn_fatal(sk, e, "fencing older producers (init_transactions)");
        return;
    }
    t->state = TXN_IDLE;
    t->epoch = ++t->epochs;
    t->ready = 0; /* until the relay has recorded the record's rows (kafka_txn_ready) */
    /* a handle asks for the topic's leader now: a message produced by name to a topic the
     * producer has not met waits for its once-a-second scan (seen: every first commit of a
     * producer took a second more) */
    if (!t->progress_rkt)
        t->progress_rkt = rd_kafka_topic_new(sk->rk, sk->cfg->progress_topic, NULL);
    sk->cb.on_recovered(sk->ctx, 0, t->epoch, t->rec_id, t->rec_event_id, t->n_rec, NULL);
    free_rec(t);
}

static void ended(struct kafka_sink *sk, enum txn_job job, rd_kafka_error_t *e)
{
    struct kafka_txn *t = sk->txn;
    if (t->state != TXN_ENDING)
        return;
    if (!e && job == JOB_COMMIT) {
        commit_ok(sk);
    } else if (!e) {
        t->state = TXN_IDLE;
        t->stats.aborted++;
        fail_held(sk, KAFKA_ERR_TXN_ABORTED, 1);
    } else if (rd_kafka_error_is_retriable(e)) {
        long held;
        if (mono_ms() - t->ending_ms >= 5000 && log_limit_due(&t->retry_log, 10000, &held))
            log_warn("kafka: exactly-once: %s a transaction has taken %lld ms so far (%s); called again",
                     job == JOB_COMMIT ? "committing" : "aborting", (long long)(mono_ms() - t->ending_ms),
                     rd_kafka_error_string(e));
        ask(t, job); /* timed out: called again, it resumes */
    } else if (job == JOB_COMMIT && rd_kafka_error_txn_requires_abort(e)) {
        log_warn("kafka: exactly-once: a transaction's commit failed (%s); it is aborted and its "
                 "rows go again", rd_kafka_error_string(e));
        ask(t, JOB_ABORT);
    } else {
        txn_fatal(sk, e, job == JOB_COMMIT ? "committing a transaction" : "aborting a transaction");
    }
}

static void done_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    struct kafka_sink *sk = w->data;
    struct kafka_txn *t = sk->txn;
    wake_pipe_drain(t->wake[0]);
    char msg[1024];
    pthread_mutex_lock(&t->mu);
    enum txn_job job = t->done_job;
    rd_kafka_error_t *e = t->done_err;
    snprintf(msg, sizeof(msg), "%s", t->done_msg);
    t->done_job = JOB_NONE;
    t->done_err = NULL;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (job == JOB_INIT)
        init_done(sk, e, msg);
    else if (job != JOB_NONE)
        ended(sk, job, e);
    if (e)
        rd_kafka_error_destroy(e);
}

/* Aborts the open transaction on the thread while the loop serves the producer's reports
 * (abort waits for them), within timeout_ms; else it is left to the broker (the next
 * producer's fence, or transaction.timeout.ms, aborts it). */
static void abort_serving(struct kafka_sink *sk, int timeout_ms)
{
    struct kafka_txn *t = sk->txn;
    rd_kafka_purge(sk->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    int64_t deadline = mono_ms() + timeout_ms;
    rd_kafka_error_t *e = NULL;
    for (int done = 0; !done;) {
        ask(t, JOB_ABORT);
        for (;;) {
            sk->serve_wait(sk, 20);
            pthread_mutex_lock(&t->mu);
            int ended = t->done_job != JOB_NONE;
            if (ended) {
                e = t->done_err;
                t->done_err = NULL;
                t->done_job = JOB_NONE;
                pthread_cond_broadcast(&t->cv);
            }
            pthread_mutex_unlock(&t->mu);
            if (ended)
                break;
        }
        done = !e || !rd_kafka_error_is_retriable(e) || mono_ms() >= deadline;
        if (e && !done) {
            rd_kafka_error_destroy(e);
            e = NULL;
        }
    }
    if (e) {
        log_warn("kafka: exactly-once: aborting the open transaction: %s (left to the broker: the "
                 "next producer's fence or transaction.timeout.ms aborts it)", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    t->stats.aborted++; /* by this call or by the broker: nothing of it commits */
}

void kafka_txn_drop(struct kafka_sink *sk, int timeout_ms, int report)
{
    struct kafka_txn *t = sk->txn;
    int was_opening = t->state == TXN_OPENING;
    wait_idle(t); /* a commit that ended meanwhile is in the progress record: recovered */
    if ((t->state == TXN_OPEN || t->state == TXN_ENDING) && sk->rk) {
        t->state = TXN_ENDING; /* the reports served meanwhile end nothing */
        abort_serving(sk, timeout_ms < 2000 ? timeout_ms : 2000);
    }
    t->state = TXN_CLOSED;
    t->epoch = 0;
    t->ready = 0;
    t->fence_counted = 0;
    if (t->progress_rkt) /* before its producer goes */
        rd_kafka_topic_destroy(t->progress_rkt);
    t->progress_rkt = NULL;
    t->initialized = 0; /* the producer goes (kafka.c) */
    fail_held(sk, KAFKA_ERR_TXN_ABORTED, report);
    progress_clear(&t->committed); /* the next producer reads them from the progress record */
    t->kept = 0;
    if (was_opening && report) /* the fence and read asked for will not answer: ask again */
        sk->cb.on_recovered(sk->ctx, 0, 0, NULL, NULL, 0, "the producer was made anew while it fenced");
}

int kafka_txn_open(struct sink *base, int group)
{
    (void)group; /* one producer: its group */
    struct kafka_sink *sk = (struct kafka_sink *)base;
    struct kafka_txn *t = sk->txn;
    if (!t || !sk->rk || t->state != TXN_CLOSED)
        return -1;
    t->state = TXN_OPENING;
    ask(t, JOB_INIT);
    return 0;
}

uint64_t kafka_txn_epoch(const struct sink *base, int group)
{
    (void)group;
    const struct kafka_txn *t = ((const struct kafka_sink *)base)->txn;
    return t && t->state != TXN_CLOSED && t->state != TXN_OPENING ? t->epoch : 0;
}

void kafka_txn_ready(struct sink *base, int group, uint64_t epoch)
{
    (void)group;
    struct kafka_txn *t = ((struct kafka_sink *)base)->txn;
    if (t && epoch && epoch == t->epoch)
        t->ready = 1;
}

int kafka_txn_new(struct kafka_sink *sk, char *err, size_t errlen)
{
    struct kafka_txn *t = xcalloc(1, sizeof(*t));
    if (wake_pipe_open(t->wake) != 0) {
        free(t);
        return set_err(err, errlen, "pipe: %s", strerror(errno));
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    histogram_init(&t->stats.commit, commit_bounds, ARRAY_LEN(commit_bounds));
    sk->txn = t;
    if (pthread_create(&t->thread, NULL, txn_thread, sk) != 0) {
        kafka_txn_free(sk);
        return set_err(err, errlen, "exactly-once: cannot start the transactions' thread");
    }
    t->thread_on = 1;
    ev_io_init(&t->wake_io, done_cb, t->wake[0], EV_READ);
    t->wake_io.data = sk;
    ev_io_start(sk->loop, &t->wake_io);
#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("OUTBOX_TESTHOOK_KILL_BEFORE_COMMIT_AFTER");
    t->test_kill_before_commit = hook ? atoll(hook) : 0;
#endif
    return 0;
}

void kafka_txn_free(struct kafka_sink *sk)
{
    struct kafka_txn *t = sk->txn;
    if (!t)
        return;
    if (t->thread_on) {
        pthread_mutex_lock(&t->mu);
        t->quit = 1;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
        ev_io_stop(sk->loop, &t->wake_io);
        ev_timer_stop(sk->loop, &t->hold_timer);
    }
    if (t->done_err)
        rd_kafka_error_destroy(t->done_err);
    fail_held(sk, 0, 0);
    progress_clear(&t->committed);
    free_rec(t);
    close(t->wake[0]);
    close(t->wake[1]);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
    sk->txn = NULL;
}
