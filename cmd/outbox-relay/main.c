/* outbox-relay: parses settings, then runs the relay, applies the schema (migrate),
 * or checks the settings and connectivity (--check-config). The only place that exits. */
#include <ev.h>
#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "relay/config.h"
#include "core/http.h"
#include "core/log.h"
#include "pg/pgconn.h"
#include "relay/relay.h"
#include "relay/schema.h"
#include "core/kafka.h"
#include "sink/kafka.h"
#include "sink/rabbitmq.h"
#include "sink/sink.h"

#ifndef OUTBOX_VERSION
#define OUTBOX_VERSION "dev"
#endif

extern char **environ;

/* A stop asked for while the relay starts, before the loop's watchers exist (main sets
 * this handler first thing for `run`): the relay starts and shuts down at once. */
static volatile sig_atomic_t early_signal;

static void on_early_signal(int sig)
{
    early_signal = sig;
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    relay_shutdown(w->data);
}

static int run(const struct config *cfg)
{
    struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
    char err[1024];
    struct relay *relay = relay_new(loop, cfg, err, sizeof(err));
    if (!relay) {
        log_error("%s", err);
        return OUTBOX_EXIT_USAGE;
    }
    ev_signal sigterm, sigint;
    ev_signal_init(&sigterm, on_signal, SIGTERM);
    ev_signal_init(&sigint, on_signal, SIGINT);
    sigterm.data = sigint.data = relay;
    ev_signal_start(loop, &sigterm);
    ev_signal_start(loop, &sigint);
    signal(SIGPIPE, SIG_IGN);

    /* LISTEN and the leases' session advisory locks need a real session: behind a pooler
     * in transaction or statement mode they would silently stop working. (Not known when
     * PostgreSQL is unreachable now: the relay then starts and reconnects as always.) A
     * signal during the check is held by the watchers above and handled once the loop runs. */
    char why[256];
    int code = OUTBOX_EXIT_OK;
    if (pgconn_check_session(cfg->pg_dsn, why, sizeof(why)) == 0) {
        log_error("OUTBOX_PG_DSN leads to a connection pooler in transaction or statement mode "
                  "(%s): the relay needs one PostgreSQL session per connection for LISTEN and "
                  "its leases' advisory locks. Point OUTBOX_PG_DSN at PostgreSQL itself, or at "
                  "a pool in session mode (PgBouncer: pool_mode = session); writers may stay "
                  "on the transaction pool", why);
        code = OUTBOX_EXIT_USAGE;
        goto out;
    }
    relay_start(relay);
    if (early_signal) /* SIGTERM or SIGINT before the watchers were in place */
        relay_shutdown(relay);
    ev_run(loop, 0);

    code = relay_exit_code(relay);
    const struct metrics *m = relay_metrics(relay);
    log_info("relay stopped: %llu rows published, %llu marked SENT, %llu parked",
             (unsigned long long)m->published_total, (unsigned long long)m->marked_total,
             (unsigned long long)m->parked_total);
out:
    ev_signal_stop(loop, &sigterm);
    ev_signal_stop(loop, &sigint);
    relay_free(relay);
    ev_loop_destroy(loop);
    return code;
}

static PGconn *connect_blocking(const struct config *cfg)
{
    return pgconn_connect_blocking(cfg->pg_dsn, "outbox-relay", 1);
}

/* A one-shot command (admin_command_find) on one blocking connection: its exit status (a -1
 * from the command is FAILED), or its unreachable status when PostgreSQL cannot be reached. */
static int on_connection(const struct config *cfg, const struct command *cmd, const struct admin_command *c)
{
    PGconn *conn = connect_blocking(cfg);
    if (!conn)
        return c->unreachable;
    char err[1024];
    int rc = c->run(conn, cfg, cmd, stdout, err, sizeof(err));
    PQfinish(conn);
    if (rc != 0)
        log_error("%s: %s", cmd->name, err);
    return rc < 0 ? OUTBOX_EXIT_FAILED : rc;
}

/* Reaches PostgreSQL and the broker (Kafka, or RabbitMQ with OUTBOX_SINK=rabbitmq: logged
 * in, the exchange declared or found) once: OK if both answer, FAILED otherwise. */
static int check_config(const struct config *cfg)
{
    int reached = 1;
    PGconn *conn = connect_blocking(cfg);
    if (conn) {
        log_info("check-config: postgres reachable (server %d)", PQserverVersion(conn));
        PQfinish(conn);
    } else {
        reached = 0;
    }
    if (cfg->rabbitmq) {
        char err[1024];
        struct sink_config sink_cfg;
        config_sink(cfg, &sink_cfg);
        if (sink_rabbitmq_check(&sink_cfg, err, sizeof(err)) != 0) {
            log_error("check-config: rabbitmq: %s", err);
            reached = 0;
        } else {
            log_info("check-config: rabbitmq reachable (exchange %s)", cfg->rabbitmq_exchange);
        }
    } else if (kafka_check_reachable(cfg->kafka, cfg->n_kafka) != 0) {
        reached = 0;
    } else if (cfg->exactly_once) {
        char err[1024];
        struct sink_config sink_cfg;
        config_sink(cfg, &sink_cfg);
        if (sink_kafka_txn_check(&sink_cfg, err, sizeof(err)) != 0) {
            log_error("check-config: exactly-once: %s", err);
            reached = 0;
        }
    }
    return reached ? OUTBOX_EXIT_OK : OUTBOX_EXIT_FAILED;
}

int main(int argc, char **argv)
{
    struct config cfg;
    struct command cmd;
    char err[1024];
    if (config_load(&cfg, &cmd, environ, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "outbox-relay: %s\n", err);
        config_destroy(&cfg);
        command_destroy(&cmd);
        return OUTBOX_EXIT_USAGE;
    }
    int code = OUTBOX_EXIT_OK;
    if (cmd.show_help == 2) {
        config_print_markdown(stdout);
    } else if (cmd.show_help) {
        config_print_help(stdout);
    } else if (cmd.show_version) {
        printf("outbox-relay %s (librdkafka %s, librabbitmq %s, libpq %d.%d, schema version %d)\n",
               OUTBOX_VERSION, rd_kafka_version_str(), sink_rabbitmq_version(), PQlibVersion() / 10000,
               PQlibVersion() % 100, schema_version());
    } else {
        log_setup(cfg.log_level, cfg.log_format);
        if (cmd.check_config)
            code = check_config(&cfg);
        else if (admin_command_find(cmd.name))
            code = on_connection(&cfg, &cmd, admin_command_find(cmd.name));
        else if (strcmp(cmd.name, "healthcheck") == 0)
            code = http_healthcheck(cfg.http_addr, "OUTBOX_HTTP_ADDR");
        else {
            struct sigaction sa;
            memset(&sa, 0, sizeof(sa));
            sa.sa_handler = on_early_signal;
            sigaction(SIGTERM, &sa, NULL);
            sigaction(SIGINT, &sa, NULL);
            code = run(&cfg);
        }
    }
    config_destroy(&cfg);
    command_destroy(&cmd);
    return code;
}
