/* Settings: one declarative table gives defaults, bounds, environment names,
 * flags, validation and --help, so they cannot drift apart. Flags override the
 * environment; NAME_FILE reads a setting from a file (container secrets). */
#ifndef OUTBOX_CONFIG_H
#define OUTBOX_CONFIG_H

#include <librdkafka/rdkafka.h>
#include <stdio.h>

#include "log.h"

struct kafka_prop {
    char *name;  /* librdkafka property, e.g. "bootstrap.servers" */
    char *value;
    char *origin; /* "OUTBOX_KAFKA_..." or "--kafka" (for error messages) */
    char *file;   /* the <NAME>_FILE it was read from, or NULL: read again whenever a client
                   * is made (a rotated secret is picked up when the client is recreated) */
};

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
    int statement_timeout_ms;
    int reconnect_max_ms;
    char *http_addr;
    int ready_strict;
    int max_attempts;
    char *poison_policy;
    char *payload_type; /* migrate: the payload column's type for a new table ("" = jsonb) */
    char *on_sent;     /* "mark" (status SENT) or "delete" (the row is deleted once acknowledged);
                        * unset: delete in the Debezium layout, else mark */
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
    enum log_level log_level;
    enum log_format log_format;
    char *log_level_name;
    char *log_format_name;

    struct kafka_prop *kafka;
    size_t n_kafka;

    /* Not settings: what the command line asked for. */
    char *command;     /* "run" (default), "migrate", "status", "requeue", "purge", "replay", "audit", "healthcheck" */
    int json;          /* --json: machine-readable output of status/requeue/purge/replay */
    char *requeue_id;  /* requeue/replay --id N */
    char *requeue_key; /* requeue/replay --key K */
    int requeue_all;   /* requeue --all */
    char *since;       /* replay/audit --since T (a timestamp PostgreSQL reads) */
    char *until;       /* replay/audit --until T */
    long long limit;   /* replay --limit N (0: none) */
    int dry_run;       /* replay --dry-run */
    int check_config;  /* --check-config */
    int show_help;     /* --help */
    int show_version;  /* --version */
};

/* Fills cfg from defaults, then envp (NULL-terminated "NAME=value" array), then argv.
 * Returns 0, or -1 with a message naming the setting in err. Warnings (unknown
 * OUTBOX_* variables, which Kubernetes service links produce) go to the log.
 * On failure cfg is still safe to pass to config_destroy. */
int config_load(struct config *cfg, char **envp, int argc, char **argv, char *err, size_t errlen);
void config_destroy(struct config *cfg);

/* Validates an outbox table name "[schema.]name" of plain identifiers. */
int config_check_table(const char *table, char *err, size_t errlen);
/* Parses a duration "90", "90s", "15m", "24h", "7d" into seconds; 0 disables. */
int config_parse_duration(const char *s, int *seconds);
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

/* Shared with outbox-inbox's settings: a NAME_FILE secret's content (one trailing newline
 * dropped; origin names it in errors; caller frees), whether NAME looks like a Kubernetes
 * service link variable, and the librdkafka property of a <PREFIX>_KAFKA_ suffix
 * (BOOTSTRAP_SERVERS -> bootstrap.servers; caller frees). */
char *config_read_secret(const char *path, const char *origin, char *err, size_t errlen);
int config_is_service_link(const char *name);
char *config_kafka_name(const char *suffix);

/* librdkafka properties as settings hold them: add (a later one of the same name replaces
 * it; file: the NAME_FILE path the value came from, or NULL), free, and apply to a
 * configuration (0, or -1 with err naming the property's origin). Apply reads a property
 * that came from a file again, so that a client made after the secret was rotated uses the
 * new one (an unreadable file: the value read before, with a warning). */
void config_kafka_add(struct kafka_prop **props, size_t *n, const char *name, const char *value,
                      const char *origin, const char *file);
void config_kafka_free(struct kafka_prop *props, size_t n);
int config_kafka_apply(rd_kafka_conf_t *conf, const struct kafka_prop *props, size_t n, char *err, size_t errlen);
/* The current contents of the properties read from files, as one string to compare with an
 * earlier one (caller frees); NULL when no property comes from a file. */
char *config_kafka_file_snapshot(const struct kafka_prop *props, size_t n);
/* Whether those files now hold something else than the snapshot seen (NULL: no file, never). */
int config_kafka_files_changed(const struct kafka_prop *props, size_t n, const char *seen);
/* A secret setting's value now: its file's current content when file is set (a rotated
 * secret; an unreadable file: value, with a warning naming origin), else value. Caller frees.
 * The DSN files and the Kafka properties read from files both go through it. */
char *config_current_secret(const char *value, const char *file, const char *origin);

void config_print_help(FILE *out);
/* Prints the settings table as Markdown (docs/CONFIGURATION.md's reference). */
void config_print_markdown(FILE *out);

#endif
