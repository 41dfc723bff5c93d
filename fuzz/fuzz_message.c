/* libFuzzer target: row -> message mapping. The input is split at NUL bytes into topic
 * template, topic column, headers JSON, key, event type and aggregate type. A template
 * the settings accept must expand to a valid topic name or be rejected cleanly; the
 * mapping must never crash or leak; the SQL topic expression built from an accepted
 * template must not contain a quote the template did not have. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relay/config.h"
#include "sink/message.h"
#include "relay/outbox.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    const char *part[6] = {"outbox.event.{aggregate_type}", NULL, NULL, "key", "Evt", "agg"};
    size_t off = 0;
    for (int i = 0; i < 6 && off <= size; i++) {
        part[i] = text + off;
        off += strlen(text + off) + 1;
    }
    char err[512];
    const char *tmpl = part[0];
    if (config_check_topic_template(tmpl, err, sizeof(err)) == 0) {
        struct outbox_row row = {
            .id = 1,
            .event_id = "00000000-0000-4000-8000-000000000000",
            .aggregate_type = part[5],
            .aggregate_id = part[3],
            .event_type = part[4],
            .topic = part[1] && part[1][0] ? part[1] : NULL,
            .payload = "{}",
            .payload_len = 2,
            .headers = part[2] && part[2][0] ? part[2] : NULL,
        };
        struct message msg;
        if (message_build(&row, tmpl, &msg, err, sizeof(err)) == 0) {
            if (!message_topic_valid(msg.topic))
                abort(); /* an accepted message must have a valid topic */
            if (strcmp(msg.headers[0].name, "event_id") != 0 ||
                strcmp(msg.headers[0].value, row.event_id) != 0)
                abort(); /* event_id comes first and cannot be shadowed */
            for (size_t i = 1; i < msg.n_headers; i++)
                if (strcmp(msg.headers[i].name, "event_id") == 0)
                    abort();
            message_destroy(&msg);
        }
        struct message_layout dbz = {.topic_template = tmpl, .debezium = 1};
        if (message_build_layout(&row, &dbz, &msg, err, sizeof(err)) == 0) {
            if (strcmp(msg.headers[0].name, "id") != 0 || strcmp(msg.headers[0].value, row.event_id) != 0)
                abort(); /* Debezium layout: id comes first and cannot be shadowed */
            for (size_t i = 1; i < msg.n_headers; i++)
                if (strcmp(msg.headers[i].name, "id") == 0)
                    abort();
            message_destroy(&msg);
        }
        /* CloudEvents on: the attributes come from the row's columns alone - a row header
         * can neither shadow nor repeat a ce_ header - and content-type appears once */
        struct message_layout ce = {.topic_template = tmpl, .ce_source = "/fuzz",
                                    .ce_content_type = "application/json"};
        if (message_build_layout(&row, &ce, &msg, err, sizeof(err)) == 0) {
            size_t ce_headers = 0, content_types = 0;
            for (size_t i = 0; i < msg.n_headers; i++) {
                ce_headers += strncmp(msg.headers[i].name, "ce_", 3) == 0;
                content_types += strcmp(msg.headers[i].name, "content-type") == 0;
            }
            if (ce_headers != 6 || content_types != 1 || strcmp(msg.headers[4].name, "ce_id") != 0 ||
                strcmp(msg.headers[4].value, row.event_id) != 0)
                abort();
            message_destroy(&msg);
        }
        struct config cfg = {.table = "public.outbox", .topic_template = (char *)tmpl,
                             .poison_policy = "block", .on_sent = "mark"};
        struct outbox_sql sql;
        outbox_sql_init(&sql, &cfg);
        size_t quotes = 0;
        for (const char *p = sql.topic_expr; *p; p++)
            quotes += *p == '\'';
        if (quotes % 2)
            abort(); /* an unbalanced quote would be SQL injection */
        outbox_sql_destroy(&sql);
        /* an accepted OUTBOX_ADDITIONAL_PLACEMENT never unbalances the claim's quotes */
        const char *cursor = part[2] ? part[2] : "";
        char column[CONFIG_IDENT_MAX], header[CONFIG_IDENT_MAX];
        int rc;
        while ((rc = config_placement_next(&cursor, column, header, err, sizeof(err))) == 1)
            ;
        if (part[2] && part[2][0] && rc == 0) {
            cfg.debezium = 1;
            cfg.layout = "debezium";
            cfg.additional_placement = (char *)part[2];
            outbox_sql_init(&sql, &cfg);
            size_t single = 0, dbl = 0;
            for (const char *p = sql.claim; *p; p++) {
                single += *p == '\'';
                dbl += *p == '"';
            }
            if (single % 2 || dbl % 2)
                abort();
            outbox_sql_destroy(&sql);
        }
    }
    free(text);
    return 0;
}
