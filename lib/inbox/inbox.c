/* outbox-inbox's loop: one thread, one message at a time, in the order the consumer
 * delivers them (per partition, offset order). For each message:
 *
 *   BEGIN; INSERT the dedupe record ON CONFLICT DO NOTHING (a FAILED record is retried);
 *   if it is new, SELECT handler(...); COMMIT; then store the offset.
 *
 * The database's unique key, not a lookup, decides what is a duplicate, so two consumers
 * racing on one message (a rebalance) apply it once: the second waits on the first's
 * insert and then finds it. The offset never runs ahead of the database: a crash between
 * the commit and the store redelivers the message, which is then a duplicate. libpq is
 * used blocking: nothing else needs the thread while a message is applied, and the
 * consumer's poll paces the loop. */
#include "inbox/inbox.h"

#include <stdlib.h>
#include <string.h>

#include "inbox/inbox_int.h"
#include "core/log.h"

static const double completion_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
static const double handler_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5};

struct inbox *inbox_new(const struct inbox_config *cfg, volatile sig_atomic_t *stop)
{
    struct inbox *ib = xcalloc(1, sizeof(*ib));
    ib->cfg = cfg;
    ib->stop = stop;
    histogram_init(&ib->completion, completion_bounds, ARRAY_LEN(completion_bounds));
    histogram_init(&ib->handler_time, handler_bounds, ARRAY_LEN(handler_bounds));
#ifdef OUTBOX_TEST_HOOKS
    const char *hook = getenv("INBOX_TESTHOOK_KILL_AFTER_COMMIT");
    ib->kill_after_commit = hook ? atol(hook) : 0;
#endif
    return ib;
}

/* Closes the source (committing what was applied, leaving the group, flushing the dead
 * letters), and frees everything. */
void inbox_free(struct inbox *ib)
{
    if (!ib)
        return;
    if (ib->src)
        ib->src->ops->free(ib->src);
    if (ib->conn)
        PQfinish(ib->conn);
    http_free(ib->http);
    free(ib->apply_sql);
    free(ib->fail_sql);
    free(ib->function);
    free(ib->retention_sql);
    free(ib);
}

int inbox_run(const struct inbox_config *cfg, volatile sig_atomic_t *stop)
{
    struct inbox *ib = inbox_new(cfg, stop);
    char err[1024];
    int code = OUTBOX_EXIT_OK;
    if (cfg->http_addr[0] && !(ib->http = http_new(cfg->http_addr, err, sizeof(err)))) {
        log_error("http: %s", err);
        code = OUTBOX_EXIT_USAGE;
        goto out;
    }
    inbox_publish(ib, 1);
    if (inbox_ensure_connected(ib))
        goto out;
    ib->pg_reconnects = 0;
    if (inbox_resolve(ib->conn, cfg, &ib->function, err, sizeof(err)) != 0) {
        log_error("%s", err);
        code = OUTBOX_EXIT_FAILED;
        goto out;
    }
    inbox_build_statements(ib);
    inbox_config_source(cfg, &ib->src_cfg);
    if (!(ib->src = source_new(&ib->src_cfg, err, sizeof(err)))) {
        log_error("%s", err);
        code = OUTBOX_EXIT_USAGE;
        goto out;
    }
    const char *dedupe = cfg->n_key_parts ? cfg->dedupe_key
                         : strcmp(cfg->event_id_header, "auto") == 0 ? "event_id, else id, else ce_source + ce_id"
                                                                      : cfg->event_id_header;
    if (cfg->rabbitmq)
        log_info("inbox: consuming RabbitMQ queues %s into %s with %s (dedupe key: %s; message_id when the "
                 "message has no such header)", cfg->rabbitmq_queues, cfg->table, cfg->handler, dedupe);
    else
        log_info("inbox: consuming %s in group %s into %s with %s (dedupe key: %s)", cfg->topics,
                 inbox_config_has_kafka(cfg, "group.id") ? "(INBOX_KAFKA_GROUP_ID)" : "outbox-inbox.<INBOX_NAME>",
                 cfg->table, cfg->handler, dedupe);
    ib->last_retention = mono_ms() - RETENTION_EVERY_MS + 5000;
    struct source_msg batch[INBOX_BATCH_MAX];
    struct incoming *in = xcalloc(INBOX_BATCH_MAX, sizeof(*in));
    while (!*stop) {
        if (ib->src->ops->remake_wanted(ib->src) && ib->src->ops->remake(ib->src, err, sizeof(err)) != 0) {
            log_error("%s", err);
            code = OUTBOX_EXIT_USAGE;
            break;
        }
        inbox_publish(ib, 0);
        inbox_retention(ib);
        /* a batch: what the consumer has ready, up to INBOX_BATCH_SIZE, waiting only for the first */
        int n = ib->src->ops->poll(ib->src, batch, cfg->batch_size, 200);
        for (int i = 0; i < n; i++)
            inbox_incoming_init(&in[i], &batch[i], cfg);
        int done = inbox_handle_batch(ib, in, n);
        ib->src->ops->done(ib->src, batch, done);
        for (int i = 0; i < n; i++)
            inbox_incoming_destroy(&in[i]);
        ib->src->ops->release(ib->src, batch, n);
    }
    free(in);
    log_info("inbox: stopping: committing offsets and leaving the group");
out:;
    /* the last line, after the consumer's close and the dead-letter flush have logged theirs */
    uint64_t done[INBOX_RESULTS];
    memcpy(done, ib->messages, sizeof(done));
    inbox_free(ib);
    log_info("inbox stopped: %llu applied, %llu duplicates, %llu dead-lettered, %llu failed",
             (unsigned long long)done[INBOX_APPLIED], (unsigned long long)done[INBOX_DUPLICATE],
             (unsigned long long)done[INBOX_DEAD_LETTERED], (unsigned long long)done[INBOX_FAILED]);
    return code;
}
