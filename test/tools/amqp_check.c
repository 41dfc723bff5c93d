/* The tests' RabbitMQ side (librabbitmq), for the relay's RabbitMQ sink:
 *   amqp-check bind URL EXCHANGE QUEUE KEY [MAX_LENGTH | single-active | quorum]
 *       declares the durable topic exchange (as the relay does), a durable queue and a
 *       binding of the queue to the exchange with KEY; with MAX_LENGTH the queue holds at
 *       most that many messages and refuses more (x-overflow reject-publish: the publisher
 *       gets basic.nack); single-active: one consumer at a time gets the queue's messages
 *       (x-single-active-consumer), the others wait as standbys; quorum: a quorum queue
 *       (x-queue-type quorum: replicated by Raft, on every node of a cluster)
 *   amqp-check declare URL EXCHANGE TYPE
 *       declares a durable exchange of TYPE (direct, fanout, topic, headers)
 *   amqp-check depth URL QUEUE
 *       prints the queue's ready messages
 *   amqp-check check URL QUEUE EXPECTED [--exact | --max-duplicates N] [--any-order]
 *                    [--require-lease] [--values] [--idle-ms N] [--wait-ms N]
 *       consumes QUEUE and compares it with EXPECTED (TSV: id, event_id, aggregate_id and
 *       optionally the value, as the integration tests write it): every row's message there
 *       (message_id = event_id), no other message, per-key order of first deliveries (ids
 *       ascending within an aggregate_id), and each message persistent with the headers
 *       event_id = message_id and aggregate_id = the row's, and app_id set. It consumes until
 *       every expected row has arrived and then the queue stays empty for --idle-ms (default
 *       2000: duplicates still on their way); while rows are missing it waits up to --wait-ms
 *       (default 10000) for the next message, then stops and fails.
 *       --exact: no duplicates either (--max-duplicates N: at most N); --any-order: order
 *       violations are counted, not failed; --values: each message's body is the row's value
 *       (EXPECTED's fourth column: 'x' and the bytes in hex, or '-' for none: an empty body).
 *       Lease fencing, as outbox-check does it: a message whose outbox_lease header reads
 *       P/TOKEN (the lease partition and the token of the acquisition that published it) is
 *       counted in fenced; one whose token is older than a token of P already seen on a first
 *       delivery is a stale duplicate when its event arrived before (harmless: what a relay
 *       that lost the lease had sent before it knew) and a fencing violation when it is the
 *       event's first delivery (a stale relay published a row first); --require-lease also
 *       fails a message without a readable outbox_lease header (lease_missing).
 *       EXPECTED with no row, or a malformed line, is a usage error. Prints one line
 *       CHECK expected=N received=N unique=N duplicates=N missing=N unexpected=N
 *             order_violations=N bad_properties=N fenced=N stale_duplicates=N
 *             fencing_violations=N lease_missing=N value_mismatches=N
 *       and exits 1 when a condition fails (2 on a usage or connection error). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "check_common.h"
#include "core/amqp.h"

struct row {
    long long id;
    char *event_id;
    char *key;
    char *value_hex; /* NULL: no value column, or '-' (no payload) */
    int has_value;   /* the fourth column was there */
    int seen;
};

static struct row *rows;
static size_t n_rows;

static void die(const char *what, amqp_rpc_reply_t r)
{
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    char why[512];
    rmq_reply_str(r, why, sizeof(why));
    fprintf(stderr, "amqp-check: %s: %s\n", what, why);
    exit(2);
}

static amqp_connection_state_t open_conn(const char *url)
{
    char err[768];
    amqp_connection_state_t conn = rmq_connect(url, NULL, NULL, 0, 15, err, sizeof(err));
    if (!conn) {
        fprintf(stderr, "amqp-check: %s\n", err);
        exit(2);
    }
    return conn;
}

static int cmd_bind(int argc, char **argv)
{
    if (argc != 6 && argc != 7)
        return 2;
    amqp_table_entry_t args[2];
    amqp_table_t table = amqp_empty_table;
    if (argc == 7 && strcmp(argv[6], "quorum") == 0) {
        args[0].key = amqp_cstring_bytes("x-queue-type");
        args[0].value.kind = AMQP_FIELD_KIND_UTF8;
        args[0].value.value.bytes = amqp_cstring_bytes("quorum");
        table = (amqp_table_t){1, args};
    } else if (argc == 7 && strcmp(argv[6], "single-active") == 0) {
        args[0].key = amqp_cstring_bytes("x-single-active-consumer");
        args[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        args[0].value.value.boolean = 1;
        table = (amqp_table_t){1, args};
    } else if (argc == 7) {
        args[0].key = amqp_cstring_bytes("x-max-length");
        args[0].value.kind = AMQP_FIELD_KIND_I64;
        args[0].value.value.i64 = atoll(argv[6]);
        args[1].key = amqp_cstring_bytes("x-overflow");
        args[1].value.kind = AMQP_FIELD_KIND_UTF8;
        args[1].value.value.bytes = amqp_cstring_bytes("reject-publish");
        table = (amqp_table_t){2, args};
    }
    amqp_connection_state_t conn = open_conn(argv[2]);
    amqp_exchange_declare(conn, 1, amqp_cstring_bytes(argv[3]), amqp_cstring_bytes("topic"), 0, 1, 0, 0,
                          amqp_empty_table);
    die("exchange.declare", amqp_get_rpc_reply(conn));
    amqp_queue_declare(conn, 1, amqp_cstring_bytes(argv[4]), 0, 1, 0, 0, table);
    die("queue.declare", amqp_get_rpc_reply(conn));
    amqp_queue_bind(conn, 1, amqp_cstring_bytes(argv[4]), amqp_cstring_bytes(argv[3]),
                    amqp_cstring_bytes(argv[5]), amqp_empty_table);
    die("queue.bind", amqp_get_rpc_reply(conn));
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return 0;
}

static int cmd_declare(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    amqp_connection_state_t conn = open_conn(argv[2]);
    amqp_exchange_declare(conn, 1, amqp_cstring_bytes(argv[3]), amqp_cstring_bytes(argv[4]), 0, 1, 0, 0,
                          amqp_empty_table);
    die("exchange.declare", amqp_get_rpc_reply(conn));
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return 0;
}

static int cmd_depth(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    amqp_connection_state_t conn = open_conn(argv[2]);
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(conn, 1, amqp_cstring_bytes(argv[3]), 1, 0, 0, 0, amqp_empty_table);
    die("queue.declare (passive)", amqp_get_rpc_reply(conn));
    printf("%u\n", ok->message_count);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return 0;
}

static void load_expected(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    char line[4096];
    size_t cap = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0])
            continue;
        char *id = strtok(line, "\t"), *ev = strtok(NULL, "\t"), *key = strtok(NULL, "\t"),
             *value = strtok(NULL, "\t");
        if (value && strcmp(value, "-") != 0 && value[0] != 'x') {
            fprintf(stderr, "amqp-check: %s: a malformed value (want 'x' and hex, or '-')\n", path);
            exit(2);
        }
        if (!id || !ev || !key || atoll(id) <= 0) {
            fprintf(stderr, "amqp-check: %s: a malformed line (want id, event_id, key, tab-separated)\n", path);
            exit(2);
        }
        if (n_rows == cap) {
            cap = cap ? cap * 2 : 1024;
            struct row *grown = realloc(rows, cap * sizeof(*rows));
            if (!grown)
                abort();
            rows = grown;
        }
        rows[n_rows++] = (struct row){atoll(id), strdup(ev), strdup(key),
                                      value && value[0] == 'x' ? strdup(value + 1) : NULL, value != NULL, 0};
    }
    fclose(f);
    if (n_rows == 0) { /* a check against nothing would pass whatever the queue holds */
        fprintf(stderr, "amqp-check: %s: no expected row\n", path);
        exit(2);
    }
}

static int by_event(const void *a, const void *b)
{
    return strcmp(((const struct row *)a)->event_id, ((const struct row *)b)->event_id);
}

static struct row *find_row(const amqp_bytes_t *id)
{
    char buf[256];
    if (id->len >= sizeof(buf))
        return NULL;
    memcpy(buf, id->bytes, id->len);
    buf[id->len] = 0;
    struct row key = {.event_id = buf};
    return bsearch(&key, rows, n_rows, sizeof(*rows), by_event);
}

/* Whether header name is the string want. */
static int header_is(const amqp_basic_properties_t *p, const char *name, const char *want, size_t want_len)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len == strlen(name) && memcmp(e->key.bytes, name, e->key.len) == 0)
            return e->value.kind == AMQP_FIELD_KIND_UTF8 && e->value.value.bytes.len == want_len &&
                   memcmp(e->value.value.bytes.bytes, want, want_len) == 0;
    }
    return 0;
}

/* The outbox_lease header's P/TOKEN (it reads P/TOKEN/relay name/pid): 1 when there and
 * readable. */
static int lease_header(const amqp_basic_properties_t *p, int *part, long long *token)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != strlen("outbox_lease") || memcmp(e->key.bytes, "outbox_lease", e->key.len) != 0)
            continue;
        return e->value.kind == AMQP_FIELD_KIND_UTF8 &&
               check_lease_token(e->value.value.bytes.bytes, e->value.value.bytes.len, part, token);
    }
    return 0;
}

/* Whether the body is the value hex names (NULL: an empty body). */
static int body_is(const amqp_bytes_t *body, const char *hex)
{
    return hex ? check_bytes_are_hex(body->bytes, body->len, hex) : body->len == 0;
}

/* per key: the highest id first delivered so far (per lease partition: the highest token) */
struct key_high {
    char *key;
    long long high;
};

static long long *key_high(struct key_high **tab, size_t *n, const char *key)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*tab)[i].key, key) == 0)
            return &(*tab)[i].high;
    struct key_high *grown = realloc(*tab, (*n + 1) * sizeof(**tab));
    if (!grown)
        abort();
    *tab = grown;
    (*tab)[*n] = (struct key_high){strdup(key), -1};
    return &(*tab)[(*n)++].high;
}

static int cmd_check(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int exact = 0, idle_ms = 2000, wait_ms = 10000, any_order = 0, require_lease = 0, values = 0;
    long long max_dups = -1;
    for (int i = 5; i < argc; i++) {
        if (strcmp(argv[i], "--exact") == 0)
            exact = 1;
        else if (strcmp(argv[i], "--max-duplicates") == 0 && i + 1 < argc)
            max_dups = atoll(argv[++i]);
        else if (strcmp(argv[i], "--any-order") == 0)
            any_order = 1;
        else if (strcmp(argv[i], "--idle-ms") == 0 && i + 1 < argc)
            idle_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--wait-ms") == 0 && i + 1 < argc)
            wait_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--require-lease") == 0)
            require_lease = 1;
        else if (strcmp(argv[i], "--values") == 0)
            values = 1;
        else
            return 2;
    }
    if (idle_ms <= 0 || wait_ms <= 0)
        return 2;
    load_expected(argv[4]);
    for (size_t i = 0; values && i < n_rows; i++)
        if (!rows[i].has_value) {
            fprintf(stderr, "amqp-check: --values: %s has no value column (row %lld)\n", argv[4], rows[i].id);
            exit(2);
        }
    qsort(rows, n_rows, sizeof(*rows), by_event);
    amqp_connection_state_t conn = open_conn(argv[2]);
    amqp_basic_qos(conn, 1, 0, 2000, 0);
    die("basic.qos", amqp_get_rpc_reply(conn));
    amqp_basic_consume(conn, 1, amqp_cstring_bytes(argv[3]), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
    die("basic.consume", amqp_get_rpc_reply(conn));
    long long received = 0, unique = 0, dups = 0, unexpected = 0, order = 0, bad = 0;
    long long fenced = 0, stale = 0, fencing_violations = 0, lease_missing = 0, value_mismatches = 0;
    struct key_high *highs = NULL, *tokens = NULL;
    size_t n_highs = 0, n_tokens = 0;
    for (;;) {
        amqp_envelope_t env;
        /* rows still missing: wait longer for the next message; all there: only for duplicates */
        int ms = (size_t)unique < n_rows ? wait_ms : idle_ms;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
            break;
        die("consume", r);
        received++;
        const amqp_basic_properties_t *p = &env.message.properties;
        struct row *row = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? find_row(&p->message_id) : NULL;
        if (!row) {
            if (unexpected++ < 5)
                fprintf(stderr, "amqp-check: unexpected message (message_id %.*s)\n",
                        (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? (int)p->message_id.len : 0,
                        (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? (char *)p->message_id.bytes : "");
        } else {
            int ok = (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG) && p->delivery_mode == AMQP_DELIVERY_PERSISTENT &&
                     (p->_flags & AMQP_BASIC_APP_ID_FLAG) && p->app_id.len > 0 &&
                     header_is(p, "event_id", row->event_id, strlen(row->event_id)) &&
                     header_is(p, "aggregate_id", row->key, strlen(row->key));
            if (!ok && bad++ < 5)
                fprintf(stderr, "amqp-check: row %lld: not persistent, or app_id, event_id or aggregate_id "
                        "header missing or wrong\n", row->id);
            if (values && !body_is(&env.message.body, row->value_hex) && value_mismatches++ < 5)
                fprintf(stderr, "amqp-check: row %lld: body of %zu bytes differs from the row's value (%zu bytes)\n",
                        row->id, env.message.body.len, row->value_hex ? strlen(row->value_hex) / 2 : 0);
            int part;
            long long token;
            if (lease_header(p, &part, &token)) {
                char pkey[32];
                snprintf(pkey, sizeof(pkey), "%d", part);
                long long *high = key_high(&tokens, &n_tokens, pkey);
                fenced++;
                if (token < *high) {
                    if (row->seen) {
                        stale++;
                    } else if (fencing_violations++ < 5) {
                        fprintf(stderr, "amqp-check: row %lld first delivered with lease token %d/%lld after "
                                "token %lld of lease partition %d\n", row->id, part, token, *high, part);
                    }
                } else {
                    *high = token;
                }
            } else if (require_lease && lease_missing++ < 5) {
                fprintf(stderr, "amqp-check: row %lld has no readable outbox_lease header\n", row->id);
            }
            if (row->seen++) {
                dups++;
            } else {
                unique++;
                long long *high = key_high(&highs, &n_highs, row->key);
                if (row->id < *high && order++ < 5)
                    fprintf(stderr, "amqp-check: key %s: row %lld first delivered after row %lld\n", row->key,
                            row->id, *high);
                if (row->id > *high)
                    *high = row->id;
            }
        }
        amqp_basic_ack(conn, 1, env.delivery_tag, 0);
        amqp_destroy_envelope(&env);
    }
    long long missing = 0;
    for (size_t i = 0; i < n_rows; i++)
        if (!rows[i].seen && missing++ < 5)
            fprintf(stderr, "amqp-check: row %lld (event %s) missing\n", rows[i].id, rows[i].event_id);
    printf("CHECK expected=%zu received=%lld unique=%lld duplicates=%lld missing=%lld unexpected=%lld "
           "order_violations=%lld bad_properties=%lld fenced=%lld stale_duplicates=%lld fencing_violations=%lld "
           "lease_missing=%lld value_mismatches=%lld\n", n_rows, received, unique, dups, missing, unexpected,
           order, bad, fenced, stale, fencing_violations, lease_missing, value_mismatches);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    for (size_t i = 0; i < n_highs; i++)
        free(highs[i].key);
    free(highs);
    for (size_t i = 0; i < n_tokens; i++)
        free(tokens[i].key);
    free(tokens);
    for (size_t i = 0; i < n_rows; i++) {
        free(rows[i].event_id);
        free(rows[i].key);
        free(rows[i].value_hex);
    }
    free(rows);
    int too_many = max_dups >= 0 && dups > max_dups;
    if (too_many)
        fprintf(stderr, "amqp-check: %lld duplicates, more than %lld\n", dups, max_dups);
    return missing || unexpected || (order && !any_order) || bad || (exact && dups) || too_many ||
                   fencing_violations || (require_lease && lease_missing) || value_mismatches
               ? 1
               : 0;
}

int main(int argc, char **argv)
{
    int rc = 2;
    if (argc >= 2 && strcmp(argv[1], "bind") == 0)
        rc = cmd_bind(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "declare") == 0)
        rc = cmd_declare(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "depth") == 0)
        rc = cmd_depth(argc, argv);
    else if (argc >= 2 && strcmp(argv[1], "check") == 0)
        rc = cmd_check(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: amqp-check bind URL EXCHANGE QUEUE KEY [MAX_LENGTH | single-active | quorum] | declare URL EXCHANGE TYPE | depth URL QUEUE | "
                        "check URL QUEUE EXPECTED [--exact | --max-duplicates N] [--any-order] [--require-lease] [--values] "
                        "[--idle-ms N] [--wait-ms N]\n");
    return rc;
}
