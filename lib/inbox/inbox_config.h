/* outbox-inbox settings: INBOX_* environment variables (NAME_FILE reads a file), a
 * command, and INBOX_KAFKA_<PROP> for librdkafka, as the relay maps OUTBOX_KAFKA_. */
#ifndef OUTBOX_INBOX_CONFIG_H
#define OUTBOX_INBOX_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "core/settings.h"
#include "core/log.h"

#define INBOX_KEY_PARTS 8
#define INBOX_BATCH_MAX 1000

/* One part of INBOX_DEDUPE_KEY: a header's value, or a JSON pointer into the payload. */
struct inbox_key_part {
    int from_payload;
    char *name; /* header name, or JSON pointer ("/document/number") */
};

struct inbox_config {
    char *pg_dsn;
    char *pg_dsn_file; /* INBOX_PG_DSN_FILE's path, or NULL: read again at each reconnect */
    char *topics;            /* "a,b,c" or "^regex" */
    char *source;            /* "kafka" (default) or "rabbitmq" */
    int rabbitmq;            /* source is "rabbitmq" */
    char *rabbitmq_url;
    char *rabbitmq_queues;   /* "a,b" */
    char *rabbitmq_ca_file, *rabbitmq_cert_file, *rabbitmq_key_file;
    char *handler;           /* [schema.]function taking (uuid, text, text, jsonb, jsonb) */
    char *name;              /* the inbox's handler column; default: the handler's name */
    char *table;             /* schema.table, "public." added when missing */
    char *event_id_header;
    char *dedupe_key;        /* "" or "header:NAME,payload:/pointer,..." */
    char *dead_letter_topic; /* "" : failed messages stay in the inbox table only */
    char *retention;
    char *http_addr;
    char *log_level_name;
    char *log_format_name;
    int batch_size;
    int max_attempts;
    int retry_backoff_ms;
    int retry_backoff_max_ms;
    int retention_seconds;
    enum log_level log_level;
    enum log_format log_format;
    struct inbox_key_part key_parts[INBOX_KEY_PARTS];
    int n_key_parts;
    struct kafka_prop *kafka;
    size_t n_kafka;

    char *command;    /* "run" (default) or "migrate" */
    int check_config; /* --check-config */
    int show_help;    /* 1 --help, 2 --help-markdown */
    int show_version;
};

/* Defaults, then envp, then argv. 0, or -1 with err naming the setting; cfg is safe to
 * destroy either way. */
int inbox_config_load(struct inbox_config *cfg, char **envp, int argc, char **argv, char *err,
                      size_t errlen);
void inbox_config_destroy(struct inbox_config *cfg);
/* The source's own settings (source/source.h), borrowing cfg's strings: cfg must outlive out. */
struct source_config;
void inbox_config_source(const struct inbox_config *cfg, struct source_config *out);
/* Whether a librdkafka property was set (INBOX_KAFKA_<NAME>). */
int inbox_config_has_kafka(const struct inbox_config *cfg, const char *name);
void inbox_config_print_help(FILE *out);
void inbox_config_print_markdown(FILE *out);

#endif
