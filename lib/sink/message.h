/* Row -> Kafka message mapping: topic from the row or the template, key, value,
 * headers (event_id, event_type, aggregate_type, the CloudEvents attributes when they are
 * on, then the row's own). Pure: no I/O, so it is unit-tested and fuzzed directly. */
#ifndef OUTBOX_MESSAGE_H
#define OUTBOX_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

/* One claimed outbox row; strings are NUL-terminated, NULL where SQL NULL. */
struct outbox_row {
    int64_t id;
    const char *event_id;
    const char *aggregate_type;
    const char *aggregate_id;
    const char *event_type;
    const char *topic;
    const char *payload;
    size_t payload_len;
    const char *headers; /* JSON text or NULL */
    int64_t created_ms;  /* created_at, ms since the epoch */
    int attempts;
};

/* Names and values are borrowed: from the row, or from the parsed headers JSON that the
 * message keeps alive until message_destroy. Nothing is copied per header. */
struct message_header {
    const char *name;
    const char *value;
};

#define MESSAGE_MAX_ROW_HEADERS 60 /* a row's own headers (its headers column, placements) */
#define MESSAGE_CE_HEADERS 7       /* ce_specversion, ce_id, ce_source, ce_type, ce_subject,
                                    * ce_time, content-type */
#define MESSAGE_RELAY_HEADERS 1    /* outbox_lease: added by the relay */
#define MESSAGE_MAX_HEADERS (3 + MESSAGE_CE_HEADERS + MESSAGE_MAX_ROW_HEADERS + MESSAGE_RELAY_HEADERS)

struct message {
    char *topic; /* owned */
    struct message_header headers[MESSAGE_MAX_HEADERS];
    size_t n_headers;
    size_t n_row_headers; /* of them, the row's own */
    void *json;           /* the row's parsed headers (jansson), owned */
    char ce_time[32];     /* ce_time's value (RFC 3339, UTC, milliseconds) */
    /* The row's fields a sink with message properties of its own (RabbitMQ) sets them from;
     * borrowed from the row and the layout. */
    const char *event_id;
    const char *event_type;
    const char *content_type; /* the payload column's (layout's content_type), or NULL */
    int64_t created_ms;
    /* Exactly-once: the transaction group of the row's lease partition, whose producer
     * sends it (set by the relay; 0 from the builders) */
    int txn_group;
};

/* How rows become messages: set once per relay (or replay) from its settings and table. */
struct message_layout {
    const char *topic_template; /* for rows whose topic column is NULL */
    int debezium;               /* Debezium's event router's headers (OUTBOX_LAYOUT=debezium) */
    /* CloudEvents binary mode (Kafka protocol binding): ce_source NULL or "" = off; else
     * every message carries ce_specversion 1.0, ce_id (event id), ce_source, ce_type (event
     * type), ce_subject (aggregate id), ce_time (created_at) and content-type = ce_content_type
     * unless the row has a content-type header of its own (which wins); a row header named
     * ce_* makes the row unpublishable (reserved). */
    const char *ce_source;
    const char *ce_content_type;
    /* the payload column's content type (message_content_type), for sinks with a
     * content-type property of their own; NULL: none */
    const char *content_type;
};

/* The content-type CloudEvents messages get for a payload column of this type (format_type:
 * "jsonb", "json", "text", "bytea", ...): application/json, text/plain; charset=utf-8,
 * application/octet-stream (also for a type it does not know). */
const char *message_content_type(const char *payload_type);

/* Maps a row. Returns 0, or -1 with err naming what makes the row unpublishable
 * (bad headers JSON, reserved header, too many headers, invalid topic). msg is filled on
 * success only; release it with message_destroy. row and tmpl are borrowed and must
 * outlive msg (its headers point into the row). */
int message_build(const struct outbox_row *row, const char *tmpl, struct message *msg,
                  char *err, size_t errlen);
/* The same for a layout: debezium (OUTBOX_LAYOUT=debezium) gives the headers Debezium's
 * outbox event router gives - id (the row's event id), then the row's own (the additional
 * placement's) - instead of event_id, event_type and aggregate_type; CloudEvents headers
 * as the layout says. lay is borrowed and must outlive msg. */
int message_build_layout(const struct outbox_row *row, const struct message_layout *lay,
                         struct message *msg, char *err, size_t errlen);
void message_destroy(struct message *msg);
/* Adds one of the relay's own headers (room for MESSAGE_RELAY_HEADERS is kept); value is
 * borrowed until the message is produced. */
void message_add_relay_header(struct message *msg, const char *name, const char *value);

/* Expands the topic template for a row; caller frees. */
char *message_topic(const char *tmpl, const char *aggregate_type, const char *event_type);

/* 1 if name is a legal Kafka topic name (1..249 of [A-Za-z0-9._-], not "." or ".."). */
int message_topic_valid(const char *name);

#endif
