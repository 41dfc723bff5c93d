/* The claimed rows, for the producer (relay_int.h): a cursor over the claim's result, in id
 * order. The claim (claim.c) owns the result; produce.c reads its rows through this file and
 * never the result itself. */
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

int claim_rows_left(const struct relay *r)
{
    return r->claim.res ? PQntuples(r->claim.res) - r->claim.next : 0;
}

void claim_want(struct relay *r)
{
    r->claim.wanted = 1;
}

void claim_note_acked(struct relay *r)
{
    if (!r->claim.acked_since_ms)
        r->claim.acked_since_ms = mono_ms();
}
