/* outbox-inbox settings: one table gives each setting its variable, default, bounds and
 * help; loading, validation, --help and the README's table come from it. */
#include "inbox_config.h"

#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

enum inbox_setting_kind { INBOX_SETTING_STRING, INBOX_SETTING_INT };

struct setting {
    const char *env;
    enum inbox_setting_kind kind;
    size_t off;
    const char *def;
    long min, max;
    const char *help;
};

#define OFF(f) offsetof(struct inbox_config, f)

static const struct setting settings[] = {
    {"INBOX_PG_DSN", INBOX_SETTING_STRING, OFF(pg_dsn), "", 0, 0,
     "libpq connection string or URI of the consumer's database (required)"},
    {"INBOX_TOPICS", INBOX_SETTING_STRING, OFF(topics), "", 0, 0,
     "topics to consume: a comma-separated list, or one `^regex` (required)"},
    {"INBOX_HANDLER", INBOX_SETTING_STRING, OFF(handler), "", 0, 0,
     "SQL function `[schema.]name(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)` "
     "applied to each new message (required to run; found on the role's search_path when not qualified)"},
    {"INBOX_NAME", INBOX_SETTING_STRING, OFF(name), "", 0, 0,
     "the inbox rows' `handler` value (one table may serve several handlers); default: the handler's name"},
    {"INBOX_TABLE", INBOX_SETTING_STRING, OFF(table), "public.inbox", 0, 0, "the inbox table, `[schema.]name`"},
    {"INBOX_EVENT_ID_HEADER", INBOX_SETTING_STRING, OFF(event_id_header), "auto", 0, 0,
     "header holding the event id (the default dedupe key); `auto`: `event_id` (this relay), else `id` "
     "(Debezium's outbox event router), else the CloudEvents pair `ce_source` + `ce_id`"},
    {"INBOX_DEDUPE_KEY", INBOX_SETTING_STRING, OFF(dedupe_key), "", 0, 0,
     "a business key instead of the event id: `header:NAME` and `payload:/json/pointer` parts, comma-separated"},
    {"INBOX_BATCH_SIZE", INBOX_SETTING_INT, OFF(batch_size), "100", 1, INBOX_BATCH_MAX,
     "messages applied in one transaction at most (each with its own dedupe record; the batch is what the "
     "consumer has ready, so a quiet topic commits each message at once)"},
    {"INBOX_MAX_ATTEMPTS", INBOX_SETTING_INT, OFF(max_attempts), "5", 1, 1000,
     "handler failures of one message before it is dead-lettered"},
    {"INBOX_RETRY_BACKOFF_MS", INBOX_SETTING_INT, OFF(retry_backoff_ms), "200", 1, 600000,
     "first retry delay after a handler failure (doubles, jittered)"},
    {"INBOX_RETRY_BACKOFF_MAX_MS", INBOX_SETTING_INT, OFF(retry_backoff_max_ms), "10000", 1, 3600000,
     "longest retry delay (also for PostgreSQL reconnects)"},
    {"INBOX_DEAD_LETTER_TOPIC", INBOX_SETTING_STRING, OFF(dead_letter_topic), "", 0, 0,
     "topic for messages whose handler failed INBOX_MAX_ATTEMPTS times (original key, value, headers and "
     "`inbox_error`); empty: only the inbox row records the failure"},
    {"INBOX_RETENTION", INBOX_SETTING_STRING, OFF(retention), "7d", 0, 0,
     "inbox rows older than this are deleted (`90s`, `15m`, `24h`, `7d`; `0` keeps them); must exceed "
     "the longest redelivery window"},
    {"INBOX_HTTP_ADDR", INBOX_SETTING_STRING, OFF(http_addr), ":9466", 0, 0,
     "`host:port` of /metrics /healthz /readyz /status; empty disables"},
    {"INBOX_LOG_LEVEL", INBOX_SETTING_STRING, OFF(log_level_name), "info", 0, 0, "debug, info, warn or error"},
    {"INBOX_LOG_FORMAT", INBOX_SETTING_STRING, OFF(log_format_name), "text", 0, 0, "text or json (one object per line)"},
};

static char **str_of(struct inbox_config *cfg, const struct setting *s)
{
    return (char **)((char *)cfg + s->off);
}

static int *int_of(struct inbox_config *cfg, const struct setting *s)
{
    return (int *)((char *)cfg + s->off);
}

static const struct setting *find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(settings); i++)
        if (strcmp(settings[i].env, name) == 0)
            return &settings[i];
    return NULL;
}

static int apply(struct inbox_config *cfg, const struct setting *s, const char *value, char *err, size_t errlen)
{
    if (s->kind == INBOX_SETTING_STRING) {
        free(*str_of(cfg, s));
        *str_of(cfg, s) = xstrdup(value);
        return 0;
    }
    char *end;
    long v = strtol(value, &end, 10);
    if (!*value || *end || v < s->min || v > s->max)
        return set_err(err, errlen, "%s: expected a whole number from %ld to %ld, got '%s'", s->env, s->min,
                       s->max, value);
    *int_of(cfg, s) = (int)v;
    return 0;
}

static int load_env(struct inbox_config *cfg, const char *var, char *err, size_t errlen)
{
    const char *eq = strchr(var, '=');
    if (strncmp(var, "INBOX_", 6) != 0 || !eq)
        return 0;
    char *name = xstrndup(var, (size_t)(eq - var));
    char *value = xstrdup(eq + 1);
    size_t n = strlen(name);
    int rc = 0;
    char *file = NULL; /* the NAME_FILE path: read again when a connection or client is made */
    if (n > 5 && strcmp(name + n - 5, "_FILE") == 0) {
        name[n - 5] = '\0';
        if (find(name) || strncmp(name, "INBOX_KAFKA_", 12) == 0) {
            char origin[300];
            snprintf(origin, sizeof(origin), "%s_FILE", name);
            char *secret = config_read_secret(value, origin, err, errlen);
            file = value;
            value = secret;
            if (!value) {
                free(name);
                free(file);
                return -1;
            }
        } else {
            name[n - 5] = '_';
        }
    }
    const struct setting *s = find(name);
    if (s) {
        rc = apply(cfg, s, value, err, errlen);
        if (rc == 0 && s->off == OFF(pg_dsn)) {
            free(cfg->pg_dsn_file);
            cfg->pg_dsn_file = file ? xstrdup(file) : NULL;
        }
    } else if (strncmp(name, "INBOX_KAFKA_", 12) == 0 && name[12]) {
        if (config_is_service_link(name)) {
            log_warn("ignoring %s: looks like a Kubernetes service link variable", name);
        } else {
            char *prop = config_kafka_name(name + 12);
            config_kafka_add(&cfg->kafka, &cfg->n_kafka, prop, value, name, file);
            free(prop);
        }
    }
#ifdef OUTBOX_TEST_HOOKS
    else if (strncmp(name, "INBOX_TESTHOOK_", 15) == 0) {
    }
#endif
    else {
        log_warn("ignoring unknown environment variable %s", name);
    }
    free(name);
    free(value);
    free(file);
    return rc;
}

/* "header:NAME,payload:/pointer": at least one part, each non-empty. */
static int parse_dedupe_key(struct inbox_config *cfg, char *err, size_t errlen)
{
    if (!cfg->dedupe_key[0])
        return 0;
    char *list = xstrdup(cfg->dedupe_key), *save = NULL;
    int rc = 0;
    for (char *item = strtok_r(list, ",", &save); item && rc == 0; item = strtok_r(NULL, ",", &save)) {
        int payload = strncmp(item, "payload:/", 9) == 0;
        if ((!payload && (strncmp(item, "header:", 7) != 0 || !item[7])) || cfg->n_key_parts == INBOX_KEY_PARTS)
            rc = set_err(err, errlen, "INBOX_DEDUPE_KEY: '%s' is not header:NAME or payload:/json/pointer "
                         "(at most %d parts)", item, INBOX_KEY_PARTS);
        else
            cfg->key_parts[cfg->n_key_parts++] = (struct inbox_key_part){payload, xstrdup(item + (payload ? 8 : 7))};
    }
    free(list);
    return rc;
}

static int validate(struct inbox_config *cfg, char *err, size_t errlen)
{
    if (!strchr(cfg->table, '.')) {
        char *full = xmalloc(strlen(cfg->table) + 8);
        sprintf(full, "public.%s", cfg->table);
        free(cfg->table);
        cfg->table = full;
    }
    char why[256];
    if (config_check_table(cfg->table, why, sizeof(why)) != 0)
        return set_err(err, errlen, "INBOX_TABLE: %s", why);
    if (!cfg->pg_dsn[0] && strcmp(cfg->command, "healthcheck") != 0)
        return set_err(err, errlen, "INBOX_PG_DSN: required (the consumer's database)");
    if (!cfg->topics[0] && strcmp(cfg->command, "run") == 0)
        return set_err(err, errlen, "INBOX_TOPICS: required (a list of topics, or ^regex)");
    if (!cfg->handler[0] && strcmp(cfg->command, "run") == 0)
        return set_err(err, errlen, "INBOX_HANDLER: required (the SQL function applying each message)");
    if (cfg->handler[0] && strcspn(cfg->handler, "();'\" \t\n") != strlen(cfg->handler))
        return set_err(err, errlen, "INBOX_HANDLER: '%s' is not a function name ([schema.]name, no "
                       "argument list)", cfg->handler);
    if (!cfg->name[0]) {
        free(cfg->name);
        const char *dot = strrchr(cfg->handler, '.');
        cfg->name = xstrdup(dot ? dot + 1 : cfg->handler);
    }
    if (!cfg->event_id_header[0])
        return set_err(err, errlen, "INBOX_EVENT_ID_HEADER: must name a header");
    if (config_parse_duration(cfg->retention, &cfg->retention_seconds) != 0)
        return set_err(err, errlen, "INBOX_RETENTION: '%s' is not a duration (90s, 15m, 24h, 7d, 0)", cfg->retention);
    if (cfg->retry_backoff_max_ms < cfg->retry_backoff_ms)
        return set_err(err, errlen, "INBOX_RETRY_BACKOFF_MAX_MS: %d is below INBOX_RETRY_BACKOFF_MS (%d)",
                       cfg->retry_backoff_max_ms, cfg->retry_backoff_ms);
    if (log_level_parse(cfg->log_level_name, &cfg->log_level) != 0)
        return set_err(err, errlen, "INBOX_LOG_LEVEL: '%s' is not debug, info, warn or error", cfg->log_level_name);
    if (log_format_parse(cfg->log_format_name, &cfg->log_format) != 0)
        return set_err(err, errlen, "INBOX_LOG_FORMAT: '%s' is not text or json", cfg->log_format_name);
    if (parse_dedupe_key(cfg, err, errlen) != 0)
        return -1;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc = config_kafka_apply(conf, cfg->kafka, cfg->n_kafka, err, errlen);
    rd_kafka_conf_destroy(conf);
    return rc;
}

int inbox_config_load(struct inbox_config *cfg, char **envp, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    /* the log format first, so that warnings about the environment are already in it */
    log_format_early(envp, "INBOX_LOG_FORMAT", NULL);
    cfg->command = xstrdup("run");
    for (size_t i = 0; i < ARRAY_LEN(settings); i++) {
        if (settings[i].kind == INBOX_SETTING_STRING)
            *str_of(cfg, &settings[i]) = xstrdup(settings[i].def);
        else
            *int_of(cfg, &settings[i]) = atoi(settings[i].def);
    }
    for (char **e = envp; e && *e; e++)
        if (load_env(cfg, *e, err, errlen) != 0)
            return -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            cfg->show_help = 1;
        else if (strcmp(a, "--help-markdown") == 0)
            cfg->show_help = 2;
        else if (strcmp(a, "--version") == 0)
            cfg->show_version = 1;
        else if (strcmp(a, "--check-config") == 0)
            cfg->check_config = 1;
        else if (strcmp(a, "run") == 0 || strcmp(a, "migrate") == 0 || strcmp(a, "healthcheck") == 0) {
            free(cfg->command);
            cfg->command = xstrdup(a);
        } else
            return set_err(err, errlen, "unknown argument '%s' (commands: run, migrate, healthcheck; --check-config, "
                           "--help, --version; settings are INBOX_* environment variables)", a);
    }
    if (cfg->show_help || cfg->show_version)
        return 0;
    return validate(cfg, err, errlen);
}

void inbox_config_destroy(struct inbox_config *cfg)
{
    for (size_t i = 0; i < ARRAY_LEN(settings); i++)
        if (settings[i].kind == INBOX_SETTING_STRING) {
            free(*str_of(cfg, &settings[i]));
            *str_of(cfg, &settings[i]) = NULL;
        }
    config_kafka_free(cfg->kafka, cfg->n_kafka);
    free(cfg->pg_dsn_file);
    for (int i = 0; i < cfg->n_key_parts; i++)
        free(cfg->key_parts[i].name);
    free(cfg->command);
    memset(cfg, 0, sizeof(*cfg));
}

void inbox_config_print_help(FILE *out)
{
    fprintf(out, "usage: outbox-inbox [run | migrate | healthcheck] [--check-config]\n\n"
                 "  run            consume INBOX_TOPICS and apply each new message with INBOX_HANDLER (default)\n"
                 "  migrate        create the inbox table and exit\n"
                 "  healthcheck    ask this consumer's /healthz (INBOX_HTTP_ADDR): exit 0 healthy, 1 not\n"
                 "  --check-config validate settings, reach PostgreSQL and Kafka, resolve the handler; exit 0/1/2\n\n"
                 "settings (environment; NAME_FILE reads NAME from a file):\n");
    for (size_t i = 0; i < ARRAY_LEN(settings); i++)
        fprintf(out, "  %-28s [%s]\n      %s\n", settings[i].env, settings[i].def, settings[i].help);
    fprintf(out, "  INBOX_KAFKA_<NAME>\n      any librdkafka property; INBOX_KAFKA_BOOTSTRAP_SERVERS -> "
                 "bootstrap.servers, INBOX_KAFKA_GROUP_ID -> group.id\n");
}

void inbox_config_print_markdown(FILE *out)
{
    fprintf(out, "| env | default | meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < ARRAY_LEN(settings); i++) {
        const struct setting *s = &settings[i];
        if (s->kind == INBOX_SETTING_INT)
            fprintf(out, "| %s | %s | %s (%ld..%ld) |\n", s->env, s->def, s->help, s->min, s->max);
        else
            fprintf(out, "| %s | %s%s%s | %s |\n", s->env, s->def[0] ? "`" : "", s->def, s->def[0] ? "`" : "",
                    s->help);
    }
    fprintf(out, "| INBOX_KAFKA_<NAME> | see below | any librdkafka property; the env name maps lower-case "
                 "with `_` → `.` |\n");
}
