/* outbox-inbox settings: one table gives each setting its variable, default, bounds and
 * help; loading, validation, --help and the README's table come from it. */
#include "inbox/inbox_config.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/amqp.h"
#include "source/source.h"

#define OFF(f) offsetof(struct inbox_config, f)

static const struct setting settings[] = {
    {"INBOX_PG_DSN", NULL, SETTING_STRING, OFF(pg_dsn), "", 0, 0, NULL,
     "libpq connection string or URI of the consumer's database (required)"},
    {"INBOX_TOPICS", NULL, SETTING_STRING, OFF(topics), "", 0, 0, NULL,
     "topics to consume: a comma-separated list, or one `^regex` (required)"},
    {"INBOX_SOURCE", NULL, SETTING_STRING, OFF(source), "kafka", 0, 0, NULL,
     "kafka: consume INBOX_TOPICS in a consumer group (INBOX_KAFKA_*); rabbitmq: consume "
     "INBOX_RABBITMQ_QUEUES, acknowledging each message after its commit"},
    {"INBOX_RABBITMQ_URL", NULL, SETTING_STRING, OFF(rabbitmq_url), "", 0, 0, NULL,
     "rabbitmq source: amqp://user:password@host:port/vhost (prefer INBOX_RABBITMQ_URL_FILE)"},
    {"INBOX_RABBITMQ_QUEUES", NULL, SETTING_STRING, OFF(rabbitmq_queues), "", 0, 0, NULL,
     "rabbitmq source: queues to consume, comma-separated (they must exist); the prefetch is twice "
     "INBOX_BATCH_SIZE; with this source INBOX_DEAD_LETTER_TOPIC names a queue (published through the "
     "default exchange, with a publisher confirm)"},
    {"INBOX_RABBITMQ_CA_FILE", NULL, SETTING_STRING, OFF(rabbitmq_ca_file), "", 0, 0, NULL,
     "rabbitmq source, amqps://: CA certificates (PEM) for the broker's certificate and host name; empty: the system's"},
    {"INBOX_RABBITMQ_CERT_FILE", NULL, SETTING_STRING, OFF(rabbitmq_cert_file), "", 0, 0, NULL,
     "rabbitmq source, amqps://: a client certificate (PEM), with INBOX_RABBITMQ_KEY_FILE"},
    {"INBOX_RABBITMQ_KEY_FILE", NULL, SETTING_STRING, OFF(rabbitmq_key_file), "", 0, 0, NULL,
     "rabbitmq source, amqps://: the client certificate's private key (PEM)"},
    {"INBOX_HANDLER", NULL, SETTING_STRING, OFF(handler), "", 0, 0, NULL,
     "SQL function `[schema.]name(event_id uuid, event_type text, key text, payload jsonb, headers jsonb)` "
     "applied to each new message (required to run; found on the role's search_path when not qualified)"},
    {"INBOX_NAME", NULL, SETTING_STRING, OFF(name), "", 0, 0, NULL,
     "the inbox rows' `handler` value (one table may serve several handlers); default: the handler's name"},
    {"INBOX_TABLE", NULL, SETTING_STRING, OFF(table), "public.inbox", 0, 0, NULL, "the inbox table, `[schema.]name`"},
    {"INBOX_EVENT_ID_HEADER", NULL, SETTING_STRING, OFF(event_id_header), "auto", 0, 0, NULL,
     "header holding the event id (the default dedupe key); `auto`: `event_id` (this relay), else `id` "
     "(Debezium's outbox event router), else the CloudEvents pair `ce_source` + `ce_id`"},
    {"INBOX_DEDUPE_KEY", NULL, SETTING_STRING, OFF(dedupe_key), "", 0, 0, NULL,
     "a business key instead of the event id: `header:NAME` and `payload:/json/pointer` parts, comma-separated"},
    {"INBOX_BATCH_SIZE", NULL, SETTING_INT, OFF(batch_size), "100", 1, INBOX_BATCH_MAX, NULL,
     "messages applied in one transaction at most (each with its own dedupe record; the batch is what the "
     "consumer has ready, so a quiet topic commits each message at once)"},
    {"INBOX_MAX_ATTEMPTS", NULL, SETTING_INT, OFF(max_attempts), "5", 1, 1000, NULL,
     "handler failures of one message before it is dead-lettered"},
    {"INBOX_RETRY_BACKOFF_MS", NULL, SETTING_INT, OFF(retry_backoff_ms), "200", 1, 600000, NULL,
     "first retry delay after a handler failure (doubles, jittered)"},
    {"INBOX_RETRY_BACKOFF_MAX_MS", NULL, SETTING_INT, OFF(retry_backoff_max_ms), "10000", 1, 3600000, NULL,
     "longest retry delay (also for PostgreSQL reconnects)"},
    {"INBOX_DEAD_LETTER_TOPIC", NULL, SETTING_STRING, OFF(dead_letter_topic), "", 0, 0, NULL,
     "topic for messages whose handler failed INBOX_MAX_ATTEMPTS times (original key, value, headers and "
     "`inbox_error`); empty: only the inbox row records the failure"},
    {"INBOX_RETENTION", NULL, SETTING_STRING, OFF(retention), "7d", 0, 0, NULL,
     "inbox rows older than this are deleted (`90s`, `15m`, `24h`, `7d`; `0` keeps them); must exceed "
     "the longest redelivery window"},
    {"INBOX_HTTP_ADDR", NULL, SETTING_STRING, OFF(http_addr), ":9466", 0, 0, NULL,
     "`host:port` of /metrics /healthz /readyz /status; empty disables"},
    {"INBOX_LOG_LEVEL", NULL, SETTING_STRING, OFF(log_level_name), "info", 0, 0, NULL, "debug, info, warn or error"},
    {"INBOX_LOG_FORMAT", NULL, SETTING_STRING, OFF(log_format_name), "text", 0, 0, NULL, "text or json (one object per line)"},
};

static const struct settings_spec spec = {
    "INBOX_", settings, ARRAY_LEN(settings), OFF(kafka), OFF(n_kafka), OFF(pg_dsn), OFF(pg_dsn_file),
};

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
    if (settings_check_table(cfg->table, why, sizeof(why)) != 0)
        return set_err(err, errlen, "INBOX_TABLE: %s", why);
    if (!cfg->pg_dsn[0] && strcmp(cfg->command, "healthcheck") != 0)
        return set_err(err, errlen, "INBOX_PG_DSN: required (the consumer's database)");
    if (strcmp(cfg->source, "kafka") != 0 && strcmp(cfg->source, "rabbitmq") != 0)
        return set_err(err, errlen, "INBOX_SOURCE: expected kafka or rabbitmq, got '%s'", cfg->source);
    cfg->rabbitmq = strcmp(cfg->source, "rabbitmq") == 0;
    if (cfg->rabbitmq && strcmp(cfg->command, "run") == 0) {
        char bad[256];
        if (!cfg->rabbitmq_url[0])
            return set_err(err, errlen, "INBOX_RABBITMQ_URL: required with INBOX_SOURCE=rabbitmq");
        if (rmq_check_url(cfg->rabbitmq_url, bad, sizeof(bad)) != 0)
            return set_err(err, errlen, "INBOX_RABBITMQ_URL: %s", bad);
        if (!cfg->rabbitmq_queues[0])
            return set_err(err, errlen, "INBOX_RABBITMQ_QUEUES: required with INBOX_SOURCE=rabbitmq (queues "
                           "to consume, comma-separated)");
    } else if (!cfg->topics[0] && strcmp(cfg->command, "run") == 0) {
        return set_err(err, errlen, "INBOX_TOPICS: required (a list of topics, or ^regex)");
    }
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
    if (settings_parse_duration(cfg->retention, &cfg->retention_seconds) != 0)
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
    return settings_check_kafka(&spec, cfg, err, errlen);
}

int inbox_config_load(struct inbox_config *cfg, char **envp, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    /* the log format first, so that warnings about the environment are already in it */
    log_format_early(envp, "INBOX_LOG_FORMAT", NULL);
    cfg->command = xstrdup("run");
    settings_defaults(&spec, cfg);
    if (settings_load_env(&spec, cfg, envp, err, errlen) != 0)
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

int inbox_config_has_kafka(const struct inbox_config *cfg, const char *name)
{
    return settings_kafka_has(cfg->kafka, cfg->n_kafka, name);
}

void inbox_config_destroy(struct inbox_config *cfg)
{
    settings_free(&spec, cfg);
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
    settings_print_help(&spec, out);
    fprintf(out, "  INBOX_KAFKA_<NAME>\n      any librdkafka property; INBOX_KAFKA_BOOTSTRAP_SERVERS -> "
                 "bootstrap.servers, INBOX_KAFKA_GROUP_ID -> group.id\n");
}

void inbox_config_print_markdown(FILE *out)
{
    settings_print_markdown(&spec, out);
}

void inbox_config_source(const struct inbox_config *cfg, struct source_config *out)
{
    *out = (struct source_config){
        .rabbitmq = cfg->rabbitmq,
        .name = cfg->name,
        .topics = cfg->topics,
        .dead_letter_topic = cfg->dead_letter_topic,
        .event_id_header = cfg->event_id_header,
        .batch_size = cfg->batch_size,
        .retry_backoff_max_ms = cfg->retry_backoff_max_ms,
        .kafka = cfg->kafka,
        .n_kafka = cfg->n_kafka,
        .rabbitmq_url = cfg->rabbitmq_url,
        .rabbitmq_queues = cfg->rabbitmq_queues,
        .rabbitmq_ca_file = cfg->rabbitmq_ca_file,
        .rabbitmq_cert_file = cfg->rabbitmq_cert_file,
        .rabbitmq_key_file = cfg->rabbitmq_key_file,
    };
}
