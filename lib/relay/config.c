/* The relay's settings table and command line: the settings through the core's loader
 * (core/settings.h: environment, NAME_FILE secrets, flags), the command and its own flags,
 * the checks across settings, --help and the Markdown reference. The values' checks are in
 * config_check.c. */
#include "relay/config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay/config_int.h"
#include "sink/sink.h"
#include "core/dsn.h"
#define OFF(field) offsetof(struct config, field)

static const struct setting settings[] = {
    {"OUTBOX_PG_DSN", "pg-dsn", SETTING_STRING, OFF(pg_dsn), "", 0, 0, config_check_dsn,
     "libpq conninfo or URI; empty uses libpq's PG* variables. Prefer OUTBOX_PG_DSN_FILE or a "
     "passfile for secrets"},
    {"OUTBOX_TABLE", "table", SETTING_STRING, OFF(table), "public.outbox", 0, 0, settings_check_table,
     "outbox table, [schema.]name (without a schema: public; the name at most 39 characters)"},
    {"OUTBOX_TOPIC_TEMPLATE", "topic-template", SETTING_STRING, OFF(topic_template),
     "outbox.event.{aggregate_type}", 0, 0, config_check_topic_template,
     "topic for rows whose topic column is NULL; placeholders {aggregate_type}, {event_type}"},
    {"OUTBOX_TOPIC_ALLOW", "topic-allow", SETTING_STRING, OFF(topic_allow), "", 0, 0,
     config_check_topic_allow,
     "topics rows may be published to: comma-separated glob patterns (e.g. orders.*,payments.*); "
     "empty allows any name not starting with '_'. A row naming another topic is parked"},
    {"OUTBOX_BATCH_SIZE", "batch-size", SETTING_INT, OFF(batch_size), "1000", 1, 100000, NULL,
     "rows per claim"},
    {"OUTBOX_POLL_INTERVAL_MS", "poll-interval-ms", SETTING_INT, OFF(poll_interval_ms), "200", 1,
     3600000, NULL, "longest sleep between claims when idle (the adaptive poll backs off to it)"},
    {"OUTBOX_NOTIFY_CHANNEL", "notify-channel", SETTING_STRING, OFF(notify_channel), "outbox", 0,
     0, config_check_channel, "LISTEN channel woken by the optional doorbell trigger; empty disables LISTEN"},
    {"OUTBOX_MAX_INFLIGHT", "max-inflight", SETTING_INT, OFF(max_inflight), "20000", 1, 1000000,
     NULL, "most rows claimed but not yet marked; bounds memory and duplicates after a crash"},
    {"OUTBOX_MAX_INFLIGHT_BYTES", "max-inflight-bytes", SETTING_INT, OFF(max_inflight_bytes),
     "33554432", 1048576, 1073741824, NULL,
     "most payload bytes claimed but not yet marked, and the producer queue's limit: the "
     "relay's memory beyond about 20 MB is at most about twice this"},
    {"OUTBOX_MARK_DELAY_MS", "mark-delay-ms", SETTING_INT, OFF(mark_delay_ms), "10", 0, 1000, NULL,
     "longest wait for more acknowledged rows before recording them as sent (mark, delete, "
     "keep's record): fewer, larger statements at low rates; 0 records each group at once. "
     "Publishing is not delayed; a crash in between publishes them again, as any "
     "acknowledged row not yet recorded"},
    {"OUTBOX_SHUTDOWN_TIMEOUT_MS", "shutdown-timeout-ms", SETTING_INT, OFF(shutdown_timeout_ms),
     "10000", 0, 3600000, NULL, "on SIGTERM, longest wait for in-flight deliveries"},
    {"OUTBOX_STATEMENT_TIMEOUT_MS", "statement-timeout-ms", SETTING_INT,
     OFF(statement_timeout_ms), "30000", 0, 3600000, NULL,
     "statement_timeout of the worker connection (0 disables)"},
    {"OUTBOX_RECONNECT_MAX_MS", "reconnect-max-ms", SETTING_INT, OFF(reconnect_max_ms), "5000",
     10, 600000, NULL, "cap of the PostgreSQL reconnect backoff"},
    {"OUTBOX_HTTP_ADDR", "http-addr", SETTING_STRING, OFF(http_addr), ":9481", 0, 0,
     config_check_http_addr, "listen address of /metrics, /healthz, /readyz, /status; empty disables"},
    {"OUTBOX_READY_STRICT", "ready-strict", SETTING_INT, OFF(ready_strict), "0", 0, 1, NULL,
     "1: /readyz fails while PostgreSQL or Kafka is unreachable (default 0: a Kafka outage "
     "shows as degraded, not unready)"},
    {"OUTBOX_MAX_ATTEMPTS", "max-attempts", SETTING_INT, OFF(max_attempts), "3", 1, 1000, NULL,
     "failures of a row published alone (errors that belong to the row) before it is parked"},
    {"OUTBOX_POISON_POLICY", "poison-policy", SETTING_STRING, OFF(poison_policy), "block", 0, 0,
     config_check_policy, "block: later rows of a parked row's key wait for requeue; skip: they flow"},
    {"OUTBOX_ON_SENT", "on-sent", SETTING_STRING, OFF(on_sent), "", 0, 0, config_check_on_sent,
     "mark: an acknowledged row becomes SENT (kept for OUTBOX_RETENTION; replay and audit use "
     "it); delete: it is deleted at once, for the least WAL and no history (replay, audit and "
     "purge refuse); keep: the row is never written again, progress is a watermark per lease "
     "partition (native layout, schema 7; retention deletes below it). Unset: delete in the "
     "debezium layout, else mark"},
    {"OUTBOX_WATERMARK_AUDIT_MS", "watermark-audit-ms", SETTING_INT, OFF(watermark_audit_ms), "60000", 100,
     86400000, NULL,
     "keep mode: once per this period each held lease partition's next 320,000 ids at or below "
     "its watermark (from where its last turn ended; more when its retained rows span so many ids "
     "that a whole pass would not end within a quarter of OUTBOX_RETENTION) are compared with what "
     "was recorded as published; a row never published (a broken writer rule, a restore) is "
     "published, counted and logged"},
    {"OUTBOX_LAYOUT", "layout", SETTING_STRING, OFF(layout), "native", 0, 0, config_check_layout,
     "native: the relay's own table; debezium: Debezium's outbox table (id uuid, aggregatetype, "
     "aggregateid, type, payload), which `migrate` extends without touching its columns, and "
     "messages as Debezium's outbox event router sends them"},
    {"OUTBOX_ADDITIONAL_PLACEMENT", "additional-placement", SETTING_STRING,
     OFF(additional_placement), "", 0, 0, config_check_placement,
     "debezium layout: more columns as Kafka headers, column:header[:name],... (the event "
     "router's table.fields.additional.placement; header is the only placement)"},
    {"OUTBOX_CLOUDEVENTS_SOURCE", "cloudevents-source", SETTING_STRING, OFF(ce_source), "", 0, 0,
     config_check_ce_source,
     "CloudEvents binary mode: every message also carries ce_specversion, ce_id (event id), "
     "ce_source (this value, a URI-reference such as /orders-service or "
     "https://example.com/orders), ce_type (event type), ce_subject (aggregate id), ce_time "
     "(created_at) and content-type; a row header named ce_* is parked. Empty: off"},
    {"OUTBOX_CLOUDEVENTS_CONTENT_TYPE", "cloudevents-content-type", SETTING_STRING,
     OFF(ce_content_type), "", 0, 0, config_check_content_type,
     "the content-type header of CloudEvents messages (a row's own content-type header wins); "
     "empty: from the payload column's type (application/json for json and jsonb, "
     "text/plain; charset=utf-8 for text, application/octet-stream for bytea)"},
    {"OUTBOX_PAYLOAD_TYPE", "payload-type", SETTING_STRING, OFF(payload_type), "", 0, 0,
     config_check_payload_type,
     "type of the payload column when `migrate` creates the table: jsonb, json, text or bytea "
     "(sent as raw bytes); empty means jsonb. The relay reads the type the table has"},
    {"OUTBOX_DEAD_LETTER_TOPIC", "dead-letter-topic", SETTING_STRING, OFF(dead_letter_topic), "",
     0, 0, config_check_optional_topic, "topic that also receives parked rows; empty disables"},
    {"OUTBOX_TOPIC_PAUSE_MS", "topic-pause-ms", SETTING_INT, OFF(topic_pause_ms), "30000", 100,
     3600000, NULL, "how long a topic with a topic-level error is paused before it is tried again"},
    {"OUTBOX_LEASE_TIMEOUT_MS", "lease-timeout-ms", SETTING_INT, OFF(lease_timeout_ms), "10000",
     3000, 600000, NULL,
     "a dead or cut-off relay's lease partitions are taken over within this time"},
    {"OUTBOX_RETENTION", "retention", SETTING_STRING, OFF(retention), "24h", 0, 0, config_check_duration,
     "SENT rows older than this are deleted in small batches; 0 keeps them"},
    {"OUTBOX_LONG_TRANSACTION_SECONDS", "long-transaction-seconds", SETTING_INT,
     OFF(long_tx_seconds), "30", 1, 86400, NULL,
     "a transaction open longer than this is reported (log line and metric), and so is a "
     "replication slot or standby that holds the xmin horizon this long"},
    {"OUTBOX_RELAY_NAME", "relay-name", SETTING_STRING, OFF(relay_name), "", 0, 0,
     config_check_relay_name, "this relay's name (at most 50 printable ASCII characters) in logs, application_name and status; "
     "empty uses the host name"},
    {"OUTBOX_SINK", "sink", SETTING_STRING, OFF(sink), "kafka", 0, 0, config_check_sink,
     "kafka: publish to Kafka (the OUTBOX_KAFKA_* settings); rabbitmq: publish to a RabbitMQ "
     "topic exchange with publisher confirms (the OUTBOX_RABBITMQ_* settings)"},
    {"OUTBOX_RABBITMQ_URL", "rabbitmq-url", SETTING_STRING, OFF(rabbitmq_url), "", 0, 0,
     config_check_rabbitmq_url,
     "rabbitmq sink: the broker, amqp://user:password@host:port/vhost (without a path: the "
     "vhost '/'; a '/' in a vhost's name written %2F); amqps:// for TLS (port 5671 by default). Prefer OUTBOX_RABBITMQ_URL_FILE for the password"},
    {"OUTBOX_RABBITMQ_EXCHANGE", "rabbitmq-exchange", SETTING_STRING, OFF(rabbitmq_exchange),
     "outbox", 0, 0, config_check_rabbitmq_exchange,
     "rabbitmq sink: the durable topic exchange messages are published to, the row's topic as "
     "routing key; declared when absent, checked passively when the user may not declare it"},
    {"OUTBOX_RABBITMQ_CA_FILE", "rabbitmq-ca-file", SETTING_STRING, OFF(rabbitmq_ca_file), "", 0, 0, NULL,
     "rabbitmq sink, amqps://: the CA certificates (PEM) the broker's certificate is verified against "
     "(its host name too, always); empty: the system's"},
    {"OUTBOX_RABBITMQ_CERT_FILE", "rabbitmq-cert-file", SETTING_STRING, OFF(rabbitmq_cert_file), "", 0, 0, NULL,
     "rabbitmq sink, amqps://: a client certificate (PEM), with OUTBOX_RABBITMQ_KEY_FILE"},
    {"OUTBOX_RABBITMQ_KEY_FILE", "rabbitmq-key-file", SETTING_STRING, OFF(rabbitmq_key_file), "", 0, 0, NULL,
     "rabbitmq sink, amqps://: the client certificate's private key (PEM)"},
    {"OUTBOX_RABBITMQ_CONFIRM_TIMEOUT_MS", "rabbitmq-confirm-timeout-ms", SETTING_INT,
     OFF(rabbitmq_confirm_timeout_ms), "30000", 100, 3600000, NULL,
     "rabbitmq sink: a publisher confirm not received within this fails the messages "
     "unconfirmed (published again; the connection is made anew)"},
    {"OUTBOX_RABBITMQ_STRICT_KEY_ORDER", "rabbitmq-strict-key-order", SETTING_INT,
     OFF(rabbitmq_strict_key_order), "0", 0, 1, NULL,
     "rabbitmq sink: 1 keeps at most one message per key unconfirmed, so that a basic.nack of a "
     "message can never let a later message of its key arrive first (docs/RABBITMQ.md measures "
     "what it costs); 0: the whole in-flight window is unconfirmed at once"},
    {"OUTBOX_RABBITMQ_MAX_MESSAGE_BYTES", "rabbitmq-max-message-bytes", SETTING_INT,
     OFF(rabbitmq_max_message_bytes), "16777216", 1024, 536870912, NULL,
     "rabbitmq sink: rows with a larger payload are parked before publishing (set it to the "
     "broker's max_message_size; a larger message would close the channel)"},
    {"OUTBOX_EXACTLY_ONCE", "exactly-once", SETTING_INT, OFF(exactly_once), "0", 0, 1, NULL,
     "1: exactly-once into Kafka: each group of messages goes in a Kafka transaction with a "
     "progress record, rows are recorded only after its commit, and a relay that takes the "
     "table over fences the older producer and records what it committed before it claims; "
     "consumers read with isolation.level=read_committed. The relays of the table share it by "
     "transaction groups (OUTBOX_TRANSACTION_GROUPS). Kafka sink only; every mode and layout "
     "(docs/EXACTLY_ONCE.md)"},
    {"OUTBOX_TRANSACTION_GROUPS", "transaction-groups", SETTING_INT, OFF(transaction_groups), "1", 1,
     64, NULL,
     "exactly-once: the table's 64 lease partitions form this many transaction groups (1, 2, 4, "
     "8, 16, 32 or 64), each with a producer, a transactional.id (.g0, .g1, ...) and a progress "
     "record of its own, held whole by one relay: up to this many relays publish the table at "
     "once. The same on every relay of the table; change it with every relay stopped "
     "(docs/EXACTLY_ONCE.md)"},
    {"OUTBOX_TRANSACTIONAL_ID_PREFIX", "transactional-id-prefix", SETTING_STRING,
     OFF(transactional_id_prefix), "", 0, 0, config_check_relay_name,
     "exactly-once (required there): a name for this database, unique among everything that "
     "uses transactions on the Kafka cluster and the same on every relay of the table (the "
     "service's name, say): the producer's transactional.id is it, the table and the group "
     "(orders.public.outbox.g0), so that Kafka fences an older relay of the table and no one else, "
     "and the table's key in the progress topic"},
    {"OUTBOX_PROGRESS_TOPIC", "progress-topic", SETTING_STRING, OFF(progress_topic),
     "outbox-relay.progress", 0, 0, config_check_optional_topic,
     "exactly-once: the compacted topic of progress records (created with cleanup.policy=compact "
     "when missing), keyed by table"},
    {"OUTBOX_TRANSACTION_GAP_MS", "transaction-gap-ms", SETTING_INT, OFF(transaction_gap_ms), "5", 0,
     100, NULL,
     "exactly-once: the pause after each commit (or abort) before the next transaction takes "
     "messages, so that Kafka's coordinator has finished it (written its markers): a "
     "transaction begun earlier is answered CONCURRENT_TRANSACTIONS, which librdkafka tries "
     "again only after 20 ms; more for a cluster whose markers take longer; 0: no pause "
     "(docs/EXACTLY_ONCE.md)"},
    {"OUTBOX_LOG_LEVEL", "log-level", SETTING_STRING, OFF(log_level_name), "info", 0, 0,
     config_check_log_level, "debug, info, warn or error"},
    {"OUTBOX_LOG_FORMAT", "log-format", SETTING_STRING, OFF(log_format_name), "text", 0, 0,
     config_check_log_format, "text or json (one JSON object per line)"},
};

static const struct settings_spec spec = {
    "OUTBOX_", settings, ARRAY_LEN(settings), OFF(kafka), OFF(n_kafka), OFF(pg_dsn), OFF(pg_dsn_file),
};

/* The log format asked for, applied before the settings are read, so that the warnings
 * given while reading them (an unknown variable, a service link) are already in it. */
static void early_log_format(char **envp, int argc, char **argv)
{
    const char *flag = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--log-format") == 0 && i + 1 < argc)
            flag = argv[i + 1];
        else if (strncmp(argv[i], "--log-format=", 13) == 0)
            flag = argv[i] + 13;
    }
    log_format_early(envp, "OUTBOX_LOG_FORMAT", flag);
}

/* A word on the command line: the command's name, once. */
static int command_word(struct command *cmd, const char *arg, int *have, char *err, size_t errlen)
{
    static const char *const commands[] = {"run", "migrate", "status", "requeue", "purge",
                                           "replay", "audit", "healthcheck"};
    if (*have)
        return set_err(err, errlen, "unexpected argument '%s' (see --help)", arg);
    int known = 0;
    for (size_t c = 0; c < ARRAY_LEN(commands); c++)
        known |= strcmp(arg, commands[c]) == 0;
    if (!known)
        return set_err(err, errlen, "unknown command '%s' (commands: run, migrate, "
                       "status, requeue, purge, replay, audit, healthcheck)", arg);
    free(cmd->name);
    cmd->name = xstrdup(arg);
    *have = 1;
    return 0;
}

/* argv[*i], one of the commands' own flags: 1 taken (*i past its value), 0 not one of them,
 * -1 with err. */
static int command_flag(struct command *cmd, int argc, char **argv, int *i, char *err, size_t errlen)
{
    const char *arg = argv[*i];
    int *flag = strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0 ? &cmd->show_help
              : strcmp(arg, "--version") == 0                        ? &cmd->show_version
              : strcmp(arg, "--check-config") == 0                   ? &cmd->check_config
              : strcmp(arg, "--json") == 0                           ? &cmd->json
              : strcmp(arg, "--all") == 0                            ? &cmd->all
              : strcmp(arg, "--dry-run") == 0                        ? &cmd->dry_run
              : strcmp(arg, "--leave-keep") == 0                     ? &cmd->leave_keep
                                                                     : NULL;
    if (strcmp(arg, "--help-markdown") == 0) {
        cmd->show_help = 2;
        return 1;
    }
    if (flag) {
        *flag = 1;
        return 1;
    }
    char **dst = strcmp(arg, "--since") == 0 ? &cmd->since
               : strcmp(arg, "--until") == 0 ? &cmd->until
               : strcmp(arg, "--id") == 0    ? &cmd->id
               : strcmp(arg, "--key") == 0   ? &cmd->key
                                             : NULL;
    int partition = strcmp(arg, "--partition") == 0;
    if (!dst && strcmp(arg, "--limit") != 0 && !partition)
        return 0;
    int stamp = dst == &cmd->since || dst == &cmd->until;
    if (*i + 1 >= argc || (stamp && !argv[*i + 1][0]))
        return set_err(err, errlen, "%s: missing value%s", arg,
                       stamp ? " (a timestamp, e.g. 2026-11-30T10:00:00Z)" : "");
    const char *v = argv[++*i];
    char *end;
    if (partition) {
        cmd->partition_ids = strtoll(v, &end, 10);
        if (*end || cmd->partition_ids < 1000 || cmd->partition_ids > 1000000000000LL)
            return set_err(err, errlen, "--partition: expected the ids per partition, from 1000 to "
                           "1000000000000, got '%s'", v);
        return 1;
    }
    if (!dst) {
        cmd->limit = strtoll(v, &end, 10);
        if (*end || cmd->limit <= 0)
            return set_err(err, errlen, "--limit: expected a positive number of rows, got '%s'", v);
        return 1;
    }
    if (dst == &cmd->id) {
        long long id = strtoll(v, &end, 10);
        if (*end || id <= 0)
            return set_err(err, errlen, "--id: expected a positive row id, got '%s'", v);
    }
    free(*dst);
    *dst = xstrdup(v);
    return 1;
}

/* The command's arguments against each other and against the settings. */
static int check_command(const struct config *cfg, const struct command *cmd, char *err, size_t errlen)
{
    const char *c = cmd->name;
    if (cmd->leave_keep && strcmp(c, "migrate") != 0)
        return set_err(err, errlen, "--leave-keep belongs to migrate (outbox-relay migrate --leave-keep)");
    if (cmd->partition_ids && strcmp(c, "migrate") != 0)
        return set_err(err, errlen, "--partition belongs to migrate (outbox-relay migrate --partition IDS)");
    if (cmd->partition_ids && (!cfg->keep || cfg->debezium))
        return set_err(err, errlen, "migrate --partition: id-range partitions are keep mode's; run it with "
                       "OUTBOX_ON_SENT=keep on a native-layout table");
    if (cmd->partition_ids && cmd->leave_keep)
        return set_err(err, errlen, "migrate: --partition and --leave-keep go in opposite directions; give one");
    if (cmd->leave_keep && cfg->keep)
        return set_err(err, errlen, "migrate --leave-keep: OUTBOX_ON_SENT is keep; run the step with the "
                       "mode the table goes to (mark or delete)");
    if (strcmp(c, "requeue") == 0 && !!cmd->id + !!cmd->key + cmd->all != 1)
        return set_err(err, errlen, "requeue: give exactly one of --id N, --key K, --all");
    if (strcmp(c, "replay") == 0 && !!cmd->id + !!cmd->key + !!cmd->since != 1)
        return set_err(err, errlen, "replay: give exactly one of --id N, --key K, --since T");
    if (cmd->until && !cmd->since && strcmp(c, "audit") != 0)
        return set_err(err, errlen, "--until needs --since");
    if (strcmp(c, "audit") == 0 && (cmd->id || cmd->key || cmd->limit || cmd->dry_run))
        return set_err(err, errlen, "audit: only --since T, --until T and --json apply");
    if (strcmp(c, "audit") == 0 && strcmp(cfg->sink, "rabbitmq") == 0)
        return set_err(err, errlen, "audit: it compares the table with Kafka's topics; with "
                       "OUTBOX_SINK=rabbitmq there is no log to read back (a queue is consumed once), "
                       "so it does not run");
    if (strcmp(cfg->on_sent, "delete") == 0 &&
        (strcmp(c, "replay") == 0 || strcmp(c, "audit") == 0 || strcmp(c, "purge") == 0))
        return set_err(err, errlen, "%s: OUTBOX_ON_SENT=delete keeps no SENT rows (each row is "
                       "deleted once Kafka acknowledged it), so there is nothing to %s",
                       c, strcmp(c, "replay") == 0 ? "publish again"
                       : strcmp(c, "audit") == 0 ? "compare with Kafka" : "purge");
    return 0;
}

/* Settings against each other. */
static int check_settings(const struct config *cfg, char *err, size_t errlen)
{
    if (cfg->ce_content_type[0] && !cfg->ce_source[0])
        return set_err(err, errlen, "OUTBOX_CLOUDEVENTS_CONTENT_TYPE: applies only with "
                       "OUTBOX_CLOUDEVENTS_SOURCE set (CloudEvents on)");
    if (cfg->ce_source[0]) { /* a placement named ce_* would park every row */
        const char *cursor = cfg->additional_placement;
        char column[CONFIG_IDENT_MAX], header[CONFIG_IDENT_MAX];
        while (config_placement_next(&cursor, column, header, err, errlen) == 1)
            if (strncmp(header, "ce_", 3) == 0)
                return set_err(err, errlen, "OUTBOX_ADDITIONAL_PLACEMENT: header name '%s' is "
                               "reserved for the CloudEvents attributes while "
                               "OUTBOX_CLOUDEVENTS_SOURCE is set", header);
    }
    if (cfg->additional_placement[0] && !cfg->debezium)
        return set_err(err, errlen, "OUTBOX_ADDITIONAL_PLACEMENT: applies to OUTBOX_LAYOUT=debezium "
                       "only (in the native layout a row's headers column holds its headers)");
    if (cfg->keep && cfg->debezium)
        return set_err(err, errlen, "OUTBOX_ON_SENT=keep: the native layout's only (Debezium's outbox "
                       "table has no lease partitions by id to keep a watermark on); use mark or delete");
    if (strcmp(cfg->sink, "rabbitmq") == 0 && !cfg->rabbitmq_url[0])
        return set_err(err, errlen, "OUTBOX_RABBITMQ_URL: required with OUTBOX_SINK=rabbitmq "
                       "(amqp://user:password@host:port/vhost)");
    if (!cfg->rabbitmq_cert_file[0] != !cfg->rabbitmq_key_file[0])
        return set_err(err, errlen, "OUTBOX_RABBITMQ_CERT_FILE and OUTBOX_RABBITMQ_KEY_FILE: give both or neither");
    if (strcmp(cfg->sink, "rabbitmq") != 0 && cfg->rabbitmq_url[0])
        return set_err(err, errlen, "OUTBOX_RABBITMQ_URL: applies only with OUTBOX_SINK=rabbitmq");
    if (cfg->exactly_once && cfg->rabbitmq)
        return set_err(err, errlen, "OUTBOX_EXACTLY_ONCE: Kafka's only: RabbitMQ has no transactions "
                       "across publishes; its consumers remove duplicates with outbox-inbox "
                       "(docs/EXACTLY_ONCE.md)");
    if (cfg->exactly_once && !cfg->transactional_id_prefix[0])
        return set_err(err, errlen, "OUTBOX_TRANSACTIONAL_ID_PREFIX: required with OUTBOX_EXACTLY_ONCE=1: a "
                       "name for this database, unique among the Kafka cluster's transactional "
                       "producers and the same on every relay of the table (two tables named %s "
                       "in two databases would fence each other with one id)", cfg->table);
    if (cfg->exactly_once && !cfg->progress_topic[0])
        return set_err(err, errlen, "OUTBOX_PROGRESS_TOPIC: required with OUTBOX_EXACTLY_ONCE=1");
    if (cfg->transaction_groups & (cfg->transaction_groups - 1)) /* (groups of equal size) */
        return set_err(err, errlen, "OUTBOX_TRANSACTION_GROUPS: expected 1, 2, 4, 8, 16, 32 or 64 (a "
                       "divisor of the 64 lease partitions), got %d", cfg->transaction_groups);
    if (!cfg->exactly_once && cfg->transaction_groups != 1)
        return set_err(err, errlen, "OUTBOX_TRANSACTION_GROUPS: applies only with OUTBOX_EXACTLY_ONCE=1");
    if (cfg->batch_size > cfg->max_inflight)
        return set_err(err, errlen,
                       "OUTBOX_BATCH_SIZE: %d is larger than OUTBOX_MAX_INFLIGHT (%d); a claim "
                       "could never fit in the in-flight window", cfg->batch_size, cfg->max_inflight);
    return settings_check_kafka(&spec, cfg, err, errlen);
}

/* What the settings imply: the mode by the layout, the parsed forms, the relay's name. */
static void derive(struct config *cfg)
{
    cfg->debezium = strcmp(cfg->layout, "debezium") == 0;
    if (!cfg->on_sent[0]) {
        free(cfg->on_sent);
        cfg->on_sent = xstrdup(cfg->debezium ? "delete" : "mark");
    }
    cfg->keep = strcmp(cfg->on_sent, "keep") == 0;
    cfg->rabbitmq = strcmp(cfg->sink, "rabbitmq") == 0;
    settings_parse_duration(cfg->retention, &cfg->retention_seconds);
    if (cfg->relay_name[0] == '\0') {
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        free(cfg->relay_name);
        host[50] = '\0'; /* the name's limit; host names are printable ASCII */
        cfg->relay_name = xstrdup(host[0] ? host : "outbox-relay");
    }
    if (!strchr(cfg->table, '.')) { /* "outbox" and "public.outbox" are one table */
        char *full = xmalloc(strlen(cfg->table) + 8);
        sprintf(full, "public.%s", cfg->table);
        free(cfg->table);
        cfg->table = full;
    }
    /* exactly-once: transaction group 0's id (the others': .g<n>, sink/kafka_lanes.c); the id
     * moves between relays with the group's lease partitions */
    cfg->transactional_id = xasprintf("%s.%s.g0", cfg->transactional_id_prefix, cfg->table);
    cfg->progress_key = xstrdup(cfg->transactional_id);
    log_level_parse(cfg->log_level_name, &cfg->log_level);
    log_format_parse(cfg->log_format_name, &cfg->log_format);
}

int config_load(struct config *cfg, struct command *cmd, char **envp, int argc, char **argv,
                char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    memset(cmd, 0, sizeof(*cmd));
    settings_defaults(&spec, cfg);
    cmd->name = xstrdup("run");
    early_log_format(envp, argc, argv);
    if (settings_load_env(&spec, cfg, envp, err, errlen) != 0)
        return -1;
    int have_command = 0;
    for (int i = 1; i < argc; i++) {
        int rc = command_flag(cmd, argc, argv, &i, err, errlen);
        if (rc == 0 && strncmp(argv[i], "--", 2) != 0)
            rc = command_word(cmd, argv[i], &have_command, err, errlen) == 0 ? 1 : -1;
        if (rc == 0)
            rc = settings_flag(&spec, cfg, argc, argv, &i, err, errlen);
        if (rc == 0)
            return set_err(err, errlen, "unknown flag '%.*s' (see --help)",
                           (int)strcspn(argv[i], "="), argv[i]);
        if (rc < 0)
            return -1;
    }
    derive(cfg);
    if (check_command(cfg, cmd, err, errlen) != 0 || check_settings(cfg, err, errlen) != 0)
        return -1;
    return 0;
}

void config_destroy(struct config *cfg)
{
    free(cfg->progress_key);
    free(cfg->transactional_id);
    settings_free(&spec, cfg);
}

void command_destroy(struct command *cmd)
{
    free(cmd->name);
    free(cmd->id);
    free(cmd->key);
    free(cmd->since);
    free(cmd->until);
    memset(cmd, 0, sizeof(*cmd));
}

void config_print_help(FILE *out)
{
    fprintf(out,
            "usage: outbox-relay [COMMAND] [--check-config] [--SETTING VALUE]... "
            "[--kafka NAME=VALUE]...\n\n"
            "  run            relay PENDING outbox rows to Kafka (default)\n"
            "  migrate [--leave-keep]  apply the schema to the outbox table and exit; --leave-keep:\n"
            "                 the table leaves keep mode (published rows SENT, parked FAILED;\n"
            "                 no relay may run on it)\n"
            "  migrate --partition IDS  (keep mode) make the outbox a partitioned table, IDS ids\n"
            "                 per partition; retention then drops whole partitions\n"
            "  status [--json]                 backlog, oldest age, parked rows, topics, relays\n"
            "  requeue --id N | --key K | --all  parked (FAILED) rows back to PENDING\n"
            "  purge [--json]                  delete SENT rows older than OUTBOX_RETENTION now\n"
            "  replay (--id N | --key K | --since T [--until T]) [--limit N] [--dry-run] [--json]\n"
            "                 publish SENT rows again, as first published (a duplicate drill)\n"
            "  audit [--since T] [--until T] [--json]\n"
            "                 compare the table with Kafka: lost, duplicates, order, completion\n"
            "                 (exit 0 all there, 1 rows lost or out of order, 2 no audit)\n"
            "  healthcheck    ask this relay's /healthz (OUTBOX_HTTP_ADDR): exit 0 healthy, 1 not\n"
            "                 (the images' health check: no curl needed)\n"
            "  --check-config validate settings and reach PostgreSQL and Kafka, then exit\n"
            "                 (0 ok, 1 unreachable, 2 invalid setting)\n\n"
            "settings (flag, environment variable, default):\n");
    settings_print_help(&spec, out);
    fprintf(out, "  --kafka NAME=VALUE       OUTBOX_KAFKA_<NAME>\n"
                 "      any librdkafka property; OUTBOX_KAFKA_BOOTSTRAP_SERVERS -> "
                 "bootstrap.servers\n\n"
                 "Any variable NAME_FILE reads NAME's value from a file.\n");
}

void config_print_markdown(FILE *out)
{
    settings_print_markdown(&spec, out);
}

void config_sink(const struct config *cfg, struct sink_config *out)
{
    *out = (struct sink_config){
        .rabbitmq = cfg->rabbitmq,
        .relay_name = cfg->relay_name,
        .max_inflight = cfg->max_inflight,
        .max_inflight_bytes = cfg->max_inflight_bytes,
        .reconnect_max_ms = cfg->reconnect_max_ms,
        .kafka = cfg->kafka,
        .n_kafka = cfg->n_kafka,
        .rabbitmq_url = cfg->rabbitmq_url,
        .rabbitmq_exchange = cfg->rabbitmq_exchange,
        .rabbitmq_ca_file = cfg->rabbitmq_ca_file,
        .rabbitmq_cert_file = cfg->rabbitmq_cert_file,
        .rabbitmq_key_file = cfg->rabbitmq_key_file,
        .rabbitmq_confirm_timeout_ms = cfg->rabbitmq_confirm_timeout_ms,
        .rabbitmq_max_message_bytes = cfg->rabbitmq_max_message_bytes,
        .rabbitmq_strict_key_order = cfg->rabbitmq_strict_key_order,
        .transactional_id = cfg->exactly_once ? cfg->transactional_id : NULL,
        .progress_topic = cfg->progress_topic,
        .progress_key = cfg->progress_key,
        .transaction_timeout_ms = cfg->lease_timeout_ms,
        .transaction_gap_ms = cfg->transaction_gap_ms,
        .transaction_groups = cfg->exactly_once ? cfg->transaction_groups : 1,
    };
}
