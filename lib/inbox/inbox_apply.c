/* One message (inbox_int.h): its dedupe key and fields, the apply transaction (a batch in
 * one pipeline), retries, dead letters, and the offsets stored after the commit. */
#include <stdlib.h>
#include <string.h>

#include "inbox/inbox_int.h"
#include "core/log.h"
#include <time.h>
#include <unistd.h>

#include "core/backoff.h"
#include "inbox/dedupe.h"
#include "pg/pgconn.h"

void inbox_incoming_init(struct incoming *in, const struct source_msg *m, const struct inbox_config *cfg)
{
    memset(in, 0, sizeof(*in));
    in->m = m;
    strbuf_init(&in->key);
    in->topic = m->topic;
    snprintf(in->partition, sizeof(in->partition), "%d", (int)m->partition);
    snprintf(in->offset, sizeof(in->offset), "%lld", (long long)m->offset);
    snprintf(in->received, sizeof(in->received), "%lld", (long long)wall_ms());
    in->event_id = inbox_event_id(cfg, m);
    in->event_type = inbox_header(m, "event_type");
    if (!in->event_type) /* a CloudEvents producer's */
        in->event_type = inbox_header(m, "ce_type");
    json_t *h = json_object();
    for (size_t i = 0; i < m->n_headers; i++) {
        const struct source_header *sh = &m->headers[i];
        json_t *v = sh->value ? json_stringn(sh->value, sh->len) : json_null();
        json_object_set_new(h, sh->name, v ? v : json_null()); /* not UTF-8: null */
    }
    in->headers_json = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    if (m->value && m->value_len) {
        in->payload = xstrndup(m->value, m->value_len);
        in->payload_doc = json_loadb(m->value, m->value_len, JSON_DECODE_ANY, NULL);
    }
    if (inbox_dedupe_key(cfg, m, in->payload_doc, &in->key, in->why, sizeof(in->why)) != 0)
        in->unusable = in->why;
    else if (in->payload && !in->payload_doc)
        in->unusable = "the value is not JSON (the handler takes jsonb)";
}

void inbox_incoming_destroy(struct incoming *in)
{
    free(in->event_id);
    free(in->event_type);
    free(in->headers_json);
    free(in->payload);
    json_decref(in->payload_doc);
    strbuf_destroy(&in->key);
}

/* The insert's parameters: key, handler, event id, type, topic, partition, offset,
 * attempts, received, error. */
static void insert_params(const struct inbox *ib, const struct incoming *in, const char *attempts, const char *error,
                          const char **params)
{
    params[0] = in->key.buf;
    params[1] = ib->cfg->name;
    params[2] = in->event_id;
    params[3] = in->event_type;
    params[4] = in->topic;
    params[5] = in->partition;
    params[6] = in->offset;
    params[7] = attempts;
    params[8] = in->received;
    params[9] = error;
}

/* Sends the batch in one pipeline: BEGIN, each message's apply, COMMIT, sync. 1 when all
 * was sent. */
static int send_batch(struct inbox *ib, struct incoming *in, int n, const char *attempts)
{
    char **keys = xcalloc((size_t)n, sizeof(*keys));
    int sent = PQenterPipelineMode(ib->conn) && PQsendQueryParams(ib->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0);
    for (int i = 0; sent && i < n; i++) {
        const char *params[14];
        insert_params(ib, &in[i], attempts, NULL, params);
        keys[i] = in[i].m->key ? xstrndup(in[i].m->key, in[i].m->key_len) : NULL;
        params[9] = in[i].event_id && inbox_is_uuid(in[i].event_id) ? in[i].event_id : NULL;
        params[10] = in[i].event_type;
        params[11] = keys[i];
        params[12] = in[i].payload_doc ? in[i].payload : NULL;
        params[13] = in[i].headers_json;
        sent = PQsendQueryPrepared(ib->conn, "inbox_apply", 14, params, NULL, NULL, 0);
    }
    sent = sent && PQsendQueryParams(ib->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) && PQpipelineSync(ib->conn);
    for (int i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    return sent;
}

/* Reads the pipeline's results (BEGIN, n applies, COMMIT, each followed by NULL; then the
 * sync): fresh[i] whether message i was applied now (not a duplicate); *bad the message whose
 * apply failed first, or -1. 1 when anything failed (*transient: whether to retry as a
 * transient failure), else 0. */
static int read_batch(struct inbox *ib, int n, int *fresh, int *bad, int *transient)
{
    int failed = 0, step = 0, synced = 0;
    *bad = -1;
    while (!synced) {
        PGresult *res = PQgetResult(ib->conn);
        if (!res) {
            if (PQstatus(ib->conn) != CONNECTION_OK) {
                failed = 1;
                inbox_failure(ib, NULL, transient);
                break;
            }
            step++;
            continue;
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_PIPELINE_SYNC) {
            synced = 1;
        } else if (st == PGRES_PIPELINE_ABORTED) {
            failed = 1;
        } else if (!pgconn_result_ok(res)) {
            if (!failed) { /* the first error: later statements are aborted */
                inbox_failure(ib, res, transient);
                *bad = step >= 1 && step <= n ? step - 1 : -1;
            }
            failed = 1;
        } else if (step >= 1 && step <= n) {
            fresh[step - 1] = PQntuples(res) == 1 && atoi(PQgetvalue(res, 0, 0)) == 1;
        }
        PQclear(res);
    }
    if (PQpipelineStatus(ib->conn) != PQ_PIPELINE_OFF && !PQexitPipelineMode(ib->conn) && !failed) {
        failed = 1;
        inbox_failure(ib, NULL, transient);
    }
    return failed;
}

/* One transaction for in[0..n), sent in one pipeline (one round trip, one WAL flush):
 * BEGIN, per message the apply statement (its dedupe record, and the handler if the record
 * is new), COMMIT. INBOX_DONE_APPLIED: all committed (fresh[i] says which were applied).
 * INBOX_RETRY_HANDLER: message *bad failed and nothing was committed (the caller commits the
 * ones before it in a shorter run, then retries that one alone: the order of effects stays
 * the order of messages). INBOX_RETRY_TRANSIENT: nothing committed, nothing said about the
 * messages. */
static enum inbox_outcome apply_run(struct inbox *ib, struct incoming *in, int n, int attempt, int *fresh, int *bad)
{
    char attempts[16];
    snprintf(attempts, sizeof(attempts), "%d", attempt + 1);
    int transient = 0;
    int64_t t0 = mono_us();
    if (!ib->prepared) {
        PGresult *res = PQprepare(ib->conn, "inbox_apply", ib->apply_sql, 14, NULL);
        int ok = pgconn_result_ok(res);
        if (!ok)
            inbox_failure(ib, res, &transient);
        PQclear(res);
        if (!ok)
            return transient ? INBOX_RETRY_TRANSIENT : INBOX_RETRY_HANDLER;
        ib->prepared = 1;
    }
    memset(fresh, 0, (size_t)n * sizeof(*fresh));
    *bad = -1;
    int failed;
    if (!send_batch(ib, in, n, attempts)) {
        failed = 1;
        inbox_failure(ib, NULL, &transient);
        if (PQpipelineStatus(ib->conn) != PQ_PIPELINE_OFF)
            PQexitPipelineMode(ib->conn);
    } else {
        failed = read_batch(ib, n, fresh, bad, &transient);
    }
    if (failed) {
        inbox_rollback(ib);
        if (*bad < 0) /* BEGIN or COMMIT failed, or the connection: nothing about a message */
            transient = 1;
        return transient ? INBOX_RETRY_TRANSIENT : INBOX_RETRY_HANDLER;
    }
    ib->committed += n;
#ifdef OUTBOX_TEST_HOOKS
    if (ib->kill_after_commit && ib->committed >= ib->kill_after_commit) {
        log_warn("test hook: SIGKILL after a commit (%ld messages committed), before storing the offsets",
                 ib->committed);
        raise(SIGKILL);
    }
#endif
    double per_message = (double)(mono_us() - t0) / 1e6 / n;
    for (int i = 0; i < n; i++) {
        ib->messages[fresh[i] ? INBOX_APPLIED : INBOX_DUPLICATE]++;
        if (!fresh[i]) {
            log_debug("inbox: %s/%s/%s key %s: duplicate", in[i].topic, in[i].partition, in[i].offset, in[i].key.buf);
            continue;
        }
        histogram_observe(&ib->handler_time, per_message);
        int64_t ts = in[i].m->timestamp_ms;
        if (ts > 0)
            histogram_observe(&ib->completion, (double)(wall_ms() - ts) / 1000.0);
    }
    return INBOX_DONE_APPLIED;
}

/* Between looks for the dead letter's answer: /metrics stays fresh; 1 when asked to stop. */
static int dead_letter_wait(void *ctx)
{
    struct inbox *ib = ctx;
    inbox_publish(ib, 0);
    return *ib->stop != 0;
}

/* Sends the message to the dead-letter topic (when set) and records it FAILED. 0, or 1
 * when asked to stop first (the message is then delivered again after a restart). */
static int dead_letter(struct inbox *ib, struct incoming *in, const char *error, int attempts)
{
    int dead_lettered = ib->cfg->dead_letter_topic[0] != '\0';
    while (dead_lettered) {
        char where[64], n[16], why[512];
        snprintf(where, sizeof(where), "%s/%s", in->partition, in->offset);
        snprintf(n, sizeof(n), "%d", attempts);
        const struct source_header extra[] = {
            {"inbox_error", error, strlen(error)},
            {"inbox_source", in->topic, strlen(in->topic)},
            {"inbox_source_offset", where, strlen(where)},
            {"inbox_attempts", n, strlen(n)},
        };
        int rc = ib->src->ops->dead_letter(ib->src, in->m, extra, ARRAY_LEN(extra), dead_letter_wait, ib, why,
                                           sizeof(why));
        if (rc == 1 || (rc < 0 && *ib->stop))
            return 1;
        if (rc == 0)
            break;
        log_warn("dead letter: %s/%s/%s to %s failed: %s; retrying", in->topic, in->partition, in->offset,
                 ib->cfg->dead_letter_topic, why);
        if (inbox_pause_ms(ib, ib->cfg->retry_backoff_max_ms))
            return 1;
    }
    char n[16];
    snprintf(n, sizeof(n), "%d", attempts);
    if (!in->key.len) /* no dedupe key: recorded under the message's position */
        strbuf_printf(&in->key, "%s/%s/%s", in->topic, in->partition, in->offset);
    const char *params[10];
    insert_params(ib, in, n, error, params);
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    for (;;) {
        if (inbox_ensure_connected(ib))
            return 1;
        int transient = 0;
        PGresult *res = inbox_statement(ib, ib->fail_sql, 10, params, &transient);
        if (res) {
            PQclear(res);
            break;
        }
        log_warn("dead letter: recording %s/%s/%s as FAILED: %s", in->topic, in->partition, in->offset, ib->last_error);
        if (inbox_pause_ms(ib, backoff_next(&b)))
            return 1;
    }
    ib->messages[dead_lettered ? INBOX_DEAD_LETTERED : INBOX_FAILED]++;
    log_error("inbox: %s/%s/%s (key %s) %s after %d attempt%s: %s", in->topic, in->partition, in->offset,
              in->key.buf, dead_lettered ? "dead-lettered" : "recorded FAILED", attempts, attempts == 1 ? "" : "s",
              error);
    return 0;
}

/* Applies one message alone, with retries and backoff, dead-lettering it after
 * INBOX_MAX_ATTEMPTS handler failures (its first failure, in a run, counts). 0 when done,
 * 1 when asked to stop first. */
static int handle_one(struct inbox *ib, struct incoming *in, int attempt)
{
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    for (;;) {
        if (attempt > 0) {
            ib->handler_failures++;
            log_warn("inbox: %s/%s/%s key %s: attempt %d of %d failed: %s", in->topic, in->partition, in->offset,
                     in->key.buf, attempt, ib->cfg->max_attempts, ib->last_error);
            if (attempt >= ib->cfg->max_attempts)
                return dead_letter(ib, in, ib->last_error, attempt);
            if (inbox_pause_ms(ib, backoff_next(&b)))
                return 1;
        }
        for (;;) {
            if (inbox_ensure_connected(ib))
                return 1;
            int fresh, bad;
            enum inbox_outcome o = apply_run(ib, in, 1, attempt, &fresh, &bad);
            if (o == INBOX_DONE_APPLIED)
                return 0;
            if (o == INBOX_RETRY_HANDLER)
                break;
            ib->transient_errors++;
            log_warn("inbox: %s/%s/%s: transient error, retrying: %s", in->topic, in->partition, in->offset,
                     ib->last_error);
            if (inbox_pause_ms(ib, backoff_next(&b)))
                return 1;
        }
        attempt++;
    }
}

/* Applies a batch of messages in order: runs of good messages in one transaction each, a
 * message without a dedupe key or with a value that is not JSON dead-lettered in its
 * place. Returns how many (a prefix) are done: their offsets may be stored. */
int inbox_handle_batch(struct inbox *ib, struct incoming *in, int n)
{
    int fresh[INBOX_BATCH_MAX];
    struct backoff b;
    backoff_init(&b, ib->cfg->retry_backoff_ms, ib->cfg->retry_backoff_max_ms);
    int i = 0;
    while (i < n && !*ib->stop) {
        if (in[i].unusable) {
            if (dead_letter(ib, &in[i], in[i].unusable, 0))
                return i;
            i++;
            continue;
        }
        int j = i;
        while (j < n && !in[j].unusable)
            j++;
        if (inbox_ensure_connected(ib))
            return i;
        int bad;
        enum inbox_outcome o = apply_run(ib, &in[i], j - i, 0, fresh, &bad);
        if (o == INBOX_DONE_APPLIED) {
            i = j;
            backoff_reset(&b);
        } else if (o == INBOX_RETRY_TRANSIENT) {
            ib->transient_errors++;
            log_warn("inbox: transient error, retrying %d messages: %s", j - i, ib->last_error);
            if (inbox_pause_ms(ib, backoff_next(&b)))
                return i;
        } else {
            /* commit the ones before it (if that fails, start over from i), then take it
             * alone: its failure in the run was its first attempt */
            if (bad > 0) {
                int upto = bad;
                if (apply_run(ib, &in[i], upto, 0, fresh, &bad) != INBOX_DONE_APPLIED)
                    continue;
                i += upto;
            }
            if (handle_one(ib, &in[i], 1))
                return i;
            i++;
        }
    }
    return i;
}
