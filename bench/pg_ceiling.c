/* Benchmark helper: the PostgreSQL-only cost of draining the table's PENDING rows, without
 * Kafka: read a batch, mark it, repeat until nothing is left. Prints events/s.
 *   pg-ceiling --pg-dsn DSN [--batch N] [--variant relay|delete|plain|plain-delete]
 * relay: exactly the relay's claim (nothing in flight) and mark; delete: the relay's claim
 * and DELETE-on-send. plain, plain-delete: a ceiling that does not move with the relay's
 * design - select the batch's rows (every column the relay reads) from the head of the
 * pending index, then mark them SENT (or delete them) by id. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/config.h"
#include "relay/outbox.h"
#include "core/util.h"

int main(int argc, char **argv)
{
    const char *dsn = "", *variant = "relay";
    int batch = 1000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pg-dsn") && i + 1 < argc)
            dsn = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc)
            variant = argv[++i];
        else {
            fprintf(stderr, "usage: pg-ceiling --pg-dsn DSN [--batch N] [--variant relay|delete|plain|plain-delete]\n");
            return 2;
        }
    }
    PGconn *conn = PQconnectdb(dsn);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "pg-ceiling: %s", PQerrorMessage(conn));
        return 1;
    }
    struct config cfg = {.table = "public.outbox", .topic_template = "outbox.event.{aggregate_type}",
                         .poison_policy = "block", .on_sent = "mark"};
    struct outbox_sql sql;
    outbox_sql_init(&sql, &cfg);
    char limit[16];
    snprintf(limit, sizeof(limit), "%d", batch);
    struct strbuf parts;
    strbuf_init(&parts);
    strbuf_puts(&parts, "{");
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        strbuf_printf(&parts, "%s%d", p ? "," : "", p);
    strbuf_puts(&parts, "}");
    char quota[16];
    snprintf(quota, sizeof(quota), "%d", (batch + OUTBOX_LEASE_PARTITIONS - 1) / OUTBOX_LEASE_PARTITIONS * 2);
    /* the relay's default byte budget and librdkafka's default message.max.bytes */
    struct strbuf floors; /* every partition from the bottom, as the relay's first claim */
    strbuf_init(&floors);
    strbuf_puts(&floors, "{");
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        strbuf_printf(&floors, "%s0", p ? "," : "");
    strbuf_puts(&floors, "}");
    const char *claim_params[9] = {"{}", limit, "{}", parts.buf, quota, "33554432", "1000000", "{}",
                                   floors.buf};
    PQclear(PQexec(conn, "SET synchronous_commit = off")); /* as the relay's worker */
    const char *delete_sql = "DELETE FROM public.outbox WHERE id = ANY($1::int8[])";
    const char *plain_select =
        "SELECT id, event_id, aggregate_type, aggregate_id, event_type, topic, payload::text,"
        " headers::text, attempts, created_at FROM public.outbox WHERE status = 'PENDING'"
        " ORDER BY lease_partition, id LIMIT $1::int";
    const char *plain_mark =
        "UPDATE public.outbox SET status = 'SENT', sent_at = clock_timestamp() WHERE id = ANY($1::int8[])";
    int plain = strncmp(variant, "plain", 5) == 0;
    int del = strcmp(variant, "delete") == 0 || strcmp(variant, "plain-delete") == 0;
    long long total = 0;
    int64_t claim_us = 0, mark_us = 0, start = mono_us();
    struct strbuf ids;
    strbuf_init(&ids);
    for (;;) {
        int64_t t0 = mono_us();
        const char *plain_params[1] = {limit};
        PGresult *res = plain ? PQexecParams(conn, plain_select, 1, NULL, plain_params, NULL, NULL, 0)
                              : PQexecParams(conn, sql.claim, 9, NULL, claim_params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK) {
            fprintf(stderr, "pg-ceiling: claim: %s", PQresultErrorMessage(res));
            return 1;
        }
        int n = PQntuples(res);
        /* the relay reads every column; so does the ceiling */
        size_t bytes = 0;
        for (int i = 0; i < n; i++)
            for (int c = 0; c < PQnfields(res); c++)
                bytes += (size_t)PQgetlength(res, i, c);
        (void)bytes;
        strbuf_reset(&ids);
        strbuf_puts(&ids, "{");
        for (int i = 0; i < n; i++)
            strbuf_printf(&ids, "%s%s", i ? "," : "", PQgetvalue(res, i, 0));
        strbuf_puts(&ids, "}");
        PQclear(res);
        int64_t t1 = mono_us();
        claim_us += t1 - t0;
        if (n == 0)
            break;
        const char *mark_params[3] = {ids.buf, "pg-ceiling", "0"};
        const char *mark_sql = del ? delete_sql : plain ? plain_mark : sql.mark;
        res = PQexecParams(conn, mark_sql, del || plain ? 1 : 3, NULL, mark_params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
            fprintf(stderr, "pg-ceiling: mark: %s", PQresultErrorMessage(res));
            return 1;
        }
        PQclear(res);
        mark_us += mono_us() - t1;
        total += n;
    }
    double secs = (double)(mono_us() - start) / 1e6;
    printf("CEILING variant=%s events=%lld seconds=%.2f eps=%.0f claim_ms_per_1000=%.2f "
           "mark_ms_per_1000=%.2f\n",
           variant, total, secs, total / secs, total ? claim_us / 1000.0 / total * 1000 : 0,
           total ? mark_us / 1000.0 / total * 1000 : 0);
    strbuf_destroy(&ids);
    outbox_sql_destroy(&sql);
    PQfinish(conn);
    return 0;
}
