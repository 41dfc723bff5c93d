/* Row -> Kafka message mapping. */
#include "message.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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

static int add_header(struct message *msg, const char *name, const char *value)
{
    if (msg->n_headers >= MESSAGE_MAX_HEADERS - MESSAGE_RELAY_HEADERS)
        return -1;
    msg->headers[msg->n_headers++] = (struct message_header){name, value};
    return 0;
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

static int add_row_headers(struct message *msg, const char *json, int debezium, char *err,
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
        if (name[0] == '\0')
            return set_err(err, errlen, "headers: empty header name");
        if (add_header(msg, name, json_is_null(value) ? NULL : json_string_value(value)) != 0)
            return set_err(err, errlen, "headers: more than %d headers",
                           MESSAGE_MAX_HEADERS - MESSAGE_RELAY_HEADERS - 3);
    }
    return 0;
}

int message_build(const struct outbox_row *row, const char *tmpl, struct message *msg,
                  char *err, size_t errlen)
{
    return message_build_layout(row, tmpl, 0, msg, err, errlen);
}

int message_build_layout(const struct outbox_row *row, const char *tmpl, int debezium,
                         struct message *msg, char *err, size_t errlen)
{
    msg->n_headers = 0;
    msg->json = NULL;
    msg->topic = row->topic ? xstrdup(row->topic)
                            : message_topic(tmpl, row->aggregate_type, row->event_type);
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
    if (row->headers && add_row_headers(msg, row->headers, debezium, err, errlen) != 0)
        goto fail;
    return 0;
fail:
    message_destroy(msg);
    return -1;
}
