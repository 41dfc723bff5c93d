/* Unit tests: settings from defaults, environment, flags, _FILE, and invalid input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "relay/config.h"
#include "tap.h"

/* The command line's part of the last load (each load replaces it). */
static struct command cmd;

static int load(struct config *cfg, char **env, char **argv, char *err, size_t errlen)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    command_destroy(&cmd);
    return config_load(cfg, &cmd, env, argc, argv, err, errlen);
}

static void test_defaults(void)
{
    struct config cfg;
    char err[512] = "";
    char *env[] = {NULL};
    char *argv[] = {"outbox-relay", NULL};
    is_int(load(&cfg, env, argv, err, sizeof(err)), 0, "defaults load");
    is_str(cfg.table, "public.outbox", "default table");
    is_str(cfg.topic_template, "outbox.event.{aggregate_type}", "default topic template");
    is_int(cfg.batch_size, 1000, "default batch size");
    is_str(cfg.notify_channel, "outbox", "default channel");
    is_str(cmd.name, "run", "default command is run");
    config_destroy(&cfg);
}

static void test_env_and_flags(void)
{
    struct config cfg;
    char err[512] = "";
    char *env[] = {"OUTBOX_BATCH_SIZE=50", "OUTBOX_TABLE=app.events",
                   "OUTBOX_KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:1", "OUTBOX_KAFKA_LINGER_MS=7",
                   "PATH=/bin", NULL};
    char *argv[] = {"outbox-relay", "migrate", "--batch-size", "70", "--kafka", "linger.ms=9",
                    "--poll-interval-ms=33", NULL};
    is_int(load(&cfg, env, argv, err, sizeof(err)), 0, "env + flags load: %s", err);
    is_int(cfg.batch_size, 70, "flag overrides env");
    is_int(cfg.poll_interval_ms, 33, "--name=value form");
    is_str(cfg.table, "app.events", "env sets table");
    is_str(cmd.name, "migrate", "command parsed");
    int found_bootstrap = 0, linger_ok = 0;
    for (size_t i = 0; i < cfg.n_kafka; i++) {
        if (strcmp(cfg.kafka[i].name, "bootstrap.servers") == 0 &&
            strcmp(cfg.kafka[i].value, "127.0.0.1:1") == 0)
            found_bootstrap = 1;
        if (strcmp(cfg.kafka[i].name, "linger.ms") == 0 && strcmp(cfg.kafka[i].value, "9") == 0)
            linger_ok = 1;
    }
    ok(found_bootstrap, "OUTBOX_KAFKA_BOOTSTRAP_SERVERS maps to bootstrap.servers");
    ok(linger_ok, "--kafka overrides OUTBOX_KAFKA_LINGER_MS");
    config_destroy(&cfg);
}

static void test_file_secret(void)
{
    char path[] = "/tmp/outbox-test-dsn-XXXXXX";
    int fd = mkstemp(path);
    const char *dsn = "host=127.0.0.1 password=s3cret\n";
    ok(write(fd, dsn, strlen(dsn)) == (ssize_t)strlen(dsn), "secret file written");
    close(fd);
    char var[128];
    snprintf(var, sizeof(var), "OUTBOX_PG_DSN_FILE=%s", path);
    char *env[] = {var, NULL};
    char *argv[] = {"outbox-relay", NULL};
    struct config cfg;
    char err[512] = "";
    is_int(load(&cfg, env, argv, err, sizeof(err)), 0, "_FILE loads: %s", err);
    is_str(cfg.pg_dsn, "host=127.0.0.1 password=s3cret", "DSN read from file, newline trimmed");
    const char *want_file = path;
    is_str(cfg.pg_dsn_file, want_file, "the file is remembered: read again at each reconnect");
    char *now = settings_current_secret(cfg.pg_dsn, cfg.pg_dsn_file, "OUTBOX_PG_DSN_FILE");
    is_str(now, "host=127.0.0.1 password=s3cret", "unchanged file: the same DSN");
    free(now);
    FILE *f = fopen(path, "w");
    fputs("host=127.0.0.1 password=n3w\n", f);
    fclose(f);
    now = settings_current_secret(cfg.pg_dsn, cfg.pg_dsn_file, "OUTBOX_PG_DSN_FILE");
    is_str(now, "host=127.0.0.1 password=n3w", "a rotated file: the new DSN");
    free(now);
    unlink(path);
    now = settings_current_secret(cfg.pg_dsn, cfg.pg_dsn_file, "OUTBOX_PG_DSN_FILE");
    is_str(now, "host=127.0.0.1 password=s3cret", "an unreadable file: the DSN read before");
    free(now);
    config_destroy(&cfg);

    /* a Kafka property from a file: read again whenever a client is made */
    char kpath[] = "/tmp/outbox-test-kpw-XXXXXX";
    fd = mkstemp(kpath);
    ok(write(fd, "old\n", 4) == 4, "password file written");
    close(fd);
    char kvar[128];
    snprintf(kvar, sizeof(kvar), "OUTBOX_KAFKA_SASL_PASSWORD_FILE=%s", kpath);
    char *kenv[] = {kvar, "OUTBOX_PG_DSN=host=x", NULL};
    is_int(load(&cfg, kenv, argv, err, sizeof(err)), 0, "Kafka _FILE loads: %s", err);
    ok(cfg.pg_dsn_file == NULL, "a DSN given directly has no file");
    char *before = settings_kafka_file_snapshot(cfg.kafka, cfg.n_kafka);
    ok(before != NULL, "a property read from a file is in the snapshot");
    f = fopen(kpath, "w");
    fputs("new\n", f);
    fclose(f);
    char *after = settings_kafka_file_snapshot(cfg.kafka, cfg.n_kafka);
    ok(after && strcmp(before, after) != 0, "the snapshot changes with the file");
    ok(settings_kafka_files_changed(cfg.kafka, cfg.n_kafka, before), "changed since the first snapshot");
    ok(!settings_kafka_files_changed(cfg.kafka, cfg.n_kafka, after), "not since the second");
    ok(!settings_kafka_files_changed(cfg.kafka, cfg.n_kafka, NULL), "no snapshot: never changed");
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    is_int(settings_kafka_apply(conf, cfg.kafka, cfg.n_kafka, err, sizeof(err)), 0, "applied: %s", err);
    rd_kafka_conf_destroy(conf);
    free(before);
    free(after);
    config_destroy(&cfg);
    char *plain[] = {"OUTBOX_KAFKA_SASL_PASSWORD=x", NULL};
    is_int(load(&cfg, plain, argv, err, sizeof(err)), 0, "plain Kafka property loads");
    ok(settings_kafka_file_snapshot(cfg.kafka, cfg.n_kafka) == NULL, "no file, no snapshot");
    config_destroy(&cfg);
    f = fopen(path, "w"); /* OUTBOX_PG_DSN_FILE again, and --pg-dsn, which wins */
    fputs("host=from-file\n", f);
    fclose(f);
    char *flag_argv[] = {"outbox-relay", "--pg-dsn", "host=y", NULL};
    is_int(load(&cfg, env, flag_argv, err, sizeof(err)), 0, "file and flag load: %s", err);
    is_str(cfg.pg_dsn, "host=y", "the flag wins");
    ok(cfg.pg_dsn_file == NULL, "and the file is not read again");
    config_destroy(&cfg);
    unlink(path);
    unlink(kpath);
}

static void test_service_links_ignored(void)
{
    char *env[] = {"OUTBOX_KAFKA_PORT=tcp://10.0.0.1:9092", "OUTBOX_KAFKA_SERVICE_HOST=10.0.0.1",
                   "OUTBOX_SOMETHING=1", NULL};
    char *argv[] = {"outbox-relay", NULL};
    struct config cfg;
    char err[512] = "";
    is_int(load(&cfg, env, argv, err, sizeof(err)), 0, "service-link variables do not stop start-up");
    is_int(cfg.n_kafka, 0, "and do not become librdkafka properties");
    config_destroy(&cfg);
}

struct bad_case {
    const char *env;
    const char *flag1, *flag2;
    const char *must_contain;
};

static void test_invalid(void)
{
    static const struct bad_case cases[] = {
        {"OUTBOX_BATCH_SIZE=abc", NULL, NULL, "OUTBOX_BATCH_SIZE"},
        {"OUTBOX_BATCH_SIZE=0", NULL, NULL, "OUTBOX_BATCH_SIZE"},
        {"OUTBOX_BATCH_SIZE=100001", NULL, NULL, "OUTBOX_BATCH_SIZE"},
        {"OUTBOX_POLL_INTERVAL_MS=-5", NULL, NULL, "OUTBOX_POLL_INTERVAL_MS"},
        {"OUTBOX_MAX_INFLIGHT=1x", NULL, NULL, "OUTBOX_MAX_INFLIGHT"},
        {NULL, "--batch-size", "9999999999", "--batch-size"},
        {NULL, "--no-such-flag", "1", "--no-such-flag"},
        {NULL, "--kafka", "no.such.property=1", "no.such.property"},
        {"OUTBOX_KAFKA_NO_SUCH_PROPERTY=1", NULL, NULL, "OUTBOX_KAFKA_NO_SUCH_PROPERTY"},
        {NULL, "--kafka", "acks", "--kafka"},
        {NULL, "--kafka", "acks=maybe", "acks"},
        {"OUTBOX_PG_DSN=host=x port", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=postgresql://h/db?nosuchoption=1", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_TOPIC_TEMPLATE=events.{nope}", NULL, NULL, "OUTBOX_TOPIC_TEMPLATE"},
        {"OUTBOX_TOPIC_TEMPLATE=events/{aggregate_type}", NULL, NULL, "OUTBOX_TOPIC_TEMPLATE"},
        {"OUTBOX_TOPIC_TEMPLATE=", NULL, NULL, "OUTBOX_TOPIC_TEMPLATE"},
        {"OUTBOX_TOPIC_TEMPLATE=x.{aggregate_type", NULL, NULL, "OUTBOX_TOPIC_TEMPLATE"},
        {"OUTBOX_TABLE=public.out box", NULL, NULL, "OUTBOX_TABLE"},
        {"OUTBOX_TABLE=a.b.c", NULL, NULL, "OUTBOX_TABLE"},
        {"OUTBOX_TABLE=public.a_table_name_of_more_than_thirty_nine_characters", NULL, NULL, "longer than 39"},
        {"OUTBOX_TABLE=x\"; drop table y", NULL, NULL, "OUTBOX_TABLE"},
        {"OUTBOX_NOTIFY_CHANNEL=bad-channel", NULL, NULL, "OUTBOX_NOTIFY_CHANNEL"},
        {"OUTBOX_LOG_LEVEL=loud", NULL, NULL, "OUTBOX_LOG_LEVEL"},
        {"OUTBOX_LOG_FORMAT=xml", NULL, NULL, "OUTBOX_LOG_FORMAT"},
        {"OUTBOX_PG_DSN_FILE=/nonexistent/secret", NULL, NULL, "OUTBOX_PG_DSN_FILE"},
        {NULL, "--batch-size", NULL, "--batch-size"},
        {NULL, "frobnicate", NULL, "frobnicate"},
        {"OUTBOX_BATCH_SIZE=5000", "--max-inflight", "100", "OUTBOX_MAX_INFLIGHT"},
        /* malformed DSNs that carry a password: the error names the setting, never the secret */
        {"OUTBOX_PG_DSN=postgresql+psycopg://app:s3cret@db/app", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=postgresql://app:hun%zzs3cret@db/app", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_LAYOUT=eventuate", NULL, NULL, "OUTBOX_LAYOUT"},
        {"OUTBOX_ADDITIONAL_PLACEMENT=tenant:header", NULL, NULL, "OUTBOX_LAYOUT=debezium only"},
        {"OUTBOX_PG_DSN=postgresql://app:s3cret@[::1/app", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=postgresql://app:s3cret@db/app?nosuchoption=1", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=postgresql://app@db/app?password=s3cret%zz", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=host=db password=s3cret port", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=host=db password='s3cret", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=host=db password = s3cret nosuch=1", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=host=db sslpassword=s3cret port", NULL, NULL, "OUTBOX_PG_DSN"},
        {"OUTBOX_PG_DSN=postgres://:s3cret@db/app?port=x&y", NULL, NULL, "OUTBOX_PG_DSN"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct bad_case *c = &cases[i];
        char *env[] = {(char *)c->env, NULL};
        char *argv[4] = {"outbox-relay", (char *)c->flag1, (char *)c->flag2, NULL};
        struct config cfg;
        char err[512] = "";
        int rc = load(&cfg, env, argv, err, sizeof(err));
        ok(rc == -1 && strstr(err, c->must_contain) != NULL, "invalid %s %s %s -> error naming %s (%s)",
           c->env ? c->env : "", c->flag1 ? c->flag1 : "", c->flag2 ? c->flag2 : "",
           c->must_contain, err);
        ok(strstr(err, "s3cret") == NULL, "error text has no secret");
        config_destroy(&cfg);
    }
}

static void test_topic_allow(void)
{
    ok(config_topic_allowed("", "orders"), "default: a plain name is allowed");
    ok(!config_topic_allowed("", "__consumer_offsets"), "default: internal topics are not");
    ok(!config_topic_allowed("", "_schemas"), "default: no name starting with '_'");
    ok(config_topic_allowed("orders.*,payments", "orders.created"), "glob matches");
    ok(config_topic_allowed("orders.*,payments", "payments"), "second pattern matches");
    ok(!config_topic_allowed("orders.*,payments", "payments.x"), "no pattern matches");
    ok(!config_topic_allowed("orders.*", "_orders.x"), "patterns are anchored");
}

/* The commands' own arguments: what each command accepts and refuses. */
static void test_command_args(void)
{
    struct config cfg;
    char err[512] = "";
    char *env[] = {NULL};
    char *audit_until[] = {"outbox-relay", "audit", "--until", "2026-11-30", "--json", NULL};
    is_int(load(&cfg, env, audit_until, err, sizeof(err)), 0, "audit --until alone loads: %s", err);
    is_str(cmd.name, "audit", "audit parsed");
    is_str(cmd.until, "2026-11-30", "audit --until kept");
    ok(cmd.since == NULL && cmd.json, "audit: no --since, --json");
    config_destroy(&cfg);
    char *audit_limit[] = {"outbox-relay", "audit", "--limit", "5", NULL};
    is_int(load(&cfg, env, audit_limit, err, sizeof(err)), -1, "audit --limit refused");
    ok(strstr(err, "audit: only --since T, --until T and --json apply") != NULL, "audit says what applies: %s", err);
    config_destroy(&cfg);
    char *replay_until[] = {"outbox-relay", "replay", "--key", "k", "--until", "2026-11-30", NULL};
    is_int(load(&cfg, env, replay_until, err, sizeof(err)), -1, "replay --until without --since refused");
    ok(strstr(err, "--until needs --since") != NULL, "replay says --until needs --since: %s", err);
    config_destroy(&cfg);
    /* delete mode keeps no SENT rows: the commands that need them refuse, naming the setting */
    char *del_env[] = {"OUTBOX_ON_SENT=delete", NULL};
    char *replay_key[] = {"outbox-relay", "replay", "--key", "k", NULL};
    char *audit_all[] = {"outbox-relay", "audit", NULL};
    char *purge[] = {"outbox-relay", "purge", NULL};
    char *run[] = {"outbox-relay", NULL};
    is_int(load(&cfg, del_env, replay_key, err, sizeof(err)), -1, "replay refused in delete mode");
    ok(strstr(err, "OUTBOX_ON_SENT=delete keeps no SENT rows") != NULL, "replay names the setting: %s", err);
    config_destroy(&cfg);
    is_int(load(&cfg, del_env, audit_all, err, sizeof(err)), -1, "audit refused in delete mode");
    config_destroy(&cfg);
    is_int(load(&cfg, del_env, purge, err, sizeof(err)), -1, "purge refused in delete mode");
    config_destroy(&cfg);
    is_int(load(&cfg, del_env, run, err, sizeof(err)), 0, "the relay runs in delete mode: %s", err);
    is_str(cfg.on_sent, "delete", "on_sent parsed");
    config_destroy(&cfg);
    char *bad_env[] = {"OUTBOX_ON_SENT=drop", NULL};
    is_int(load(&cfg, bad_env, run, err, sizeof(err)), -1, "OUTBOX_ON_SENT=drop refused");
    ok(strstr(err, "OUTBOX_ON_SENT") != NULL && strstr(err, "expected mark, delete or keep") != NULL,
       "names the setting and its values: %s", err);
    config_destroy(&cfg);
    char *keep_env[] = {"OUTBOX_ON_SENT=keep", NULL};
    is_int(load(&cfg, keep_env, run, err, sizeof(err)), 0, "keep mode loads: %s", err);
    ok(cfg.keep, "keep mode parsed");
    config_destroy(&cfg);
    char *keep_dbz[] = {"OUTBOX_ON_SENT=keep", "OUTBOX_LAYOUT=debezium", NULL};
    is_int(load(&cfg, keep_dbz, run, err, sizeof(err)), -1, "keep mode refused in the Debezium layout");
    ok(strstr(err, "OUTBOX_ON_SENT=keep") != NULL && strstr(err, "native layout") != NULL, "says why: %s", err);
    config_destroy(&cfg);
}

/* OUTBOX_LAYOUT=debezium: delete-on-send unless set; OUTBOX_ADDITIONAL_PLACEMENT's shape. */
static void test_debezium_layout(void)
{
    struct config cfg;
    char err[512] = "";
    char *run[] = {"outbox-relay", NULL};
    char *dbz[] = {"OUTBOX_LAYOUT=debezium", "OUTBOX_ADDITIONAL_PLACEMENT=tenant:header,type:header:eventType",
                   NULL};
    is_int(load(&cfg, dbz, run, err, sizeof(err)), 0, "debezium layout with placement: %s", err);
    ok(cfg.debezium, "layout debezium");
    is_str(cfg.on_sent, "delete", "the debezium layout deletes on send by default");
    config_destroy(&cfg);
    char *dbz_mark[] = {"OUTBOX_LAYOUT=debezium", "OUTBOX_ON_SENT=mark", NULL};
    is_int(load(&cfg, dbz_mark, run, err, sizeof(err)), 0, "debezium layout in mark mode: %s", err);
    is_str(cfg.on_sent, "mark", "an explicit OUTBOX_ON_SENT wins");
    config_destroy(&cfg);
    char *native[] = {NULL};
    is_int(load(&cfg, native, run, err, sizeof(err)), 0, "defaults: %s", err);
    ok(!cfg.debezium, "layout native by default");
    is_str(cfg.on_sent, "mark", "the native layout marks by default");
    config_destroy(&cfg);
    static const char *bad[][2] = {
        {"tenant:envelope", "placement 'envelope'"},
        {"tenant:partition", "placement 'partition'"},
        {"tenant", "expected column:header"},
        {"tenant:header:a:b", "expected column:header"},
        {"tenant:header,", "trailing comma"},
        {"ten ant:header", "not a plain identifier"},
        {"tenant:header:x\"y", "not a plain identifier"},
        {"x:header:id", "reserved"},
        {"outbox_lease:header", "reserved"},
        {"a:header:x,b:header:x", "given twice"},
        {"tenant:header,tenant:header", "given twice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char setting[128];
        snprintf(setting, sizeof(setting), "OUTBOX_ADDITIONAL_PLACEMENT=%s", bad[i][0]);
        char *env[] = {"OUTBOX_LAYOUT=debezium", setting, NULL};
        is_int(load(&cfg, env, run, err, sizeof(err)), -1, "placement '%s' refused", bad[i][0]);
        ok(strstr(err, "OUTBOX_ADDITIONAL_PLACEMENT") && strstr(err, bad[i][1]), "says why: %s", err);
        config_destroy(&cfg);
    }
}

/* OUTBOX_CLOUDEVENTS_SOURCE: a URI-reference (RFC 3986) or empty; the content type only with it;
 * no placement header named ce_* while it is set. */
static void test_cloudevents(void)
{
    struct config cfg;
    char err[512] = "";
    char *run[] = {"outbox-relay", NULL};
    static const char *good[] = {"/orders-service", "https://example.com/orders", "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66",
                                 "orders", "//host:8080/a/b?c=d#frag", "mailto:ops@example.com", "/a%20b",
                                 "http://[::1]:8080/x", "./rel:ative", "#only-fragment"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        err[0] = '\0';
        is_int(config_check_uri_reference(good[i], err, sizeof(err)), 0, "URI-reference '%s' accepted: %s", good[i], err);
    }
    static const char *bad[][2] = {
        {"", "empty"},
        {"/orders service", "0x20"},
        {"/orders%zz", "two hex digits"},
        {"/orders%4", "two hex digits"},
        {"1http://x", "not a scheme"},
        {":x", "not a scheme"},
        {"a b:c", "not a scheme"},
        {"/a#b#c", "more than one '#'"},
        {"/a[1]", "IP literal"},
        {"/caf\xc3\xa9", "0xc3"},
        {"/a\"b", "0x22"},
        {"/a\\b", "0x5c"},
        {"/a{b}", "0x7b"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        ok(config_check_uri_reference(bad[i][0], err, sizeof(err)) == -1 && strstr(err, bad[i][1]),
           "URI-reference '%s' refused: %s", bad[i][0], err);
    }
    char *on[] = {"OUTBOX_CLOUDEVENTS_SOURCE=/orders", "OUTBOX_CLOUDEVENTS_CONTENT_TYPE=application/vnd.order+json", NULL};
    is_int(load(&cfg, on, run, err, sizeof(err)), 0, "cloudevents on: %s", err);
    is_str(cfg.ce_source, "/orders", "source kept");
    is_str(cfg.ce_content_type, "application/vnd.order+json", "content type kept");
    config_destroy(&cfg);
    char *off[] = {NULL};
    is_int(load(&cfg, off, run, err, sizeof(err)), 0, "defaults: %s", err);
    is_str(cfg.ce_source, "", "cloudevents off by default");
    config_destroy(&cfg);
    static const char *refused[][3] = {
        {"OUTBOX_CLOUDEVENTS_SOURCE=/orders service", NULL, "OUTBOX_CLOUDEVENTS_SOURCE"},
        {"OUTBOX_CLOUDEVENTS_SOURCE=/orders", "OUTBOX_CLOUDEVENTS_CONTENT_TYPE=json", "OUTBOX_CLOUDEVENTS_CONTENT_TYPE"},
        {"OUTBOX_CLOUDEVENTS_CONTENT_TYPE=application/json", NULL, "applies only with OUTBOX_CLOUDEVENTS_SOURCE"},
        {"OUTBOX_CLOUDEVENTS_SOURCE=/orders", "OUTBOX_ADDITIONAL_PLACEMENT=tenant:header:ce_tenant", "'ce_tenant' is reserved"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char *env[] = {"OUTBOX_LAYOUT=debezium", (char *)refused[i][0], (char *)refused[i][1], NULL};
        err[0] = '\0';
        is_int(load(&cfg, env, run, err, sizeof(err)), -1, "refused: %s %s", refused[i][0], refused[i][1] ? refused[i][1] : "");
        ok(strstr(err, refused[i][2]) != NULL, "says %s: %s", refused[i][2], err);
        config_destroy(&cfg);
    }
}

int main(void)
{
    test_cloudevents();
    test_debezium_layout();
    test_command_args();
    test_topic_allow();
    test_defaults();
    test_env_and_flags();
    test_file_secret();
    test_service_links_ignored();
    test_invalid();
    command_destroy(&cmd);
    return done();
}
