/* The claim's side that other files call (relay_int.h): a cursor over the claim's result in
 * id order (produce.c reads its rows through it, never the result itself), the claim given
 * back, the floors sent to the bottom, the claim wanted, isolation (one row at a time), and
 * the keys held back in the claim. It calls no other file of the loop, so that every concern
 * may call it (test/circles.sh). */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "relay/relay_int.h"

/* Row i of the claim as the message mapping reads it (borrowed from the claim's result, a
 * bytea payload from its decoded bytes); the numbers were read once, into its window slot,
 * when it was claimed. */
static struct outbox_row claim_row(const struct relay *r, int i, const struct inflight_row *slot)
{
    const PGresult *res = r->claim.res;
    struct outbox_row row = {
        .id = slot->id,
        .event_id = PQgetvalue(res, i, CLAIM_EVENT_ID),
        .aggregate_type = PQgetvalue(res, i, CLAIM_AGGREGATE_TYPE),
        .aggregate_id = PQgetvalue(res, i, CLAIM_AGGREGATE_ID),
        .event_type = PQgetvalue(res, i, CLAIM_EVENT_TYPE),
        .topic = PQgetisnull(res, i, CLAIM_TOPIC) ? NULL : PQgetvalue(res, i, CLAIM_TOPIC),
        .payload = PQgetisnull(res, i, CLAIM_PAYLOAD) ? NULL : PQgetvalue(res, i, CLAIM_PAYLOAD),
        .payload_len = (size_t)PQgetlength(res, i, CLAIM_PAYLOAD),
        .headers = PQgetisnull(res, i, CLAIM_HEADERS) ? NULL : PQgetvalue(res, i, CLAIM_HEADERS),
        .created_ms = slot->created_ms,
        .attempts = slot->attempts,
    };
    if (r->claim.payloads.buf)
        row.payload = pg_bytes_get(&r->claim.payloads, res, CLAIM_PAYLOAD, i, &row.payload_len);
    return row;
}

int claim_in_hand(const struct relay *r)
{
    return r->claim.res != NULL;
}

int claim_of_session(const struct relay *r, int partition)
{
    int g = eos_group_of(r->cfg, partition);
    return !r->cfg->exactly_once || r->claim.eos_epoch[g] == sink_txn_epoch(r->sink, g);
}

int claim_cursor_row(struct relay *r, struct outbox_row *row, struct inflight_row **slot)
{
    const PGresult *res = r->claim.res;
    if (!res || r->claim.next >= PQntuples(res))
        return 0;
    struct inflight_row *s = window_find(&r->win, pg_int(PQgetvalue(res, r->claim.next, CLAIM_ID)));
    if (!s || s->state != ROW_QUEUED)
        return 0; /* no longer queued (a reset, a lost lease): passed over */
    *slot = s;
    *row = claim_row(r, r->claim.next, s);
    return 1;
}

void claim_advance(struct relay *r)
{
    if (r->claim.res && r->claim.next < PQntuples(r->claim.res))
        r->claim.next++;
}

int claim_cursor_at(const struct relay *r)
{
    return r->claim.next;
}

void claim_cursor_back(struct relay *r, int at)
{
    if (at >= 0 && at < r->claim.next)
        r->claim.next = at;
}

int claim_rows_left(const struct relay *r)
{
    return r->claim.res ? PQntuples(r->claim.res) - r->claim.next : 0;
}

void claim_want(struct relay *r)
{
    r->claim.wanted = 1;
}

int64_t claim_isolating(const struct relay *r)
{
    return r->claim.isolate_until_id;
}

void claim_isolate_up_to(struct relay *r, int64_t id)
{
    if (id > r->claim.isolate_until_id)
        r->claim.isolate_until_id = id;
}

void claim_isolation_end(struct relay *r, const char *why)
{
    if (!r->claim.isolate_until_id)
        return;
    log_info("relay: %s; back to batches", why);
    r->claim.isolate_until_id = 0;
}

void claim_row_delivered(struct relay *r, int64_t id)
{
    if (!r->claim.isolate_until_id)
        return;
    if (id >= r->claim.isolate_until_id) {
        log_info("relay: isolation done at row %lld; back to batches", (long long)id);
        r->claim.isolate_until_id = 0;
    }
    r->claim.wanted = 1; /* one row at a time: the next claim follows this report */
}

void claim_hold_key(struct relay *r, const char *key)
{
    struct claim_state *c = &r->claim;
    c->blocked_keys = xrealloc(c->blocked_keys, (c->n_blocked_keys + 1) * sizeof(char *));
    c->blocked_keys[c->n_blocked_keys++] = xstrdup(key);
}

int claim_key_held(const struct relay *r, const char *key)
{
    for (size_t i = 0; i < r->claim.n_blocked_keys; i++)
        if (strcmp(r->claim.blocked_keys[i], key) == 0)
            return 1;
    return 0;
}

void claim_partition_from_bottom(struct relay *r, int partition)
{
    r->claim.floors.at[partition] = 0;
}

void claim_floors_reset(struct relay *r, const char *why)
{
    floors_reset(&r->claim.floors);
    r->m.floor_resets_total++;
    log_debug("claim: floors back to the bottom (%s)", why);
}

size_t claim_rows_below_floors(const struct relay *r)
{
    size_t below = 0;
    for (size_t i = 0; i < r->win.n; i++) {
        int64_t at = r->claim.floors.at[r->win.rows[i].partition];
        if (at > 0 && r->win.rows[i].id <= at)
            below++;
    }
    return below;
}

/* Rows claimed but not produced go back: they stay PENDING and are claimed again (below
 * the floors: the next claim reads from the bottom). */
void claim_release(struct relay *r)
{
    if (r->claim.res) {
        if (r->claim.next < PQntuples(r->claim.res))
            claim_floors_reset(r, "claimed rows put back");
        PQclear(r->claim.res);
        r->claim.res = NULL;
        pg_bytes_free(&r->claim.payloads);
    }
    for (size_t i = 0; i < r->claim.n_blocked_keys; i++)
        free(r->claim.blocked_keys[i]);
    r->claim.n_blocked_keys = 0;
    window_remove_state(&r->win, ROW_QUEUED);
}

int64_t claim_floors_proven(const struct relay *r)
{
    return r->claim.floors.proven;
}

uint32_t claim_floors_epoch(const struct relay *r)
{
    return r->claim.floors.epoch;
}

int64_t claim_floor(const struct relay *r, int partition)
{
    return r->claim.floors.at[partition];
}
