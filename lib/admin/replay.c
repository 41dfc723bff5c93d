/* outbox-relay replay: publishes SENT rows again, exactly as they were first published
 * (topic, key, value, headers, event_id, timestamp), through a producer with the relay's
 * settings: a duplicate-delivery drill for consumers. Rows are read through a cursor in id
 * order (bounded memory) and never changed. The relay's own lease header is not added: a
 * replay publishes under no lease. */
#include "admin/replay.h"

#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "sink/message.h"
#include "relay/outbox.h"
#include "pg/pgconn.h"
#include "relay/schema.h"
#include "sink/sink.h"
#include "core/util.h"

#define FETCH_ROWS 1000
#define GUARD_ROWS 100000 /* a --since window larger than this needs --limit */
#define STALL_S 60        /* no delivery report for this long: give up on the rest */

struct replay {
    long long delivered, failed;
    int fatal;
    ev_tstamp last_report;
    struct ev_loop *loop; /* NULL on a dry run */
    struct sink *sk;
    struct sink_config sink_cfg; /* what the sink was told (config_sink) */
    long long selected, first_id, last_id;
};

static void on_delivery(void *ctx, int64_t row_id, int err, const char *topic,
                        int maybe_persisted)
{
    (void)maybe_persisted;
    struct replay *rp = ctx;
    rp->last_report = ev_time();
    if (err) {
        rp->failed++;
        log_warn("replay: row %lld to %s failed: %s", (long long)row_id, topic ? topic : "?",
                 sink_err_str(rp->sk, err));
    } else {
        rp->delivered++;
    }
}

static void on_fatal(void *ctx, const char *reason)
{
    struct replay *rp = ctx;
    rp->fatal = 1;
    log_error("replay: fatal producer error: %s", reason);
}

static const struct sink_callbacks replay_callbacks = {on_delivery, on_fatal, NULL, NULL};

static void tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
}

/* Serves the loop until nothing is left in the producer, or nothing was reported for
 * STALL_S seconds (Kafka unreachable): then what is left is purged and counted failed. */
static void drain(struct replay *rp, int below)
{
    struct sink *sk = rp->sk;
    rp->last_report = ev_time();
    while (sink_outq_len(sk) > below && !rp->fatal) {
        if (ev_time() - rp->last_report > STALL_S) {
            log_warn("replay: no delivery report for %d s; giving up on %d messages",
                     STALL_S, sink_outq_len(sk));
            sink_abandon(sk, 2000);
            break;
        }
        ev_run(rp->loop, EVRUN_ONCE);
        sink_poll(sk);
    }
}

static const char *who(char *buf, size_t len)
{
    const char *user = getenv("USER");
    struct passwd *pw = user ? NULL : getpwuid(getuid());
    char host[128] = "";
    gethostname(host, sizeof(host) - 1);
    snprintf(buf, len, "%s@%s", user ? user : pw ? pw->pw_name : "?", host);
    return buf;
}

/* 1 (USAGE, with err) when a --since window without --limit holds more than GUARD_ROWS
 * SENT rows, 0 when it does not, -1 on a failed query. */
static int guard(PGconn *conn, const char *t, const char *filter, int nparams, const char *const *params,
                 char *err, size_t errlen)
{
    struct strbuf q;
    strbuf_init(&q);
    strbuf_printf(&q, "SELECT count(*) FROM (SELECT 1 FROM %s WHERE status = 'SENT' AND %s LIMIT %d) s",
                  t, filter, GUARD_ROWS + 1);
    PGresult *res = pgconn_exec(conn, q.buf, nparams, params, err, errlen);
    strbuf_destroy(&q);
    if (!res)
        return -1;
    long long n = atoll(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (n <= GUARD_ROWS)
        return 0;
    set_err(err, errlen, "the window holds more than %d SENT rows: give --limit N", GUARD_ROWS);
    return OUTBOX_EXIT_USAGE;
}

/* One fetched page of rows, in id order, to the sink (counted only on a dry run). payloads:
 * the decoded bytea payloads, or NULL. */
static void publish_fetched(struct replay *rp, const PGresult *res, const struct pg_bytes *payloads,
                            const struct message_layout *lay, int dry_run)
{
    int n = PQntuples(res);
    for (int i = 0; i < n && !rp->fatal; i++) {
        struct outbox_row row = {
            .id = pg_int(PQgetvalue(res, i, 0)),
            .event_id = PQgetvalue(res, i, 1),
            .aggregate_type = PQgetvalue(res, i, 2),
            .aggregate_id = PQgetvalue(res, i, 3),
            .event_type = PQgetvalue(res, i, 4),
            .topic = PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5),
            .payload = PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6),
            .payload_len = (size_t)PQgetlength(res, i, 6),
            .headers = PQgetisnull(res, i, 7) ? NULL : PQgetvalue(res, i, 7),
            .created_ms = pg_int(PQgetvalue(res, i, 8)),
        };
        if (payloads)
            row.payload = pg_bytes_get(payloads, res, 6, i, &row.payload_len);
        rp->selected++;
        if (!rp->first_id)
            rp->first_id = row.id;
        rp->last_id = row.id;
        if (dry_run)
            continue;
        struct message msg;
        char why[512];
        if (message_build_layout(&row, lay, &msg, why, sizeof(why)) != 0) {
            log_warn("replay: row %lld cannot be mapped to a message: %s", (long long)row.id, why);
            rp->failed++;
            continue;
        }
        int e;
        enum sink_queued queued;
        while ((queued = sink_produce(rp->sk, &msg, row.aggregate_id, row.payload,
                                 row.payload ? row.payload_len : 0, row.created_ms, row.id, &e)) == SINK_FULL)
            drain(rp, sink_outq_len(rp->sk) / 2);
        if (queued != SINK_QUEUED) {
            log_warn("replay: row %lld to %s refused: %s", (long long)row.id, msg.topic, sink_err_str(rp->sk, e));
            rp->failed++;
        }
        message_destroy(&msg);
    }
}

/* The log line and the output, text or JSON; rows neither delivered nor failed (purged,
 * unreported) count as failed. */
static void report(struct replay *rp, const struct config *cfg, const struct command *cmd, const char *what,
                   FILE *out)
{
    long long lost = cmd->dry_run ? 0 : rp->selected - rp->delivered - rp->failed; /* purged or unreported */
    rp->failed += lost > 0 ? lost : 0;
    char by[300];
    if (cmd->dry_run)
        log_info("replay: %s dry run over the rows of %s selected by %s%s: %lld selected, nothing "
                 "published", who(by, sizeof(by)), cfg->table, what, cmd->limit ? " with --limit" : "",
                 rp->selected);
    else
        log_info("replay: %s replayed the rows of %s selected by %s%s: %lld selected, %lld delivered, "
                 "%lld failed", who(by, sizeof(by)), cfg->table, what, cmd->limit ? " with --limit" : "",
                 rp->selected, rp->delivered, rp->failed);
    if (cmd->json)
        fprintf(out, "{\"selected\": %lld, \"replayed\": %lld, \"failed\": %lld, \"dry_run\": %s, "
                     "\"first_id\": %lld, \"last_id\": %lld}\n",
                rp->selected, rp->delivered, rp->failed, cmd->dry_run ? "true" : "false", rp->first_id,
                rp->last_id);
    else if (cmd->dry_run)
        fprintf(out, "would replay %lld SENT row%s (ids %lld..%lld)\n", rp->selected,
                rp->selected == 1 ? "" : "s", rp->first_id, rp->last_id);
    else
        fprintf(out, "replayed %lld of %lld SENT row%s (ids %lld..%lld), %lld failed\n", rp->delivered,
                rp->selected, rp->selected == 1 ? "" : "s", rp->first_id, rp->last_id, rp->failed);
}

/* The cursor over the selected SENT rows, in id order, within the snapshot already begun:
 * the columns a message is built from (the headers as the layout places them). */
static int declare_cursor(PGconn *conn, const struct config *cfg, const struct command *cmd, const char *t,
                          const char *filter, int bytea, int nparams, const char *const *params, char *err,
                          size_t errlen)
{
    char *types_q = outbox_placement_types_query(cfg);
    PGresult *types = pgconn_exec(conn, types_q, 0, NULL, err, errlen);
    free(types_q);
    if (!types)
        return -1;
    char *headers = outbox_headers_sql(cfg, "o", PQgetisnull(types, 0, 0) ? NULL : PQgetvalue(types, 0, 0));
    PQclear(types);
    struct strbuf q;
    strbuf_init(&q);
    strbuf_printf(&q,
                  "DECLARE replay NO SCROLL CURSOR FOR SELECT id, event_id, aggregate_type, aggregate_id,"
                  " event_type, topic, %s, %s::text, " OUTBOX_CREATED_MS("created_at")
                  " FROM %s o WHERE status = 'SENT' AND %s ORDER BY id",
                  bytea ? "encode(payload, 'hex')" : "payload::text", headers, t, filter);
    free(headers);
    if (cmd->limit)
        strbuf_printf(&q, " LIMIT %lld", cmd->limit);
    PGresult *res = pgconn_exec(conn, q.buf, nparams, params, err, errlen);
    strbuf_destroy(&q);
    if (!res)
        return -1;
    PQclear(res);
    return 0;
}

/* Fetches the cursor's rows FETCH_ROWS at a time and publishes them (or counts them, with
 * --dry-run), until the last or a fatal producer error; then waits for what is in flight.
 * 0, or -1 with err. */
static int fetch_all(PGconn *conn, struct replay *rp, int bytea, const struct message_layout *lay, int dry_run,
                     char *err, size_t errlen)
{
    for (;;) {
        PGresult *res = pgconn_exec(conn, "FETCH 1000 FROM replay", 0, NULL, err, errlen); /* FETCH_ROWS */
        if (!res)
            return -1;
        int n = PQntuples(res);
        struct pg_bytes payloads = {0};
        if (bytea && pg_bytes_decode(&payloads, res, 6) != 0) {
            PQclear(res);
            return set_err(err, errlen, "a bytea payload did not come as hex");
        }
        publish_fetched(rp, res, bytea ? &payloads : NULL, lay, dry_run);
        pg_bytes_free(&payloads);
        PQclear(res);
        if (n < FETCH_ROWS || rp->fatal)
            break;
        if (rp->loop)
            drain(rp, 10000); /* keep what waits in the producer bounded */
    }
    if (rp->loop)
        drain(rp, 0);
    return 0;
}

int replay_run(PGconn *conn, const struct config *cfg, const struct command *cmd, FILE *out, char *err, size_t errlen)
{
    char *schema_q, *t, *name;
    schema_names(cfg->table, &schema_q, &t, &name);
    free(t); /* rows are read and written through the layout's relation */
    t = schema_read_relation(cfg->table, cfg->debezium, cfg->keep);
    const char *filter = cmd->id ? "id = $1::int8"
                         : cmd->key ? "aggregate_id = $1"
                                            : "created_at >= $1::timestamptz AND ($2::timestamptz IS NULL "
                                              "OR created_at < $2::timestamptz)";
    const char *params[2] = {cmd->id ? cmd->id : cmd->key ? cmd->key : cmd->since,
                             cmd->until};
    int nparams = cmd->since ? 2 : 1;
    char what[512];
    snprintf(what, sizeof(what), "%s%s%s%s", cmd->id ? "--id " : cmd->key ? "--key " : "--since ",
             params[0], cmd->until ? " --until " : "", cmd->until ? cmd->until : "");
    int rc = -1;
    struct replay rp = {0};
    PGresult *res = NULL;

    /* Guard rail: a time window without --limit may not select more than GUARD_ROWS. */
    if (cmd->since && !cmd->limit && (rc = guard(conn, t, filter, nparams, params, err, errlen)) != 0)
        goto out;
    rc = -1;
    if (!cmd->dry_run) {
        rp.loop = ev_loop_new(EVFLAG_AUTO);
        config_sink(cfg, &rp.sink_cfg);
        rp.sink_cfg.transactional_id = NULL; /* a replay publishes again on purpose, outside transactions */
        if (!(rp.sk = sink_new(rp.loop, &rp.sink_cfg, &replay_callbacks, &rp, err, errlen)))
            goto out;
    }
    char ptype[128];
    if (schema_payload_type(conn, cfg->table, ptype, sizeof(ptype), err, errlen) != 0)
        goto out;
    int bytea = strcmp(ptype, "bytea") == 0; /* sent as hex, decoded below */
    const struct message_layout lay = {
        .topic_template = cfg->topic_template, .debezium = cfg->debezium, .ce_source = cfg->ce_source,
        .ce_content_type = cfg->ce_content_type[0] ? cfg->ce_content_type : message_content_type(ptype),
        .content_type = message_content_type(ptype)};
    if (!(res = pgconn_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", 0, NULL, err, errlen)))
        goto out;
    PQclear(res);
    res = NULL; /* out: clears what res holds */
    if (declare_cursor(conn, cfg, cmd, t, filter, bytea, nparams, params, err, errlen) != 0)
        goto out;
    ev_timer tick;
    if (rp.loop) {
        ev_timer_init(&tick, tick_cb, 1.0, 1.0);
        ev_timer_start(rp.loop, &tick);
    }
    if (fetch_all(conn, &rp, bytea, &lay, cmd->dry_run, err, errlen) != 0)
        goto out;
    if (!(res = pgconn_exec(conn, "COMMIT", 0, NULL, err, errlen)))
        goto out;
    PQclear(res);
    res = NULL;
    report(&rp, cfg, cmd, what, out);
    rc = rp.failed || rp.fatal ? OUTBOX_EXIT_FAILED : OUTBOX_EXIT_OK;
    if (rc)
        set_err(err, errlen, "%lld of %lld rows were not delivered", rp.failed, rp.selected);
out:
    if (res)
        PQclear(res);
    if (rc == -1)
        PQclear(PQexec(conn, "ROLLBACK"));
    sink_free(rp.sk);
    if (rp.loop)
        ev_loop_destroy(rp.loop);
    free(schema_q);
    free(t);
    free(name);
    return rc == -1 ? OUTBOX_EXIT_FAILED : rc;
}
