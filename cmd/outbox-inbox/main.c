/* outbox-inbox: consumes the relay's topics and applies each event once, in the consumer's
 * database (see lib/inbox/inbox.c). Parses settings, then runs, migrates, or checks the
 * settings (--check-config). The only place that exits. */
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/http.h"
#include "inbox/inbox.h"
#include "inbox/inbox_config.h"
#include "source/source_rabbitmq.h"
#include "core/log.h"
#include "core/kafka.h"

#ifndef OUTBOX_VERSION
#define OUTBOX_VERSION "dev"
#endif

extern char **environ;

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

/* OK when PostgreSQL answers with the table and handler in place and Kafka answers. */
static int check_config(const struct inbox_config *cfg)
{
    PGconn *conn = inbox_connect(cfg);
    if (!conn)
        return OUTBOX_EXIT_FAILED;
    char err[1024];
    char *call = NULL;
    int rc = cfg->handler[0] ? inbox_resolve(conn, cfg, &call, err, sizeof(err)) : 0;
    PQfinish(conn);
    free(call);
    if (rc) {
        log_error("check-config: %s", err);
        return OUTBOX_EXIT_FAILED;
    }
    log_info("check-config: postgres reachable, %s and %s in place", cfg->table, cfg->handler);
    if (cfg->rabbitmq) {
        struct source_config src_cfg;
        inbox_config_source(cfg, &src_cfg);
        if (source_rabbitmq_check(&src_cfg, err, sizeof(err)) != 0) {
            log_error("check-config: rabbitmq: %s", err);
            return OUTBOX_EXIT_FAILED;
        }
        log_info("check-config: rabbitmq reachable, queues %s in place", cfg->rabbitmq_queues);
        return OUTBOX_EXIT_OK;
    }
    return kafka_check_reachable(cfg->kafka, cfg->n_kafka) == 0 ? OUTBOX_EXIT_OK : OUTBOX_EXIT_FAILED;
}

static int migrate(const struct inbox_config *cfg)
{
    PGconn *conn = inbox_connect(cfg);
    if (!conn)
        return OUTBOX_EXIT_FAILED;
    char err[1024];
    int rc = inbox_migrate(conn, cfg, err, sizeof(err));
    PQfinish(conn);
    if (rc) {
        log_error("migrate: %s", err);
        return OUTBOX_EXIT_FAILED;
    }
    log_info("migrate: the inbox table %s is in place", cfg->table);
    return OUTBOX_EXIT_OK;
}


int main(int argc, char **argv)
{
    struct inbox_config cfg;
    char err[1024];
    if (inbox_config_load(&cfg, environ, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "outbox-inbox: %s\n", err);
        inbox_config_destroy(&cfg);
        return OUTBOX_EXIT_USAGE;
    }
    int code = OUTBOX_EXIT_OK;
    if (cfg.show_help == 2) {
        inbox_config_print_markdown(stdout);
    } else if (cfg.show_help) {
        inbox_config_print_help(stdout);
    } else if (cfg.show_version) {
        printf("outbox-inbox %s (librdkafka %s, libpq %d.%d)\n", OUTBOX_VERSION, rd_kafka_version_str(),
               PQlibVersion() / 10000, PQlibVersion() % 100);
    } else {
        log_setup(cfg.log_level, cfg.log_format);
        if (cfg.check_config) {
            code = check_config(&cfg);
        } else if (strcmp(cfg.command, "migrate") == 0) {
            code = migrate(&cfg);
        } else if (strcmp(cfg.command, "healthcheck") == 0) {
            code = http_healthcheck(cfg.http_addr, "INBOX_HTTP_ADDR");
        } else {
            struct sigaction sa;
            memset(&sa, 0, sizeof(sa));
            sa.sa_handler = on_signal;
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGINT, &sa, NULL);
            signal(SIGPIPE, SIG_IGN);
            code = inbox_run(&cfg, &stop);
        }
    }
    inbox_config_destroy(&cfg);
    return code;
}
