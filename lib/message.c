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

static void add_header(struct message *msg, const char *name, const char *value)
{
    msg->headers = xrealloc(msg->headers, (msg->n_headers + 1) * sizeof(*msg->headers));
    msg->headers[msg->n_headers++] = (struct message_header){xstrdup(name), xstrdup(value)};
}

void message_destroy(struct message *msg)
{
    if (!msg)
        return;
    for (size_t i = 0; i < msg->n_headers; i++) {
        free(msg->headers[i].name);
        free(msg->headers[i].value);
    }
    free(msg->headers);
    free(msg->topic);
    msg->headers = NULL;
    msg->topic = NULL;
    msg->n_headers = 0;
}

static int add_row_headers(struct message *msg, const char *json, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loads(json, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!root)
        return set_err(err, errlen, "headers: not valid JSON: %s", jerr.text);
    int rc = 0;
    if (json_is_null(root))
        goto out;
    if (!json_is_object(root)) {
        rc = set_err(err, errlen, "headers: expected a JSON object of strings");
        goto out;
    }
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        if (!json_is_string(value)) {
            rc = set_err(err, errlen, "headers: member '%s' is not a string", name);
            goto out;
        }
        if (strcmp(name, "event_id") == 0) {
            rc = set_err(err, errlen, "headers: 'event_id' is reserved for the row's event_id");
            goto out;
        }
        if (name[0] == '\0') {
            rc = set_err(err, errlen, "headers: empty header name");
            goto out;
        }
        add_header(msg, name, json_string_value(value));
    }
out:
    json_decref(root);
    return rc;
}

int message_build(const struct outbox_row *row, const char *tmpl, struct message *msg,
                  char *err, size_t errlen)
{
    memset(msg, 0, sizeof(*msg));
    msg->topic = row->topic ? xstrdup(row->topic)
                            : message_topic(tmpl, row->aggregate_type, row->event_type);
    if (!message_topic_valid(msg->topic)) {
        set_err(err, errlen, "topic '%.250s' is not a valid Kafka topic name", msg->topic);
        goto fail;
    }
    add_header(msg, "event_id", row->event_id);
    add_header(msg, "event_type", row->event_type);
    add_header(msg, "aggregate_type", row->aggregate_type);
    if (row->headers && add_row_headers(msg, row->headers, err, errlen) != 0)
        goto fail;
    return 0;
fail:
    message_destroy(msg);
    return -1;
}
