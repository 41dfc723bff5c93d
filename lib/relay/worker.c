/* The worker connection's statements: one sender for all of them (worker_send), one
 * completion that records contact with PostgreSQL (the lease deadline counts from it),
 * reports failures and asks the loop for the next step. Below every concern of the loop:
 * it calls none of them. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* Asks for the before-sleep kick (relay.c's kick_cb) that moves the relay on. */
void relay_want_kick(struct relay *r)
{
    r->kick_wanted = 1;
    if (!ev_is_active(&r->kick_prepare))
        ev_prepare_start(r->loop, &r->kick_prepare);
}

/* Ends the loop with an exit status (enum outbox_exit). */
void relay_finish(struct relay *r, int code)
{
    r->exit_code = code;
    r->mode = MODE_DONE;
    ev_break(r->loop, EVBREAK_ALL);
}

int worker_busy(const struct relay *r)
{
    return r->stmt != NULL;
}

/* A statement failed: log it; reconnect when the server is shutting down, else retry after
 * a short delay. (A read-only server is pgconn's: it reconnects and res is NULL.) */
static void statement_failed(struct relay *r, const char *what, PGresult *res)
{
    if (!res)
        return; /* connection lost: the reconnect path takes over */
    char line[512];
    pgconn_error_line(res, line, sizeof(line));
    const char *state = pgconn_sqlstate(res);
    char key[sizeof(r->fail_log.last)];
    snprintf(key, sizeof(key), "%s failed (%s): %s", what, state, line);
    int64_t now = mono_ms();
    if (strcmp(key, r->fail_log.last) != 0) {
        log_warn("pg worker: %s", key);
        snprintf(r->fail_log.last, sizeof(r->fail_log.last), "%s", key);
        r->fail_log.logged_ms = now;
        r->fail_log.repeats = 0;
    } else if (now - r->fail_log.logged_ms >= r->fail_log.every_ms) {
        log_warn("pg worker: %s (again, %ld more times since it was last logged)", key,
                 r->fail_log.repeats + 1);
        r->fail_log.logged_ms = now;
        r->fail_log.repeats = 0;
    } else {
        r->fail_log.repeats++;
        log_debug("pg worker: %s", key);
    }
    if (strncmp(state, "57P", 3) == 0)
        pgconn_reset(r->worker, "server is shutting down");
    else if (!ev_is_active(&r->retry_timer)) {
        ev_timer_set(&r->retry_timer, 0.5, 0.0);
        ev_timer_start(r->loop, &r->retry_timer);
    }
}

static void worker_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    const struct worker_stmt *stmt = r->stmt;
    r->stmt = NULL;
    /* the session (and its advisory locks) was alive when the statement was sent; a proof
     * of life asked while it ran may be later */
    if (res)
        worker_contact(r, r->stmt_sent_ms);
    if (pgconn_result_ok(res)) {
        stmt->on_ok(r, res);
        if (!stmt->keeps_result)
            PQclear(res);
    } else {
        statement_failed(r, stmt->what, res);
        if (stmt->on_fail)
            stmt->on_fail(r, res);
        PQclear(res);
    }
    relay_want_kick(r);
}

/* A statement that runs long (behind a lock, over a long reader's dead tuples) is not a
 * lost session: the backend that runs it holds the session's advisory locks until it
 * ends, so a backend seen alive at or after the question was sent proves the locks held
 * then, as a statement's answer proves them held when it was sent. The session is named
 * by its pid and the client's port (a pid alone may be reused by a new session). */
int worker_alive_counts(const PGresult *res, int asked_pid, int asked_port, int pid_now, int port_now)
{
    return pgconn_result_ok(res) && PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0 &&
           asked_pid != 0 && asked_pid == pid_now && asked_port == port_now;
}

void worker_contact(struct relay *r, int64_t sent_ms)
{
    if (sent_ms > r->last_contact_ms)
        r->last_contact_ms = sent_ms;
}

static void alive_done(void *ctx, PGresult *res)
{
    struct relay *r = ctx;
    r->alive.pending = 0;
    int pid, port;
    pgconn_session(r->worker, &pid, &port);
    if (worker_alive_counts(res, r->alive.pid, r->alive.port, pid, port)) {
        worker_contact(r, r->alive.sent_ms);
        if (r->stmt && r->alive.logged_for != r->stmt_sent_ms) {
            log_info("pg worker: statement running for %lld ms; its session is alive (asked on the "
                     "listen session), so the lease partitions stay held",
                     (long long)(mono_ms() - r->stmt_sent_ms));
            r->alive.logged_for = r->stmt_sent_ms;
        }
    }
    PQclear(res);
}

void worker_prove_alive(struct relay *r, int64_t after_ms)
{
    if (!r->stmt || r->alive.pending || !r->listener || !pgconn_idle(r->listener))
        return;
    int64_t now = mono_ms();
    if (now - r->last_contact_ms < after_ms)
        return;
    pgconn_session(r->worker, &r->alive.pid, &r->alive.port);
    if (r->alive.pid == 0)
        return;
    char pid[16], port[16];
    snprintf(pid, sizeof(pid), "%d", r->alive.pid);
    snprintf(port, sizeof(port), "%d", r->alive.port);
    const char *params[2] = {pid, port};
    r->alive.sent_ms = now;
    r->alive.pending = 1;
    if (pgconn_query(r->listener, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1::int "
                     "AND client_port = $2::int)", 2, params, alive_done, r) != 0)
        r->alive.pending = 0;
}

#ifdef OUTBOX_TEST_HOOKS
/* Test builds: once OUTBOX_TESTHOOK_SEND_FAIL_AFTER (FLUSH_FAIL_AFTER) rows were published,
 * the next worker statement's send (flush) fails, once. */
static void test_fail_send(struct relay *r, const struct worker_stmt *stmt)
{
    long long *after[2] = {&r->test_send_fail_after, &r->test_flush_fail_after};
    for (int i = 0; i < 2; i++) {
        if (*after[i] <= 0 || r->m.published_total < (uint64_t)*after[i])
            continue;
        *after[i] = 0;
        log_warn("test hook: the %s of the next worker statement (%s) fails", i ? "flush" : "send",
                 stmt->what);
        pgconn_test_fail_next(r->worker, i ? PGCONN_TEST_FAIL_FLUSH : PGCONN_TEST_FAIL_SEND);
        return;
    }
}
#endif

/* Sends a statement; worker_done runs its on_ok or on_fail. Returns 0 once it is in flight;
 * -1 if the connection is not idle (nothing sent, nothing run), or if the send failed at
 * once (PQsendQueryParams or PQflush): then, before this returns, pgconn has dropped the
 * connection and worker_done has run with res NULL, the statement's on_fail as for a
 * connection lost under it (which is why r->stmt is set before the send). A caller that
 * undoes on -1 what it prepared finds it possibly undone already (mark_send's move back). */
int worker_send(struct relay *r, const struct worker_stmt *stmt, const char *sql, int nparams,
                const char *const *params)
{
    if (!pgconn_idle(r->worker))
        return -1;
#ifdef OUTBOX_TEST_HOOKS
    test_fail_send(r, stmt);
#endif
    r->stmt = stmt;
    r->stmt_sent_ms = mono_ms();
    return pgconn_query_prepared(r->worker, sql, nparams, params, worker_done, r);
}
