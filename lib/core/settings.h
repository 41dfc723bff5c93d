/* Settings, for both programs: one declarative table per program gives each setting its
 * environment variable, flag, default, bounds, check and help, so that loading, --help and
 * the Markdown reference cannot drift apart. One loader reads any prefix's table: the
 * defaults, then <PREFIX>* environment variables (NAME_FILE reads NAME from a file, read
 * again when a connection or Kafka client is made), <PREFIX>KAFKA_<NAME> as librdkafka
 * properties, then flags (--name value, --name=value, --kafka NAME=VALUE). */
#ifndef OUTBOX_CORE_SETTINGS_H
#define OUTBOX_CORE_SETTINGS_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdio.h>

struct kafka_prop {
    char *name;  /* librdkafka property, e.g. "bootstrap.servers" */
    char *value;
    char *origin; /* "OUTBOX_KAFKA_..." or "--kafka" (for error messages) */
    char *file;   /* the <NAME>_FILE it was read from, or NULL: read again whenever a client
                   * is made (a rotated secret is picked up when the client is recreated) */
};

enum setting_type { SETTING_STRING, SETTING_INT };

struct setting {
    const char *env;
    const char *flag; /* without "--"; NULL: environment only */
    enum setting_type type;
    size_t offset; /* of the char * or int in the program's settings struct */
    const char *def;
    long min, max; /* SETTING_INT's bounds */
    int (*check)(const char *value, char *err, size_t errlen); /* SETTING_STRING, or NULL */
    const char *help;
};

/* A program's settings: its prefix and table, and where in its struct the librdkafka
 * properties (struct kafka_prop *, size_t) and the DSN with its file path (char *) live. */
struct settings_spec {
    const char *prefix; /* "OUTBOX_", "INBOX_" */
    const struct setting *table;
    size_t n;
    size_t kafka_offset, n_kafka_offset;
    size_t dsn_offset, dsn_file_offset;
};

/* Every setting to its default (cfg zeroed first). */
void settings_defaults(const struct settings_spec *sp, void *cfg);
/* The environment (a NULL-terminated "NAME=value" array): 0, or -1 with err naming the
 * variable. Unknown <PREFIX>* variables and Kubernetes service links are logged and
 * ignored. */
int settings_load_env(const struct settings_spec *sp, void *cfg, char **envp, char *err, size_t errlen);
/* argv[*i], a "--name" or "--name=value" argument: a setting's flag (its value the next
 * argument or after '=') or --kafka NAME=VALUE. Returns 1 when it was one (*i advanced past
 * its value), 0 when it is no setting's flag, -1 with err on a bad or missing value. */
int settings_flag(const struct settings_spec *sp, void *cfg, int argc, char **argv, int *i,
                  char *err, size_t errlen);
/* Every librdkafka property set on a scratch configuration: 0, or -1 with err. */
int settings_check_kafka(const struct settings_spec *sp, const void *cfg, char *err, size_t errlen);
/* Frees the strings, the properties and the DSN file path; cfg's settings become NULL/0. */
void settings_free(const struct settings_spec *sp, void *cfg);
/* --help's settings lines, and the Markdown table (docs/CONFIGURATION.md, docs/INBOX.md),
 * each ending with the <PREFIX>KAFKA_<NAME> line. */
void settings_print_help(const struct settings_spec *sp, FILE *out);
void settings_print_markdown(const struct settings_spec *sp, FILE *out);

/* A NAME_FILE secret's content (one trailing newline dropped; origin names it in errors;
 * caller frees), whether NAME looks like a Kubernetes service link variable, and the
 * librdkafka property of a <PREFIX>KAFKA_ suffix (BOOTSTRAP_SERVERS -> bootstrap.servers;
 * caller frees). */
char *settings_read_secret(const char *path, const char *origin, char *err, size_t errlen);
int settings_is_service_link(const char *name);
char *settings_kafka_name(const char *suffix);
/* A secret setting's value now: its file's current content when file is set (a rotated
 * secret; an unreadable file: value, with a warning naming origin), else value. Caller frees.
 * The DSN files and the Kafka properties read from files both go through it. */
char *settings_current_secret(const char *value, const char *file, const char *origin);

/* librdkafka properties as settings hold them: add (a later one of the same name replaces
 * it; file: the NAME_FILE path the value came from, or NULL), free, and apply to a
 * configuration (0, or -1 with err naming the property's origin). Apply reads a property
 * that came from a file again, so that a client made after the secret was rotated uses the
 * new one (an unreadable file: the value read before, with a warning). */
void settings_kafka_add(struct kafka_prop **props, size_t *n, const char *name, const char *value,
                        const char *origin, const char *file);
void settings_kafka_free(struct kafka_prop *props, size_t n);
int settings_kafka_apply(rd_kafka_conf_t *conf, const struct kafka_prop *props, size_t n, char *err,
                         size_t errlen);
/* Whether a librdkafka property is among props (set by <PREFIX>KAFKA_<NAME> or a flag). */
int settings_kafka_has(const struct kafka_prop *props, size_t n, const char *name);
/* The current contents of the properties read from files, as one string to compare with an
 * earlier one (caller frees); NULL when no property comes from a file. */
char *settings_kafka_file_snapshot(const struct kafka_prop *props, size_t n);
/* Whether those files now hold something else than the snapshot seen (NULL: no file, never). */
int settings_kafka_files_changed(const struct kafka_prop *props, size_t n, const char *seen);

/* Checks both programs' settings use: an outbox or inbox table name "[schema.]name" of
 * plain identifiers; a duration "90", "90s", "15m", "24h", "7d" in seconds (0 disables). */
int settings_check_table(const char *table, char *err, size_t errlen);
int settings_parse_duration(const char *s, int *seconds);
/* Whether s[0..n) is a plain identifier: a letter or '_', then letters, digits, '_' (1..63). */
int settings_is_ident(const char *s, size_t n);

#endif
