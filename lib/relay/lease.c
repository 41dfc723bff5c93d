/* Lease partitions: many relays on one table share its 64 partitions through session
 * advisory locks. Acquire, scan and balance, hand back drained partitions, lose every
 * partition at once when the session may be gone (client-side deadline), and write the
 * lease log. The pure rules are in lease_rules.c (lease.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "relay/relay_int.h"

static void log_lease(struct relay *r, int partition, const char *event, int64_t from, int64_t until)
{
    struct lease_set *ls = &r->lease;
    ls->events = xrealloc(ls->events, (ls->n_events + 1) * sizeof(*ls->events));
    ls->events[ls->n_events++] = (struct lease_event){partition, event, wall_ms(), from, until};
}

/* The session that held the locks is gone or may be: stop publishing every partition at
 * once, drop what is queued in the producer, and log the loss (written once reconnected).
 * The reset that follows releases the claim. */
void lease_lose_all(struct relay *r, const char *why)
{
    int lost = 0;
    int64_t now = wall_ms();
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++) {
        if (r->lease.part[p].state == LEASE_FREE)
            continue;
        log_lease(r, p, "lost", 0, now);
        r->lease.part[p].state = LEASE_FREE;
        lost++;
    }
    keep_forget_published(r); /* a mark may have been refused for them */
    if (!lost)
        return;
    r->m.lease_lost_total += (uint64_t)lost;
    log_warn("lease: lost %d partitions (%s); producer queue purged, their rows stay PENDING", lost, why);
    sink_abandon(r->sink, 200);
    reset_start(r, "lease partitions lost");
}

/* At shutdown, once nothing is in flight: every held partition is handed back. */
void lease_drain_all(struct relay *r)
{
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->lease.part[p].state == LEASE_ACTIVE || r->lease.part[p].state == LEASE_GRACE)
            r->lease.part[p].state = LEASE_DRAINING;
}

int lease_all_released(const struct relay *r)
{
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->lease.part[p].state != LEASE_FREE)
            return 0;
    return r->lease.n_events == 0;
}

/* ---- lease log ---------------------------------------------------------------- */

static void lease_log_ok(struct relay *r, PGresult *res)
{
    (void)res;
    struct lease_set *ls = &r->lease;
    /* the first events_sent events are written; later ones arrived meanwhile */
    memmove(ls->events, ls->events + ls->events_sent,
            (ls->n_events - ls->events_sent) * sizeof(*ls->events));
    ls->n_events -= ls->events_sent;
    ls->events_sent = 0;
}

static const struct worker_stmt lease_log_stmt = {
    .what = "writing the lease log", .on_ok = lease_log_ok};

/* Writes every queued lease event in one statement. */
static int send_lease_log(struct relay *r)
{
    struct strbuf parts, events, at, from, until;
    struct strbuf *all[] = {&parts, &events, &at, &from, &until};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        strbuf_init(all[i]);
        pgarray_open(all[i]);
    }
    for (size_t i = 0; i < r->lease.n_events; i++) {
        const struct lease_event *e = &r->lease.events[i];
        pgarray_int(&parts, e->partition);
        pgarray_str(&events, e->event);
        pgarray_int(&at, e->at);
        pgarray_int(&from, e->publish_from);
        pgarray_int(&until, e->publish_until);
    }
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        pgarray_close(all[i]);
    const char *params[6] = {parts.buf, r->lease.incarnation, events.buf, at.buf, from.buf, until.buf};
    int rc = worker_send(r, &lease_log_stmt, r->sql.lease_log, 6, params);
    if (rc == 0)
        r->lease.events_sent = r->lease.n_events;
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        strbuf_destroy(all[i]);
    return rc;
}

/* ---- acquire ------------------------------------------------------------------ */

static void lease_acquire_ok(struct relay *r, PGresult *res)
{
    int64_t now = mono_ms(), wall = wall_ms();
    int got = 0, takeovers = 0, got_first = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        int p = atoi(PQgetvalue(res, i, LEASE_ACQUIRE_PARTITION));
        if (strcmp(PQgetvalue(res, i, LEASE_ACQUIRE_GOT), "t") != 0 || p < 0 || p >= OUTBOX_LEASE_PARTITIONS)
            continue;
        /* The previous holder may still be publishing until its own deadline unless it
         * released the partition cleanly (or it was this very process). */
        int clean = lease_takeover_clean(
            PQgetisnull(res, i, LEASE_ACQUIRE_LAST_EVENT) ? NULL : PQgetvalue(res, i, LEASE_ACQUIRE_LAST_EVENT),
            PQgetvalue(res, i, LEASE_ACQUIRE_LAST_HOLDER), r->lease.incarnation);
        int64_t wait = clean ? 0 : r->lease.grace_ms;
        r->lease.part[p].state = wait ? LEASE_GRACE : LEASE_ACTIVE;
        claim_partition_from_bottom(r, p); /* another relay may have left rows anywhere in it */
        keep_forget_published(r);
        snprintf(r->lease.part[p].token, sizeof(r->lease.part[p].token), "%d/%s/%s", p,
                 PQgetvalue(res, i, LEASE_ACQUIRE_TOKEN), r->lease.incarnation);
        r->lease.part[p].publish_from_ms = now + wait;
        log_lease(r, p, "acquired", wall + wait, 0);
        got++;
        got_first |= p % eos_group_size(r->cfg) == 0;
        takeovers += !clean;
    }
    if (got) {
        r->m.lease_takeovers_total += (uint64_t)takeovers;
        log_info("lease: acquired %d partitions (%d taken over from a relay that did not release "
                 "them: publishing after a %lld ms grace); holding %d of %d with %d relays",
                 got, takeovers, (long long)(takeovers ? r->lease.grace_ms : 0),
                 lease_count_held(r->lease.part), OUTBOX_LEASE_PARTITIONS, r->lease.relays);
        claim_want(r);
        if (r->cfg->exactly_once && got_first) {
            r->lease.due = 1; /* a transaction group's first partition taken: the others at once */
            relay_want_kick(r);
        }
    }
}

static const struct worker_stmt lease_acquire_stmt = {
    .what = "acquiring lease partitions", .on_ok = lease_acquire_ok};

/* ---- release ------------------------------------------------------------------ */

static void lease_release_ok(struct relay *r, PGresult *res)
{
    (void)res;
    int64_t now = wall_ms();
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->lease.part[p].state == LEASE_DRAINING && r->lease.part[p].publish_from_ms == -1) {
            r->lease.part[p].state = LEASE_FREE;
            log_lease(r, p, "released", 0, now);
            n++;
        }
    keep_forget_published(r);
    log_info("lease: released %d partitions; holding %d", n, lease_count_held(r->lease.part));
    /* exactly-once: a transaction group handed back whole (a rebalance, finished in any mode
     * but a shutdown's) ends its producer session, so that holding it again fences and reads
     * its record anew */
    int size = eos_group_size(r->cfg);
    int ending = r->mode == MODE_DRAINING || r->mode == MODE_DONE;
    for (int g = 0; r->cfg->exactly_once && !ending && g < eos_groups(r->cfg); g++) {
        int held = 0;
        for (int p = g * size; p < (g + 1) * size; p++)
            held += r->lease.part[p].state != LEASE_FREE;
        if (!held && (sink_txn_epoch(r->sink, g) || r->eos.g[g].opening))
            r->eos.g[g].released = 1; /* (eos_tick ends it; no claim of it meanwhile) */
    }
}

static const struct worker_stmt lease_release_stmt = {
    .what = "releasing lease partitions", .on_ok = lease_release_ok};

/* Exactly-once (but at a shutdown): a transaction group handed back is released whole,
 * once nothing of it is in flight and its producer is closed (asked here of eos_tick), so
 * that no fence or read of this relay's still under way lands after the next holder's
 * fence. 1 while partition p waits for that. */
static int release_waits(struct relay *r, const int *inflight, int p)
{
    if (!r->cfg->exactly_once || r->mode == MODE_DRAINING || r->mode == MODE_DONE)
        return 0;
    int size = eos_group_size(r->cfg), g = eos_group_of(r->cfg, p);
    for (int q = g * size; q < (g + 1) * size; q++)
        if ((r->lease.part[q].state != LEASE_DRAINING && r->lease.part[q].state != LEASE_FREE) || inflight[q])
            return 1;
    struct eos_group *e = &r->eos.g[g];
    if (!e->released && !e->opening && !sink_txn_epoch(r->sink, g))
        return 0; /* closed */
    e->released = 1;
    relay_want_kick(r);
    return 1;
}

/* Releases draining partitions that have nothing in flight any more. */
static int send_lease_release(struct relay *r)
{
    int inflight[OUTBOX_LEASE_PARTITIONS];
    window_per_partition(&r->win, inflight, OUTBOX_LEASE_PARTITIONS);
    struct strbuf parts;
    strbuf_init(&parts);
    pgarray_open(&parts);
    int n = 0;
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        if (r->lease.part[p].state == LEASE_DRAINING && !inflight[p] && !release_waits(r, inflight, p)) {
            pgarray_int(&parts, p);
            r->lease.part[p].publish_from_ms = -1; /* marks "in this release" */
            n++;
        }
    pgarray_close(&parts);
    int rc = -1;
    if (n) {
        char key[16];
        snprintf(key, sizeof(key), "%d", r->sql.lease_key);
        const char *params[2] = {key, parts.buf};
        rc = worker_send(r, &lease_release_stmt, r->sql.lease_release, 2, params);
    }
    strbuf_destroy(&parts);
    return rc;
}

/* ---- scan and balance --------------------------------------------------------- */

/* Relays of one table in both modes (OUTBOX_EXACTLY_ONCE on and off) would fence nothing
 * and hold each other's partitions: a relay that finds the other mode at its first scan
 * exits, naming the setting; one already running says so once and takes no partition
 * while they are there. 1 if this scan stops here. */
static int lease_mixed_modes(struct relay *r, int relays, int eos_relays, int other_groups)
{
    int first = r->lease.scans++ == 0, eos = r->cfg->exactly_once;
    int others = eos ? relays - eos_relays : eos_relays; /* relays in the other mode */
    if (others <= 0 && eos && other_groups > 0) {
        /* exactly-once relays with other transaction groups: their ids and progress records
         * are not this relay's, so a takeover between them would read the wrong record */
        if (first) {
            log_error("lease: %d relay%s of %s run%s with another OUTBOX_TRANSACTION_GROUPS than this "
                      "one (%d): the relays of one table must all have the same (to change it, stop "
                      "them all first: docs/EXACTLY_ONCE.md); exiting", other_groups,
                      other_groups == 1 ? "" : "s", r->cfg->table, other_groups == 1 ? "s" : "",
                      r->cfg->transaction_groups);
            relay_finish(r, OUTBOX_EXIT_USAGE);
        } else if (!r->lease.mixed_logged) {
            log_error("lease: %d relay%s of %s with another OUTBOX_TRANSACTION_GROUPS started beside "
                      "this one (%d); it should exit, and this relay takes no partition while it is "
                      "there", other_groups, other_groups == 1 ? "" : "s", r->cfg->table,
                      r->cfg->transaction_groups);
        }
        r->lease.mixed_logged = 1;
        return 1;
    }
    if (others <= 0) {
        r->lease.mixed_logged = 0;
        return 0;
    }
    if (first) {
        log_error("lease: %d relay%s of %s run%s with OUTBOX_EXACTLY_ONCE=%d and this one with %d: the "
                  "relays of one table must all be in one mode (to switch, stop them all first: "
                  "docs/EXACTLY_ONCE.md); exiting", others, others == 1 ? "" : "s", r->cfg->table,
                  others == 1 ? "s" : "", !eos, eos);
        relay_finish(r, OUTBOX_EXIT_USAGE);
        return 1;
    }
    if (!r->lease.mixed_logged)
        log_error("lease: %d relay%s of %s with OUTBOX_EXACTLY_ONCE=%d started beside this one (=%d); "
                  "it should exit, and this relay takes no partition while it is there", others,
                  others == 1 ? "" : "s", r->cfg->table, !eos, eos);
    r->lease.mixed_logged = 1;
    return 1;
}

static void lease_scan_ok(struct relay *r, PGresult *res)
{
    int relays = atoi(PQgetvalue(res, 0, LEASE_SCAN_RELAYS));
    int locked[OUTBOX_LEASE_PARTITIONS], foreign[OUTBOX_LEASE_PARTITIONS];
    int held_by_relays = lease_parse_locked(PQgetvalue(res, 0, LEASE_SCAN_LOCKED), locked);
    int held_by_others = lease_parse_locked(PQgetvalue(res, 0, LEASE_SCAN_FOREIGN), foreign);
    const char *holders = PQgetvalue(res, 0, LEASE_SCAN_FOREIGN_HOLDERS);
    if (relays < 1)
        relays = 1;
    if (lease_mixed_modes(r, relays, atoi(PQgetvalue(res, 0, LEASE_SCAN_EXACTLY_ONCE)),
                          atoi(PQgetvalue(res, 0, LEASE_SCAN_OTHER_GROUPS))))
        return;
    if (relays != r->lease.relays && r->lease.relays)
        log_info("lease: %d relays share the table (was %d)", relays, r->lease.relays);
    r->lease.relays = relays;
    r->m.lease_relays = relays;
    r->m.lease_partitions_unowned = OUTBOX_LEASE_PARTITIONS - held_by_relays;
    if (strcmp(holders, r->lease.foreign_logged) != 0) {
        if (held_by_others)
            log_warn("lease: %d partitions of %s are locked by sessions that are not its relays "
                     "(%s); nobody publishes them until those locks go", held_by_others,
                     r->cfg->table, holders);
        snprintf(r->lease.foreign_logged, sizeof(r->lease.foreign_logged), "%s", holders);
    }
    if (r->mode != MODE_RUNNING)
        return;
    struct strbuf parts;
    strbuf_init(&parts);
    int handback = 0;
    /* exactly-once: the table's transaction groups are each held whole by one relay */
    int size = eos_group_size(r->cfg);
    int target = (lease_balance_target(relays) + size - 1) / size * size;
    int n = lease_decide(r->lease.part, locked, foreign, r->lease.unowned_before, target, size, &parts,
                         &handback);
    /* give back the highest partitions (whole groups): stop claiming them, release once drained */
    int given = handback ? lease_pick_handback(r->lease.part, handback, size) : 0;
    if (given) {
        r->m.lease_rebalances_total++;
        log_info("lease: handing back %d partitions to balance %d relays", given, relays);
    } else if (n) {
        char key[16];
        snprintf(key, sizeof(key), "%d", r->sql.lease_key);
        const char *params[2] = {key, parts.buf};
        /* sent from here, the scan's follow-up: kick waits for it (the worker is busy) */
        worker_send(r, &lease_acquire_stmt, r->sql.lease_acquire, 2, params);
    }
    strbuf_destroy(&parts);
}

static const struct worker_stmt lease_scan_stmt = {
    .what = "scanning lease partitions", .on_ok = lease_scan_ok};

static int send_lease_scan(struct relay *r)
{
    char key[16];
    snprintf(key, sizeof(key), "%d", r->sql.lease_key);
    const char *params[1] = {key};
    r->lease.due = 0;
    return worker_send(r, &lease_scan_stmt, r->sql.lease_scan, 1, params);
}

static void keepalive_ok(struct relay *r, PGresult *res)
{
    (void)r;
    (void)res;
}

static const struct worker_stmt lease_keepalive_stmt = {.what = "lease keepalive", .on_ok = keepalive_ok};

/* The next lease statement, if one is wanted: log, release, scan - or, while draining at
 * shutdown with partitions still held, a keepalive: no partition is taken or balanced then,
 * but the session (and its locks) must stay in contact while deliveries are awaited, or
 * the deadline would purge them after 30% of the lease timeout, long before the shutdown
 * timeout. Returns 0 if one was sent, -1 if none was wanted (or it could not be sent). */
int lease_send_next(struct relay *r)
{
    if (r->lease.n_events)
        return send_lease_log(r);
    if (send_lease_release(r) == 0)
        return 0;
    if (r->lease.due && (r->mode == MODE_RUNNING || r->mode == MODE_RESETTING))
        return send_lease_scan(r);
    if (r->lease.due && r->mode == MODE_DRAINING && lease_count_held(r->lease.part) > 0) {
        r->lease.due = 0;
        return worker_send(r, &lease_keepalive_stmt, "SELECT 1", 0, NULL);
    }
    return -1;
}

/* The client-side deadline: no answer on the worker session for deadline_ms means the
 * server may have freed the locks; stop publishing every partition at once. Checked on
 * the lease timer and before anything is produced (a process resumed after being frozen
 * must not produce before it notices). */
void lease_check_deadline(struct relay *r)
{
    int64_t now = mono_ms();
    if (lease_count_held(r->lease.part) > 0 && now - r->last_contact_ms > r->lease.deadline_ms) {
        char why[96];
        snprintf(why, sizeof(why), "no answer from PostgreSQL for %lld ms",
                 (long long)(now - r->last_contact_ms));
        lease_lose_all(r, why);
        pgconn_reset(r->worker, why); /* a new session; the old one's locks go with it */
    }
}

/* Lease housekeeping on a timer: the client-side deadline, grace periods, and a scan. */
static void lease_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    lease_check_deadline(r);
    r->lease.due = 1;
    relay_want_kick(r);
}

/* A statement without an answer for a sixth of the deadline: is its session alive? Asked
 * every sixth, whatever sent the statement, so that the answer is back with at least half
 * of the deadline to spare (on its own timer: the lease timer runs every 2/3 of the
 * deadline, and a statement it sends itself would be asked about too late). */
static void alive_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct relay *r = w->data;
    worker_prove_alive(r, r->lease.deadline_ms / 6);
}

void lease_init(struct relay *r)
{
    const struct config *cfg = r->cfg;
    r->lease.grace_ms = cfg->lease_timeout_ms * 2 / 5;    /* > the old holder's deadline */
    r->lease.deadline_ms = cfg->lease_timeout_ms * 3 / 10; /* < the server's detection time */
    snprintf(r->lease.incarnation, sizeof(r->lease.incarnation), "%s/%d", cfg->relay_name,
             (int)getpid());
    ev_timer_init(&r->lease.timer, lease_timer_cb, cfg->lease_timeout_ms / 5000.0,
                  cfg->lease_timeout_ms / 5000.0);
    r->lease.timer.data = r;
    double sixth = r->lease.deadline_ms / 6000.0;
    ev_timer_init(&r->lease.alive_timer, alive_timer_cb, sixth, sixth);
    r->lease.alive_timer.data = r;
    r->lease.due = 1;
}

void lease_start(struct relay *r)
{
    ev_timer_start(r->loop, &r->lease.timer);
    ev_timer_start(r->loop, &r->lease.alive_timer);
}

void lease_stop(struct relay *r)
{
    ev_timer_stop(r->loop, &r->lease.timer);
    ev_timer_stop(r->loop, &r->lease.alive_timer);
}

void lease_destroy(struct relay *r)
{
    free(r->lease.events);
    r->lease.events = NULL;
}

int lease_activate_due(struct relay *r, struct strbuf *parts)
{
    return lease_activate(r->lease.part, mono_ms(), parts);
}
