/* outbox-inbox's parts, private to lib/inbox/ (as relay_int.h is to lib/relay/): the
 * inbox's state, one incoming message, and what each file offers the others —
 *   inbox.c         the life cycle (new/free) and the loop;
 *   inbox_db.c      PostgreSQL: connect, migrate, resolve the handler, statements, failures,
 *                   retention;
 *   inbox_status.c  /metrics and /status, pauses that keep them fresh;
 *   source.h        the broker behind a seam (source_kafka.c: the consumer and the
 *                   dead-letter producer, their callbacks, remaking them);
 *   inbox_apply.c   one message: its dedupe key and fields, the apply transaction, retries,
 *                   dead letters, positions marked done after the commit. */
#ifndef OUTBOX_INBOX_INT_H
#define OUTBOX_INBOX_INT_H

#include <jansson.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdint.h>

#include "core/http.h"
#include "inbox/inbox.h"
#include "source/source.h"
#include "core/metrics.h"
#include "core/util.h"

#define RETENTION_EVERY_MS 60000
#define RETENTION_BATCH 5000
#define PUBLISH_EVERY_MS 1000

/* What became of a message, as counted in inbox_messages_total{result}. */
enum inbox_result { INBOX_APPLIED, INBOX_DUPLICATE, INBOX_DEAD_LETTERED, INBOX_FAILED, INBOX_RESULTS };

/* How one apply transaction ended (inbox_apply.c). */
enum inbox_outcome { INBOX_DONE_APPLIED, INBOX_DONE_DUPLICATE, INBOX_RETRY_TRANSIENT, INBOX_RETRY_HANDLER };

struct inbox {
    const struct inbox_config *cfg;
    volatile sig_atomic_t *stop;
    PGconn *conn;
    char *apply_sql, *fail_sql, *function, *retention_sql;
    int prepared; /* apply_sql is prepared on this connection */
    struct source *src;
    struct source_config src_cfg; /* what the source was told (inbox_config_source) */
    struct http *http;
    int64_t last_publish, last_retention;
    long kill_after_commit; /* test builds: SIGKILL after the commit reaching this many messages */
    long committed;         /* messages committed */
    /* metrics */
    uint64_t messages[INBOX_RESULTS];
    uint64_t handler_failures, transient_errors, pg_reconnects, retention_deleted;
    struct histogram completion, handler_time;
    char last_error[300];
};

/* One message being applied: what it carries, parsed once. */
struct incoming {
    const struct source_msg *m;
    const char *topic;
    char partition[16], offset[24], received[24];
    char *event_id, *event_type;
    char *headers_json; /* all headers as one JSON object (text values; the last one of a name) */
    char *payload;      /* the value as text, NULL for an empty value */
    json_t *payload_doc;
    struct strbuf key;
    const char *unusable; /* why it cannot be applied (no dedupe key, not JSON), or NULL */
    char why[512];
};

/* inbox.c */
struct inbox *inbox_new(const struct inbox_config *cfg, volatile sig_atomic_t *stop);
void inbox_free(struct inbox *ib);

/* inbox_db.c */
void inbox_build_statements(struct inbox *ib);
PGresult *inbox_statement(struct inbox *ib, const char *sql, int n, const char *const *params, int *transient);
void inbox_failure(struct inbox *ib, const PGresult *res, int *transient);
void inbox_rollback(struct inbox *ib);
int inbox_ensure_connected(struct inbox *ib); /* 0, or 1 when asked to stop first */
void inbox_retention(struct inbox *ib);

/* inbox_status.c */
void inbox_publish(struct inbox *ib, int force);
int inbox_pause_ms(struct inbox *ib, int ms); /* 1 if asked to stop */

/* inbox_apply.c */
void inbox_incoming_init(struct incoming *in, const struct source_msg *m, const struct inbox_config *cfg);
void inbox_incoming_destroy(struct incoming *in);
int inbox_handle_batch(struct inbox *ib, struct incoming *in, int n); /* messages done */

#endif
