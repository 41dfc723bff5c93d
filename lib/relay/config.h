/* The relay's settings (OUTBOX_*, one declarative table read by core/settings.h: flags
 * override the environment; NAME_FILE reads a setting from a file) and its command line. */
#ifndef OUTBOX_CONFIG_H
#define OUTBOX_CONFIG_H

#include <stdio.h>

#include "core/log.h"
#include "core/settings.h"

struct config {
    char *pg_dsn;
    char *pg_dsn_file; /* OUTBOX_PG_DSN_FILE's path, or NULL: read again at each reconnect */
    char *table;
    char *topic_template;
    char *topic_allow; /* comma-separated glob patterns; "" = any name not starting with '_' */
    char *notify_channel;
    int batch_size;
    int poll_interval_ms;
    int max_inflight;
    int max_inflight_bytes;
    int shutdown_timeout_ms;
    int mark_delay_ms; /* longest wait for more acknowledged rows before recording them */
    int statement_timeout_ms;
    int reconnect_max_ms;
    char *http_addr;
    int ready_strict;
    int max_attempts;
    char *poison_policy;
    char *payload_type; /* migrate: the payload column's type for a new table ("" = jsonb) */
    char *on_sent;     /* "mark" (status SENT) or "delete" (the row is deleted once acknowledged);
                        * unset: delete in the Debezium layout, else mark */
    int keep;          /* on_sent is "keep": progress is a watermark, rows are never written */
    char *layout;      /* "native" (the relay's own table) or "debezium" (Debezium's outbox table) */
    int debezium;      /* layout is "debezium" */
    char *additional_placement; /* debezium: "column:header[:name],..." extra columns as headers */
    char *ce_source;       /* OUTBOX_CLOUDEVENTS_SOURCE: CloudEvents binary mode's source; "" = off */
    char *ce_content_type; /* OUTBOX_CLOUDEVENTS_CONTENT_TYPE: "" = from the payload column's type */
    char *dead_letter_topic;
    char *retention;
    int retention_seconds; /* parsed from retention; 0 disables */
    int long_tx_seconds;
    char *relay_name;
    int topic_pause_ms;
    int lease_timeout_ms;
    int watermark_audit_ms; /* keep mode: the audit of rows below the watermarks, per round */
    int exactly_once;  /* OUTBOX_EXACTLY_ONCE: Kafka transactions with a progress record */
    char *transactional_id_prefix;
    char *progress_topic;
    int transaction_gap_ms; /* exactly-once: the pause after each commit */
    int transaction_groups; /* exactly-once: groups of lease partitions, each with a producer */
    char *transactional_id; /* derived: prefix.schema.table.g0 */
    char *progress_key;     /* derived: the table's key in the progress topic (its transactional.id) */
    char *sink;        /* "kafka" (default) or "rabbitmq" */
    int rabbitmq;      /* sink is "rabbitmq" */
    char *rabbitmq_url;
    char *rabbitmq_exchange;
    char *rabbitmq_ca_file, *rabbitmq_cert_file, *rabbitmq_key_file;
    int rabbitmq_confirm_timeout_ms;
    int rabbitmq_max_message_bytes;
    int rabbitmq_strict_key_order;
    enum log_level log_level;
    enum log_format log_format;
    char *log_level_name;
    char *log_format_name;

    struct kafka_prop *kafka;
    size_t n_kafka;
};

/* Not settings: what the command line asked for. */
struct command {
    char *name;       /* "run" (default), "migrate", "status", "requeue", "purge", "replay", "audit", "healthcheck" */
    int json;         /* --json: machine-readable output of status/requeue/purge/replay/audit */
    char *id;         /* requeue/replay --id N */
    char *key;        /* requeue/replay --key K */
    int all;          /* requeue --all */
    char *since;      /* replay/audit --since T (a timestamp PostgreSQL reads) */
    char *until;      /* replay/audit --until T */
    long long limit;  /* replay --limit N (0: none) */
    int dry_run;      /* replay --dry-run */
    int check_config; /* --check-config */
    int leave_keep;   /* migrate --leave-keep */
    long long partition_ids; /* migrate --partition IDS (0: not asked) */
    int show_help;    /* 1 --help, 2 --help-markdown */
    int show_version; /* --version */
};

/* Fills cfg from defaults, then envp (NULL-terminated "NAME=value" array), then argv's
 * setting flags, and cmd from argv's command and its flags. Returns 0, or -1 with a message
 * naming the setting or argument in err. Warnings (unknown OUTBOX_* variables, which
 * Kubernetes service links produce) go to the log. On failure cfg and cmd are still safe
 * to destroy. */
int config_load(struct config *cfg, struct command *cmd, char **envp, int argc, char **argv,
                char *err, size_t errlen);
void config_destroy(struct config *cfg);
/* The sink's own settings (sink/sink.h), borrowing cfg's strings: cfg must outlive out. */
struct sink_config;
void config_sink(const struct config *cfg, struct sink_config *out);
void command_destroy(struct command *cmd);

/* Validates a topic template: only {aggregate_type} and {event_type} placeholders,
 * and otherwise characters Kafka allows in topic names. */
int config_check_topic_template(const char *tmpl, char *err, size_t errlen);
/* OUTBOX_ADDITIONAL_PLACEMENT, "column:header[:name],...": reads the item at *cursor into
 * column and header (the header's name: name, else the column). Returns 1 and advances
 * *cursor, 0 at the end of the list, -1 with err on a malformed item. */
#define CONFIG_IDENT_MAX 64 /* a PostgreSQL identifier and its NUL */
int config_placement_next(const char **cursor, char column[CONFIG_IDENT_MAX],
                          char header[CONFIG_IDENT_MAX], char *err, size_t errlen);
/* Validates a URI-reference (RFC 3986, section 4.1: a URI or a relative reference), as
 * CloudEvents' source attribute must be: not empty, only the characters RFC 3986 allows,
 * every '%' followed by two hex digits, a scheme (letter, then letters, digits, + - .)
 * before a ':' that comes ahead of any '/', '?' or '#', at most one '#', '[' ']' only in an
 * authority. */
int config_check_uri_reference(const char *v, char *err, size_t errlen);
/* Whether rows may name this topic under OUTBOX_TOPIC_ALLOW (allow: the setting's value). */
int config_topic_allowed(const char *allow, const char *topic);

void config_print_help(FILE *out);
/* Prints the settings table as Markdown (docs/CONFIGURATION.md's reference). */
void config_print_markdown(FILE *out);

#endif
