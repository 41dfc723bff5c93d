/* Row -> Kafka message mapping. */
#include "sink/message.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"

char *message_topic(const char *tmpl, const char *aggregate_type, const char *event_type)
{
    struct strbuf sb;
    strbuf_init(&sb);
    for (const char *p = tmpl; *p;) {
        const char *brace = strchr(p, '{');
        if (brace != p) { /* copy the literal run up to the next placeholder at once */
            size_t n = brace ? (size_t)(brace - p) : strlen(p);
            strbuf_append(&sb, p, n);
            p += n;
            continue;
        }
        if (strncmp(p, "{aggregate_type}", 16) == 0) {
            strbuf_puts(&sb, aggregate_type ? aggregate_type : "");
            p += 16;
        } else if (strncmp(p, "{event_type}", 12) == 0) {
            strbuf_puts(&sb, event_type ? event_type : "");
            p += 12;
        } else {
            strbuf_append(&sb, p, 1);
            p++;
        }
    }
    return sb.buf;
}

int message_topic_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 249 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* The relay's fixed headers: room for them is part of MESSAGE_MAX_HEADERS. */
static void add_header(struct message *msg, const char *name, const char *value)
{
    msg->headers[msg->n_headers++] = (struct message_header){name, value};
}

/* One of the row's own headers: at most MESSAGE_MAX_ROW_HEADERS. */
static int add_row_header(struct message *msg, const char *name, const char *value)
{
    if (msg->n_row_headers >= MESSAGE_MAX_ROW_HEADERS)
        return -1;
    msg->n_row_headers++;
    add_header(msg, name, value);
    return 0;
}

const char *message_content_type(const char *payload_type)
{
    if (payload_type && (strcmp(payload_type, "jsonb") == 0 || strcmp(payload_type, "json") == 0))
        return "application/json";
    if (payload_type && strcmp(payload_type, "text") == 0)
        return "text/plain; charset=utf-8";
    return "application/octet-stream";
}

/* ms since the epoch as RFC 3339 in UTC with milliseconds: 2026-12-01T17:50:28.123Z */
static void rfc3339_ms(int64_t ms, char *out, size_t outlen)
{
    int64_t secs = ms / 1000, frac = ms % 1000;
    if (frac < 0) { /* before 1970: floor, so the fraction stays positive */
        frac += 1000;
        secs--;
    }
    time_t t = (time_t)secs;
    struct tm tm;
    if (!gmtime_r(&t, &tm) || tm.tm_year + 1900 < 0 || tm.tm_year + 1900 > 9999) {
        snprintf(out, outlen, "1970-01-01T00:00:00.000Z"); /* outside RFC 3339's years */
        return;
    }
    snprintf(out, outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)frac);
}

void message_add_relay_header(struct message *msg, const char *name, const char *value)
{
    if (msg->n_headers < MESSAGE_MAX_HEADERS)
        msg->headers[msg->n_headers++] = (struct message_header){name, value};
}

void message_destroy(struct message *msg)
{
    if (!msg)
        return;
    free(msg->topic);
    json_decref(msg->json);
    msg->topic = NULL;
    msg->json = NULL;
    msg->n_headers = 0;
}

static int add_row_headers(struct message *msg, const char *json, int debezium, int ce, char *err,
                           size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return set_err(err, errlen, "headers: not valid JSON: %s", jerr.text);
    msg->json = root; /* header names and values point into it */
    if (json_is_null(root))
        return 0;
    if (!json_is_object(root))
        return set_err(err, errlen, "headers: expected a JSON object of strings");
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        /* in the Debezium layout a NULL column is a header without a value, as the event
         * router sends it */
        if (!json_is_string(value) && !(debezium && json_is_null(value)))
            return set_err(err, errlen, "headers: member '%s' is not a string", name);
        if (!debezium && (strcmp(name, "event_id") == 0 || strcmp(name, "event_type") == 0 ||
                          strcmp(name, "aggregate_type") == 0))
            return set_err(err, errlen, "headers: '%s' is reserved for the row's %s column",
                           name, name);
        if (debezium && strcmp(name, "id") == 0)
            return set_err(err, errlen, "headers: 'id' is reserved for the row's id column");
        if (strcmp(name, "outbox_lease") == 0)
            return set_err(err, errlen, "headers: '%s' is reserved for the relay", name);
        if (ce && strncmp(name, "ce_", 3) == 0)
            return set_err(err, errlen, "headers: '%s' is reserved for the CloudEvents attributes "
                           "(OUTBOX_CLOUDEVENTS_SOURCE is set)", name);
        if (name[0] == '\0')
            return set_err(err, errlen, "headers: empty header name");
        if (add_row_header(msg, name, json_is_null(value) ? NULL : json_string_value(value)) != 0)
            return set_err(err, errlen, "headers: more than %d headers", MESSAGE_MAX_ROW_HEADERS);
    }
    return 0;
}

int message_build(const struct outbox_row *row, const char *tmpl, struct message *msg,
                  char *err, size_t errlen)
{
    struct message_layout lay = {.topic_template = tmpl};
    return message_build_layout(row, &lay, msg, err, errlen);
}

/* Whether the row's own headers (already added) have one named name. */
static int has_row_header(const struct message *msg, const char *name)
{
    for (size_t i = msg->n_headers - msg->n_row_headers; i < msg->n_headers; i++)
        if (strcmp(msg->headers[i].name, name) == 0)
            return 1;
    return 0;
}

int message_build_layout(const struct outbox_row *row, const struct message_layout *lay,
                         struct message *msg, char *err, size_t errlen)
{
    int debezium = lay->debezium, ce = lay->ce_source && lay->ce_source[0];
    msg->n_headers = 0;
    msg->n_row_headers = 0;
    msg->json = NULL;
    msg->txn_group = 0;
    msg->event_id = row->event_id;
    msg->event_type = row->event_type;
    msg->content_type = lay->content_type;
    msg->created_ms = row->created_ms;
    msg->topic = row->topic ? xstrdup(row->topic)
                            : message_topic(lay->topic_template, row->aggregate_type, row->event_type);
    if (!message_topic_valid(msg->topic)) {
        set_err(err, errlen, "topic '%.250s' is not a valid Kafka topic name", msg->topic);
        goto fail;
    }
    if (debezium) { /* as Debezium's outbox event router: the event's id, nothing more */
        add_header(msg, "id", row->event_id);
    } else {
        add_header(msg, "event_id", row->event_id);
        add_header(msg, "event_type", row->event_type);
        add_header(msg, "aggregate_type", row->aggregate_type);
    }
    if (ce) { /* the binary mode's attributes; values as they are (UTF-8, not percent-encoded) */
        rfc3339_ms(row->created_ms, msg->ce_time, sizeof(msg->ce_time));
        add_header(msg, "ce_specversion", "1.0");
        add_header(msg, "ce_id", row->event_id);
        add_header(msg, "ce_source", lay->ce_source);
        add_header(msg, "ce_type", row->event_type);
        add_header(msg, "ce_subject", row->aggregate_id);
        add_header(msg, "ce_time", msg->ce_time);
    }
    if (row->headers && add_row_headers(msg, row->headers, debezium, ce, err, errlen) != 0)
        goto fail;
    if (ce && !has_row_header(msg, "content-type")) /* the row's own wins */
        add_header(msg, "content-type", lay->ce_content_type ? lay->ce_content_type
                                                             : "application/octet-stream");
    return 0;
fail:
    message_destroy(msg);
    return -1;
}
