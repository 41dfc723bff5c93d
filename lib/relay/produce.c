/* Producing: hands the claimed rows to the sink in id order (until backpressure), and takes
 * its completions and fatal errors (loop thread); the sink classifies its errors as the
 * row's, the topic's, the producer's or nobody's in particular. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* A failed produce or delivery: record it on the row and start a reset. */
static void row_failed(struct relay *r, struct inflight_row *slot, int err,
                       const char *topic, int maybe_persisted, const char *verb)
{
    slot->err = err;
    slot->fail = sink_classify(r->sink, err);
    slot->maybe_persisted = maybe_persisted;
    window_set_state(&r->win, slot, ROW_FAILED);
    r->m.publish_failures_total[slot->fail]++;
    if (slot->fail == FAILURE_TOPIC && topic)
        reset_pause_topic(r, topic, err);
    char reason[512];
    snprintf(reason, sizeof(reason), "%s %s failed: %s", verb, topic ? topic : "?",
             sink_err_str(r->sink, err));
    reset_start(r, reason);
}

/* The row's message, into msg: 0; or -1 when the row can never be published as it is (a
 * payload over the sink's limit, a malformed row, a topic not allowed): parked with its
 * reason. */
static int build_message(struct relay *r, struct inflight_row *slot, struct outbox_row *row, struct message *msg)
{
    char reason[512];
    if (!row->payload && slot->bytes > sink_max_message_bytes(r->sink)) {
        snprintf(reason, sizeof(reason), "the payload (%lld bytes) is larger than %s (%lld); "
                 "it was never fetched", (long long)slot->bytes, r->sink->ops->max_message_name,
                 sink_max_message_bytes(r->sink));
        poison_park_row(r, slot, row, reason);
        return -1;
    }
    if (message_build_layout(row, &r->layout, msg, reason, sizeof(reason)) != 0) {
        poison_park_row(r, slot, row, reason);
        return -1;
    }
    if (!config_topic_allowed(r->cfg->topic_allow, msg->topic)) {
        snprintf(reason, sizeof(reason), "topic %s is not allowed by OUTBOX_TOPIC_ALLOW (%s)",
                 msg->topic, r->cfg->topic_allow[0] ? r->cfg->topic_allow : "any name not starting with '_'");
        message_destroy(msg);
        poison_park_row(r, slot, row, reason);
        return -1;
    }
    return 0;
}

/* Produces the claimed rows in id order while the mode is RUNNING, until the producer's
 * queue is full (resumed by the next delivery report) or a produce fails. Exactly-once with
 * several transaction groups: a group whose producer takes no more (its transaction ends)
 * holds back its own later rows only; the others' go on, and the next call starts at the
 * first row held back (rows produced meanwhile are passed over). Every row of a key is in
 * one group, so each key keeps its order. */
void produce_claimed(struct relay *r)
{
    if (!claim_in_hand(r) || r->mode != MODE_RUNNING)
        return;
    struct outbox_row row;
    struct inflight_row *slot;
    uint64_t full = 0; /* groups whose producer took no more in this call */
    int resume = -1, n_full = 0;
    for (; claim_rows_left(r) > 0 && r->mode == MODE_RUNNING; claim_advance(r)) {
        if (!claim_cursor_row(r, &row, &slot) || (full >> eos_group_of(r->cfg, slot->partition) & 1))
            continue;
        if (lease_state(r, slot->partition) != LEASE_ACTIVE || !claim_of_session(r, slot->partition)) {
            /* the lease is going or gone, or (exactly-once) the claim was sent in a producer
             * session that is gone, before the new one's progress record was recorded: the
             * rows stay PENDING */
            window_remove_one(&r->win, slot);
            continue;
        }
        if (claim_key_held(r, row.aggregate_id)) {
            window_remove_one(&r->win, slot); /* stays PENDING; the parked key holds it back */
            continue;
        }
        struct message msg;
        char reason[512];
        if (build_message(r, slot, &row, &msg) != 0)
            continue;
        message_add_relay_header(&msg, "outbox_lease", lease_token(r, slot->partition));
        msg.txn_group = eos_group_of(r->cfg, slot->partition); /* (exactly-once: its producer) */
        int kslot = kshare_slot(&r->kshare, msg.topic, row.aggregate_id, strlen(row.aggregate_id));
        int first;
        enum kshare_verdict verdict = kshare_admit(&r->kshare, kslot, row.aggregate_id, &first);
        if (verdict != KSHARE_ADMIT) {
            if (first)
                log_warn("kafka: partition %d of %s holds %d rows unacknowledged, its share of "
                         "the in-flight window (a partition without a leader?): rows of its keys "
                         "wait PENDING so that the other partitions keep flowing",
                         kshare_partition(kslot), msg.topic, kshare_inflight(&r->kshare, kslot));
            message_destroy(&msg);
            if (verdict == KSHARE_HOLD_ALL) { /* no room to hold its key: the rest waits */
                r->m.share_held_back_total += (uint64_t)claim_rows_left(r);
                claim_release(r);
                claim_back_off(r);
                return;
            }
            window_remove_one(&r->win, slot); /* stays PENDING; claimed again when it drains */
            r->m.share_held_back_total++;
            continue;
        }
        int err;
        enum sink_queued queued = sink_produce(r->sink, &msg, row.aggregate_id, row.payload,
                                               row.payload ? row.payload_len : 0, row.created_ms,
                                               row.id, &err);
        if (queued == SINK_FULL) { /* backpressure: resumes on the next delivery report */
            message_destroy(&msg);
            full |= 1ULL << msg.txn_group;
            resume = resume < 0 ? claim_cursor_at(r) : resume;
            if (++n_full == eos_groups(r->cfg))
                break;
            continue;
        }
        if (queued == SINK_UNFIT) {
            snprintf(reason, sizeof(reason), "the producer refuses the message (%zu bytes): %s",
                     row.payload_len, sink_err_str(r->sink, err));
            poison_park_row(r, slot, &row, reason);
        } else if (queued == SINK_FAILED) {
            row_failed(r, slot, err, msg.topic, 0, "produce to");
        } else {
            window_set_state(&r->win, slot, ROW_PRODUCED);
            slot->kslot = kslot;
            kshare_produced(&r->kshare, kslot, slot->bytes);
        }
        message_destroy(&msg);
    }
    if (resume >= 0)
        claim_cursor_back(r, resume); /* (the rows held back are still queued) */
    else if (claim_rows_left(r) == 0)
        claim_release(r);
}

/* A row left the producer (delivered, failed, or the producer was recreated). */
void produce_left(struct relay *r, struct inflight_row *row)
{
    int freed = kshare_left(&r->kshare, row->kslot, row->bytes);
    if (freed) {
        log_info("kafka: partition %d of %s drained; its %d held keys are claimed again",
                 kshare_partition(row->kslot), kshare_topic(&r->kshare, row->kslot), freed);
        claim_floors_reset(r, "held keys released"); /* their rows lie below the floors */
        claim_want(r);
    }
    row->kslot = -1;
}

/* ---- the sink's callbacks (loop thread, from sink_poll) ------------------------------- */

static void on_delivery(void *ctx, int64_t row_id, int err, const char *topic,
                        int maybe_persisted)
{
    struct relay *r = ctx;
    if (row_id < 0) { /* a dead-letter copy */
        poison_dead_letter_report(r, -row_id, err);
        relay_want_kick(r); /* a shutdown may wait for it */
        return;
    }
    struct inflight_row *row = window_find(&r->win, row_id);
    if (!row || row->state != ROW_PRODUCED) {
        log_warn("delivery: a report for row %lld that is not in flight", (long long)row_id);
        return;
    }
    produce_left(r, row);
    if (err) {
        log_debug("delivery: row %lld to %s failed: %s", (long long)row_id,
                  topic ? topic : "?", sink_err_str(r->sink, err));
        row_failed(r, row, err, topic, maybe_persisted, "delivery to");
        relay_want_kick(r);
        return;
    }
    window_set_state(&r->win, row, ROW_ACKED);
    record_note_acked(r);
    r->m.published_total++;
    histogram_observe(&r->m.latency, (double)(wall_ms() - row->created_ms) / 1000.0);
    claim_row_delivered(r, row->id);
#ifdef OUTBOX_TEST_HOOKS
    if (r->test_fatal_after > 0 && r->m.published_total == (uint64_t)r->test_fatal_after) {
        log_warn("test hook: injecting a fatal producer error");
        sink_test_fatal(r->sink);
    }
#endif
    reset_delivery_ok(r);
    relay_want_kick(r);
}

static void on_fatal(void *ctx, const char *reason)
{
    struct relay *r = ctx;
    char why[300];
    snprintf(why, sizeof(why), "fatal producer error: %s", reason);
    reset_fatal(r, why);
    relay_want_kick(r);
}

static void on_partitions(void *ctx, const char *topic, int count)
{
    struct relay *r = ctx;
    kshare_set_count(&r->kshare, topic, count);
}

static void on_recovered(void *ctx, int group, uint64_t epoch, const int64_t *ids, char *const *event_ids,
                         size_t n, const char *err)
{
    eos_on_recovered(ctx, group, epoch, ids, event_ids, n, err);
}

const struct sink_callbacks produce_sink_callbacks = {on_delivery, on_fatal, on_partitions, on_recovered};
