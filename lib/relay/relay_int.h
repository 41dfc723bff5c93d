/* Private to lib/relay/: struct relay, made of one part per concern, and what the files
 * of the folder call across. The public interface is relay/relay.h.
 *
 * Three rules keep the files from calling back and forth:
 * - only relay.c's kick decides the next statement; a concern that wants work done asks
 *   for it with relay_want_kick (it runs before the loop next waits);
 * - starting a reset only changes the mode: producing stops by itself when the mode is no
 *   longer RUNNING, and the reset releases the claim when it advances;
 * - every worker statement goes through worker_send, whose completion records contact,
 *   reports failures and asks for a kick;
 * - a concern's state is written by its own file: produce.c reads the claim's rows through
 *   claim_rows.c's cursor and tells the claim and the reset what happened through their
 *   functions (test/circles.sh keeps the files from calling each other in a ring). */
#ifndef OUTBOX_RELAY_INT_H
#define OUTBOX_RELAY_INT_H

#include <ev.h>
#include <libpq-fe.h>

#include "core/backoff.h"
#include "relay/config.h"
#include "relay/floor.h"
#include "core/http.h"
#include "relay/kshare.h"
#include "relay/lease.h"
#include "sink/message.h"
#include "relay/relay_metrics.h"
#include "relay/monitor.h"
#include "relay/outbox.h"
#include "relay/pause.h"
#include "pg/pgconn.h"
#include "relay/relay.h"
#include "sink/sink.h"
#include "relay/window.h"

#define MIN_POLL_DELAY_MS 5

enum relay_mode { MODE_RUNNING, MODE_RESETTING, MODE_DRAINING, MODE_DONE };

/* Each concern's state below names the file that writes it: no other file touches its
 * fields, they call that file's functions (test/owners.py). */

/* Written by claim.c and claim_rows.c (the cursor, isolation, keys held back): the last
 * claim's rows not yet produced (backpressure), keys held back in it, the floors. */
struct claim_state {
    PGresult *res;
    int next;            /* next row of res to produce */
    char **blocked_keys; /* keys with a row parked in this claim (poison policy block) */
    size_t n_blocked_keys;
    int quota;           /* rows per partition in the claim in flight */
    int wanted;          /* claim at the next kick (claim_want) */
    int full;            /* the last claim came with as many rows as it asked for */
    /* After a row-level error in a batch (poison.c judges it), rows are claimed and published
     * one at a time until past this id, so the guilty row fails alone (and only then is
     * counted). */
    int64_t isolate_until_id;
    struct pg_bytes payloads; /* res's payloads decoded, when the column is bytea */
    long long budget;    /* the byte budget the claim in flight was sent with */
    int limit;           /* its row limit */
    int64_t sent_ms;     /* monotonic */
    /* Proven floors (floor.h): off on a schema without the requeue count (before 5). */
    int floors_on;
    struct floors floors;
    struct floor_claim fc;     /* the claim in flight */
    int64_t claimed_high;      /* the highest id ever claimed */
    int64_t probe_high;        /* claimed_high when the probe in flight was sent */
    int64_t probe_due_ms;      /* monotonic */
    int64_t held_logged;       /* the candidate whose held-back proof was logged */
    int bottom_k;              /* partitions a claim may read from the bottom (claim.c) */
    int bottom_next;           /* where the next claim looks first for those */
    int fc_bottom;             /* how many the claim in flight reads from the bottom */
    int fc_skipped;            /* it left out partitions that wait for their turn */
    int safety_next;           /* the next partition of the safety pass */
    int fc_safety;             /* the claim in flight reads the safety pass's partition */
    int64_t safety_due_ms;     /* monotonic */
    long long requeued;        /* the doorbell's requeue count the last claim saw */
    uint64_t eos_epoch[OUTBOX_LEASE_PARTITIONS]; /* exactly-once: each transaction group's
                                                    producer session when the claim in flight was sent */
    int requeued_known;
};

/* Written by poll.c: the adaptive poll and the conditional doorbell. */
struct poll_state {
    int idle_delay_ms;
    int arm_wanted;
    int doorbell_armed;
    ev_timer timer;
};

/* Written by record.c: acknowledged rows waiting to be recorded as sent. */
struct record_state {
    int64_t acked_since_ms; /* monotonic: when the oldest acknowledged row waiting to be recorded was (0: none) */
    ev_timer mark_timer;    /* OUTBOX_MARK_DELAY_MS's wait */
};

/* Written by reset.c: after a failed delivery or a fatal producer error. */
struct reset_state {
    int fatal_pending;      /* the producer must be recreated */
    char last_failure[256];
    struct backoff backoff;
    ev_timer timer;
    int waiting;            /* settled; the timer resumes claims */
};

/* poison.c: a row to write back, parked (FAILED) or one failed-alone attempt counted. */
struct row_update {
    int64_t id;
    char *reason;
    int count_attempt; /* 1: attempts+1, parks at OUTBOX_MAX_ATTEMPTS; 0: park now */
};

/* A parked row's dead-letter copy, kept until the broker acknowledges it (poison.c). */
struct dead_letter {
    int64_t id;
    char *event_id, *event_type, *aggregate_type, *aggregate_id, *reason;
    char *payload; /* NULL: headers only */
    size_t payload_len;
    int64_t created_ms;
    int queued;   /* handed to the sink, its report not yet served */
    int attempts; /* sends that failed */
    int group;    /* exactly-once: its row's transaction group */
};

/* Written by poison.c. */
struct poison_state {
    struct row_update *updates; /* written before the next claim */
    size_t n_updates;
    struct dead_letter *dl;     /* dead-letter copies not yet acknowledged */
    size_t n_dl;
    ev_timer dl_timer;          /* sends the failed ones again */
    struct log_limit dl_wait_log; /* exactly-once: copies wait for a group that may produce */
};

/* Written by keep.c: OUTBOX_ON_SENT=keep's watermark. */
struct keep_state {
    int checked;            /* the proof's check passed once (start-up) */
    int session_checked;    /* ... and again on the current worker session */
    int blocked;            /* the last check failed: the watermark stops */
    char why[512];
    int dirty;              /* rows were recorded (or the proof moved) since the last advance */
    int64_t proof_sent;     /* the proof the last advance was sent with */
    int64_t advance_due_ms; /* monotonic */
    int64_t check_due_ms;
    int64_t audit_due_ms;   /* the next partition's audit */
    int audit_next;         /* the partition after the one audited last */
    int audit_part;         /* the partition of the audit in flight */
    int64_t audit_from[OUTBOX_LEASE_PARTITIONS]; /* where each partition's next turn starts */
    int64_t audit_ids[OUTBOX_LEASE_PARTITIONS];  /* W less the lowest row at its last turn */
    int64_t audit_began_ms[OUTBOX_LEASE_PARTITIONS]; /* when its pass began (0: not yet; -1: before the session) */
    int64_t audit_pass_ms[OUTBOX_LEASE_PARTITIONS];  /* how long its last whole pass took */
    /* Rows this relay recorded as published, above its floors: the claim skips them as it
     * skips rows in flight (a hashed list) instead of looking each up in the records. */
    int64_t *pub_id;
    int *pub_part;
    size_t pub_n, pub_cap;
    /* W of the partitions it holds, as its advances moved it (bit p of `known`), and as last
     * written to the watermark table (every KEEP_SAVE_MS, and before a shutdown ends) */
    uint64_t known;
    int64_t w[OUTBOX_LEASE_PARTITIONS], saved[OUTBOX_LEASE_PARTITIONS];
    int64_t save_due_ms;
};

/* Written by eos.c: exactly-once (OUTBOX_EXACTLY_ONCE), per transaction group. */
struct eos_group {
    uint64_t ready_epoch;   /* the producer session whose progress record is recorded: claims go */
    uint64_t pending_epoch; /* a progress record's rows to record (below), for this session */
    uint64_t sent_epoch;    /* the session the recording statement in flight is for */
    int64_t *ids;
    char **event_ids;
    size_t n;
    int opening;            /* the sink fences and reads; on_recovered follows */
    int released;           /* lease.c: handed back whole while its session stood: eos_tick ends it */
    int64_t open_sent_ms, open_due_ms; /* monotonic */
    int retry_ms;           /* after the last failed fence or read (0: none failed since the last success) */
    char last_err[200];     /* the last failure said (a new one is said at once) */
    struct log_limit fail_log;
};

struct eos_state {
    struct eos_group g[OUTBOX_LEASE_PARTITIONS]; /* OUTBOX_TRANSACTION_GROUPS of them in use */
    int sent_group;         /* the group of the recording statement in flight */
    struct log_limit wait_log;
};

/* Exactly-once: transaction groups (1 when off) and the group of a lease partition. */
static inline int eos_groups(const struct config *cfg)
{
    return cfg->exactly_once ? cfg->transaction_groups : 1;
}

/* Lease partitions that move together between relays: a transaction group's (exactly-once),
 * else each alone. */
static inline int eos_group_size(const struct config *cfg)
{
    return cfg->exactly_once ? OUTBOX_LEASE_PARTITIONS / cfg->transaction_groups : 1;
}

static inline int eos_group_of(const struct config *cfg, int partition)
{
    return cfg->exactly_once ? partition / eos_group_size(cfg) : 0;
}

/* Written by eos_tail.c: rows recorded in PostgreSQL that stay in the progress record until
 * every standby has their record (a ring of ids, each with the generation it joined in), and
 * the generations sealed by a check, each with the WAL insert position that bounds them. */
#define EOS_TAIL_MAX_ROWS 6000
#define EOS_TAIL_SEALS 64
struct eos_ring {          /* one transaction group's rows (its own progress record) */
    int64_t *id;
    uint64_t *ver;          /* the version of its entry in the record (sink_txn_version) */
    uint64_t *gen_of;
    size_t head, n;
    uint64_t epoch;         /* the group's producer session the rows belong to */
};

struct eos_tail {
    struct eos_ring ring[OUTBOX_LEASE_PARTITIONS]; /* one per transaction group in use */
    size_t n;               /* rows in them all */
    uint64_t gen;           /* rows recorded now join this generation */
    struct {
        uint64_t gen, lsn;  /* rows of gen and older committed below lsn ... */
        int64_t at_ms;      /* ... before this time (monotonic: the check's sending) */
    } seal[EOS_TAIL_SEALS];
    size_t n_seal;
    uint64_t worker;        /* the worker session (its reconnects) that recorded the rows */
    uint64_t sent_worker, sent_gen;
    int64_t sent_ms;        /* monotonic: the last check's */
    int interval_ms;        /* between checks while rows wait */
    int in_flight;
    int checked;            /* a check answered in this session (the first goes before claims) */
    int fails;              /* checks failed in a row */
    int nudge;              /* a synchronous commit is due (an idle server's partial WAL page) */
    int64_t retry_ms;       /* monotonic: no check before (after a failure) */
    uint64_t lag;           /* WAL bytes the oldest bound was ahead of the primary's flush or a standby */
    char who[160];          /* that standby or slot */
    ev_timer timer;
    int timer_init;
    struct log_limit full_log, hidden_log, fail_log;
};

/* lease.c: a lease log row not yet written. */
struct lease_event {
    int partition;
    const char *event;
    int64_t at, publish_from, publish_until; /* wall clock ms; 0 = NULL */
};

/* Written by lease.c (lease_view.c reads it for the other files). */
struct lease_set {
    struct lease part[OUTBOX_LEASE_PARTITIONS];
    struct lease_event *events; /* lease log rows not yet written */
    size_t n_events;
    size_t events_sent;         /* how many the statement in flight writes */
    int due;                    /* time to scan and rebalance */
    int relays;                 /* live relays at the last scan */
    int64_t grace_ms, deadline_ms;
    char incarnation[256];      /* relay name/pid: this process in the lease log */
    unsigned char unowned_before[OUTBOX_LEASE_PARTITIONS]; /* no session held it at the last scan */
    char foreign_logged[512];   /* the foreign holders last logged */
    int scans;                  /* lease scans answered so far */
    int mixed_logged;           /* relays in the other exactly-once mode were seen (and logged) */
    ev_timer timer;
    ev_timer alive_timer;       /* every sixth of the deadline: a slow statement's proof of life */
};

/* Written by status.c. */
struct report_state {
    ev_timer log_timer;
    uint64_t marked_logged;
    ev_timer publish_timer;
    int64_t last_progress_ms;
    uint64_t last_progress_marked;
    const char *stall_logged;
};

/* worker.c: one worker statement, described once beside its sender. on_ok gets the
 * successful result: borrowed (cleared afterwards), or, with keeps_result, on_ok takes
 * ownership of it. on_fail (may be NULL) runs after a failed one has been reported, with
 * res NULL when the connection was lost (borrowed). */
struct worker_stmt {
    const char *what; /* for logs: "claim", "mark", ... */
    void (*on_ok)(struct relay *r, PGresult *res);
    void (*on_fail)(struct relay *r, PGresult *res);
    int keeps_result;
};

struct relay {
    struct ev_loop *loop;
    const struct config *cfg;
    struct outbox_sql sql;
    struct pgconn *worker;
    struct pgconn *listener;
    struct sink *sink;
    struct sink_config sink_cfg; /* what the sink was told (config_sink) */
    struct monitor *monitor;
    struct http *http;
    struct metrics m;

    enum relay_mode mode;
    struct window win;
    struct claim_state claim;
    struct poll_state poll;
    struct record_state record;
    struct reset_state reset;
    struct poison_state poison;
    struct pauses paused;
    struct kshare kshare; /* Kafka partitions' shares of the window */
    struct lease_set lease;
    struct report_state report;
    struct keep_state keep;
    struct eos_state eos;
    struct eos_tail eos_tail;

    const struct worker_stmt *stmt; /* the worker statement in flight, or NULL (worker.c) */
    int64_t stmt_sent_ms;           /* monotonic */
    int64_t last_contact_ms;        /* monotonic send time of the last statement that succeeded,
                                       or of a proof that the session was alive (worker.c;
                                       the lease deadline counts from it) */
    /* Written by worker.c: while a worker statement runs long, the listen session asks
     * whether the worker's backend is still there (worker_prove_alive). */
    struct {
        int pending;        /* a question in flight on the listen session */
        int pid, port;      /* the worker session it is about (pgconn_session) */
        int64_t sent_ms;    /* monotonic */
        int64_t logged_for; /* stmt_sent_ms of the statement last logged alive */
    } alive;
    int schema_ok;                  /* version checked on the current worker connection */
    int schema_logged;
    int payload_bytea;              /* the payload column is bytea: claimed as hex */
    struct message_layout layout;   /* rows -> messages: settings and the payload column's type */
    ev_timer retry_timer;           /* after a failed statement */
    /* The last statement failure logged, so that the same failure retried every 0.5 s is
     * logged once a minute with its count rather than each time (worker.c). */
    struct {
        char last[640];
        int64_t logged_ms;
        long repeats;
        int64_t every_ms; /* 60000; a test build may shorten it (OUTBOX_TESTHOOK_REPEAT_LOG_MS) */
    } fail_log;

    ev_timer shutdown_timer;
    int shutdown_requests;
    int exit_code;
    ev_prepare kick_prepare;
    int kick_wanted;
    /* relay.c's kick: marks and claims alternate while both are wanted, as do audit turns
     * and claims */
    int last_was_mark;
    int audit_last;

#ifdef OUTBOX_TEST_HOOKS
    long long test_kill_before_mark_after; /* SIGKILL self once this many rows were acked */
    long long test_kill_after_mark_sent_after; /* ... right after sending a mark (it may commit or not) */
    long long test_fatal_after;            /* raise a fatal producer error after this many acks */
    long long test_fatal_after_dead_letter; /* a fatal producer error once the Nth dead-letter copy is queued */
    long long test_send_fail_after;        /* once this many were acked, a worker send fails */
    long long test_flush_fail_after;       /* once this many were acked, a worker flush fails */
    int test_bottom_k;                     /* at most this many partitions per claim from the
                                              bottom, as when such claims are slow (0: no cap) */
    int test_cut_before_park;              /* the worker session is cut before the first
                                              park, which goes to the next session (poison.c) */
#endif
};

/* worker.c: the loop's worker connection, and what every other file asks of the loop (the
 * files of this folder call worker.c; relay.c calls them all; nothing calls back up) */
void relay_want_kick(struct relay *r);
void relay_finish(struct relay *r, int code); /* code: an enum outbox_exit */
int worker_send(struct relay *r, const struct worker_stmt *stmt, const char *sql, int nparams,
                const char *const *params);
int worker_busy(const struct relay *r);
/* A worker statement in flight and no contact for after_ms: asks on the listen session
 * whether the worker's backend (its lease locks) is still there; if so, counts the
 * question's send time as contact. Nothing without a listen session (no doorbell). */
void worker_prove_alive(struct relay *r, int64_t after_ms);
/* Whether an answer to that question counts: the worker's backend seen ("t"), and the
 * worker still the session asked about (pid and port now as when asked; pid 0: none). */
int worker_alive_counts(const PGresult *res, int asked_pid, int asked_port, int pid_now, int port_now);
/* Contact at sent_ms (monotonic): the deadline counts from the latest, never back. */
void worker_contact(struct relay *r, int64_t sent_ms);

/* session.c */
void worker_send_version(struct relay *r);

/* keep.c */
/* A new worker session: keep mode checks its premises on its server before W moves. */
void keep_session_new(struct relay *r);
/* keep's check of the proof's premises runs at the next turn. */
void keep_check_now(struct relay *r);
void keep_destroy(struct relay *r);
/* The last check of the proof's premises failed: the watermark stops. */
int keep_blocked(const struct relay *r);
/* A held partition's W as the relay knows it: 1 and *w; 0 when not known. */
int keep_w_known(const struct relay *r, int partition, int64_t *w);
int keep_check_due(const struct relay *r);
void keep_check_send(struct relay *r);
int keep_advance_due(const struct relay *r);
void keep_advance_send(struct relay *r);
/* A keep-mode mark's result: the count of rows it refused (their lease partition not held). */
long long keep_mark_result(struct relay *r, const PGresult *res);
void keep_published(struct relay *r, const PGresult *res);
void keep_forget_published(struct relay *r);
int keep_unsaved(const struct relay *r);
void keep_claim_w(const struct relay *r, const struct floor_claim *fc, struct strbuf *w);
void keep_claim_skip(const struct relay *r, struct strbuf *ids);
int keep_audit_due(const struct relay *r);
int64_t keep_audit_span(int64_t retained_ids, int retention_s, int period_ms);
void keep_audit_send(struct relay *r);

/* claim.c */
void claim_init(struct relay *r);
void claim_destroy(struct relay *r);
/* A new worker session: the floors' proof and the highest id claimed start over. */
void claim_session_new(struct relay *r);
/* The schema version found: the floors need the requeue count (5). */
void claim_schema(struct relay *r, int version);
int claim_floors_on(const struct relay *r);
int claim_quota(int limit, int nparts);
int claim_ready(const struct relay *r);
/* The floors' proof: due every FLOOR_PROBE_MS while running (schema 5 and later). */
int floor_probe_due(const struct relay *r);
void floor_probe_send(struct relay *r);
void claim_back_off(struct relay *r);
void claim_send(struct relay *r);
/* The claim's successful result (its worker statement's on_ok; unit tests call it too):
 * takes ownership of res, whose rows join the window as queued and which produce.c reads
 * through claim_rows.c; decides when to claim again (poll.c). */
void claim_result(struct relay *r, PGresult *res);

/* poll.c */
void poll_init(struct relay *r);
/* After a claim of rows rows with limit limit: 1 when the next claim goes at once; else
 * the poll timer (or the doorbell, or the next delivery report while isolating) brings it. */
int poll_after_claim(struct relay *r, int rows, int limit);
void poll_stop(struct relay *r);
/* The listener (re)connected: the doorbell must be armed again. */
void poll_listener_ready(struct relay *r);
/* The doorbell rang: claims come quickly again. */
void poll_doorbell_rang(struct relay *r);
int poll_arm_wanted(const struct relay *r);
void doorbell_send_arm(struct relay *r);

/* record.c */
void record_init(struct relay *r);
void record_stop(struct relay *r);
/* A row was acknowledged: the record's delay counts from the oldest waiting. */
void record_note_acked(struct relay *r);
int mark_due(struct relay *r);
void mark_send(struct relay *r);

/* claim_rows.c: the claim's side every file may call (it calls none). */
/* The floors' proof, and a partition's floor (0: its next claim reads from the bottom). */
int64_t claim_floors_proven(const struct relay *r);
uint32_t claim_floors_epoch(const struct relay *r);
int64_t claim_floor(const struct relay *r, int partition);
/* The claim given back: its rows not produced stay PENDING (below the floors, so the next
 * claim reads from the bottom). */
void claim_release(struct relay *r);
/* Rows were put back below the floors: the next claim reads every partition from the bottom. */
void claim_floors_reset(struct relay *r, const char *why);
/* The rows in flight at or below their partition's floor (only a claim from the bottom finds
 * them again): O(rows in flight). */
size_t claim_rows_below_floors(const struct relay *r);

/* A claim's result is there, rows of it perhaps still to produce. */
int claim_in_hand(const struct relay *r);
/* Exactly-once: more rows are on their way (sink_txn_hold): after a claim that came full,
 * the next one is under way, or due and free to go now (can_claim: not while the in-flight
 * window is full, a claim is in hand, or claims wait for a fence). */
int claim_more_coming(const struct relay *r, int can_claim);
/* Exactly-once: the claim in hand was sent in the producer's current session (always 1
 * otherwise); a claim of a session that is gone is not produced. */
int claim_of_session(const struct relay *r, int partition);
/* The cursor's row, and setting it back there: rows produced meanwhile are passed over. */
int claim_cursor_at(const struct relay *r);
void claim_cursor_back(struct relay *r, int at);
/* The row at the claim's cursor as the message mapping reads it (borrowed from the claim's
 * result: valid until the claim is released), with its window slot: 1; 0 when it is no
 * longer queued in the window (to be passed over) or no row is left. */
int claim_cursor_row(struct relay *r, struct outbox_row *row, struct inflight_row **slot);
/* The cursor to the next row. */
void claim_advance(struct relay *r);
/* Rows from the cursor on, the cursor's own among them (0: every row was passed). */
int claim_rows_left(const struct relay *r);
/* The next kick claims (rows are waiting to be claimed again). */
void claim_want(struct relay *r);
/* The rest of this claim's rows of key wait (a row of the key was parked: the poison
 * policy block); whether a key waits so. */
void claim_hold_key(struct relay *r, const char *key);
int claim_key_held(const struct relay *r, const char *key);
/* The partition's next claim reads it from the bottom (a lease just acquired: another relay
 * may have left rows anywhere in it). */
void claim_partition_from_bottom(struct relay *r, int partition);
/* Rows are claimed and published one at a time, isolating a rejected row: up to this id
 * (0: not isolating). */
int64_t claim_isolating(const struct relay *r);
/* Isolation goes on at least up to id. */
void claim_isolate_up_to(struct relay *r, int64_t id);
/* Isolation ends (why: for the log), if it was on. */
void claim_isolation_end(struct relay *r, const char *why);
/* Row id was delivered: while isolating, the next claim follows this report, and isolation
 * ends at its id. */
void claim_row_delivered(struct relay *r, int64_t id);

/* produce.c */
void produce_claimed(struct relay *r);
void produce_left(struct relay *r, struct inflight_row *row);
extern const struct sink_callbacks produce_sink_callbacks;

/* poison.c */
void poison_judge_failures(struct relay *r);
void poison_park_row(struct relay *r, struct inflight_row *slot, const struct outbox_row *row,
                     const char *reason);
void poison_send_update(struct relay *r);
void poison_destroy(struct relay *r);
/* Rows to write back (parked, or an attempt counted) before the next claim. */
int poison_updates_pending(const struct relay *r);
/* Dead-letter copies the broker has not acknowledged. */
int poison_dead_letters_pending(const struct relay *r);
void poison_init(struct relay *r);
/* A dead-letter copy's report (the sink's row id was -id). */
void poison_dead_letter_report(struct relay *r, int64_t id, int err);
/* After the producer was made anew: copies whose reports the old one never gave are sent again. */
void poison_dead_letters_resend(struct relay *r);

/* reset.c */
void reset_start(struct relay *r, const char *reason);
/* The producer failed for good: a reset that makes it anew. */
void reset_fatal(struct relay *r, const char *why);
/* A delivery succeeded while running: the reset backoff starts again from its base. */
void reset_delivery_ok(struct relay *r);
void reset_stop(struct relay *r);
void reset_advance(struct relay *r);
void reset_pause_topic(struct relay *r, const char *topic, int err);
void reset_init(struct relay *r);
int reset_send_note_failed(struct relay *r);

/* lease_view.c: the lease set read (it calls none). */
enum lease_state lease_state(const struct relay *r, int partition);
/* The outbox_lease header of a partition: "partition/token/relay name/pid". */
const char *lease_token(const struct relay *r, int partition);
/* Partitions held (in grace or active). */
int lease_held(const struct relay *r);

/* lease.c */
void lease_init(struct relay *r);
void lease_start(struct relay *r);
void lease_stop(struct relay *r);
void lease_destroy(struct relay *r);
/* Partitions in grace whose time has come become active; the active ones as an int2[]
 * literal appended to parts; how many (lease_rules.c's lease_activate on this relay's). */
int lease_activate_due(struct relay *r, struct strbuf *parts);

void lease_lose_all(struct relay *r, const char *why);
void lease_check_deadline(struct relay *r);
int lease_send_next(struct relay *r); /* 0 if a lease statement was sent, -1 if none */
void lease_drain_all(struct relay *r);
int lease_all_released(const struct relay *r);

/* eos.c */
/* Whether the group's rows may be claimed: its progress record recorded in this producer
 * session, which still stands (1 when off). */
static inline int eos_group_ready(const struct relay *r, int group)
{
    const struct eos_group *e = &r->eos.g[group];
    return !r->cfg->exactly_once ||
           (e->ready_epoch && !e->released && e->ready_epoch == sink_txn_epoch(r->sink, group));
}
/* Whether every lease partition of the group is active here. */
static inline int eos_group_held(const struct relay *r, int group)
{
    int size = eos_group_size(r->cfg);
    for (int p = group * size; p < (group + 1) * size; p++)
        if (lease_state(r, p) != LEASE_ACTIVE)
            return 0;
    return 1;
}
int eos_claims_allowed(const struct relay *r);
/* Asks the sink to fence and read a group's progress record once this relay holds it. */
void eos_tick(struct relay *r);
void eos_on_recovered(struct relay *r, int group, uint64_t epoch, const int64_t *ids,
                      char *const *event_ids, size_t n, const char *err);
int eos_recover_due(const struct relay *r);
void eos_recover_send(struct relay *r);
void eos_destroy(struct relay *r);

/* eos_tail.c: a row's record committed (it leaves the progress record once every standby has
 * it); a check of the standbys' positions is due, and sends it. */
void eos_tail_recorded(struct relay *r, int group, int64_t id);
int eos_tail_due(struct relay *r);
void eos_tail_send(struct relay *r);
void eos_tail_destroy(struct relay *r);

/* status.c */
void status_init(struct relay *r);
void status_start(struct relay *r);
void status_stop(struct relay *r);

#endif
