/* The relay's loop without a server, for its unit tests (test_claim.c, test_produce.c,
 * test_record.c): a relay to drive, and a claim's result made by hand.
 *
 * fixture_claim: rows 1..n with the claim's columns (outbox.h, enum claim_col). Row i: lease
 * partition i % 2, key k(i-1 % 3), payload "{}" of 2 bytes (with big_row, that row has no
 * payload and 5,000 bytes: never fetched, over a sink's limit), attempts 0, requeue count
 * `requeued`. Caller frees (PQclear), or the claim does. */
#ifndef OUTBOX_TEST_LOOP_FIXTURE_H
#define OUTBOX_TEST_LOOP_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "relay/relay_int.h"

#define FIXTURE_COLUMNS (CLAIM_REQUEUED + 1)

static inline void fixture_kick_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
}

/* A running relay on the default loop with cfg (borrowed, zeroed by the caller then set as
 * the test needs); kicks are asked for and never run. Caller frees. */
static inline struct relay *fixture_relay(const struct config *cfg)
{
    struct relay *r = xcalloc(1, sizeof(*r));
    r->cfg = cfg;
    r->loop = EV_DEFAULT;
    ev_prepare_init(&r->kick_prepare, fixture_kick_cb);
    r->mode = MODE_RUNNING;
    return r;
}

static inline PGresult *fixture_claim(int n, int big_row, long long requeued)
{
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    PGresAttDesc cols[FIXTURE_COLUMNS];
    static char names[FIXTURE_COLUMNS][8];
    memset(cols, 0, sizeof(cols));
    for (int c = 0; c < FIXTURE_COLUMNS; c++) {
        snprintf(names[c], sizeof(names[c]), "c%d", c);
        cols[c].name = names[c];
        cols[c].typid = 25;
        cols[c].typlen = -1;
        cols[c].atttypmod = -1;
    }
    PQsetResultAttrs(res, FIXTURE_COLUMNS, cols);
    for (int i = 0; i < n; i++) {
        int id = i + 1, big = id == big_row;
        char s_id[16], key[16], ev[48], part[8], bytes[16], req[24];
        snprintf(s_id, sizeof(s_id), "%d", id);
        snprintf(key, sizeof(key), "k%d", i % 3);
        snprintf(ev, sizeof(ev), "00000000-0000-0000-0000-%012d", id);
        snprintf(part, sizeof(part), "%d", id % 2);
        snprintf(bytes, sizeof(bytes), "%d", big ? 5000 : 2);
        snprintf(req, sizeof(req), "%lld", requeued);
        const char *v[FIXTURE_COLUMNS] = {
            [CLAIM_ID] = s_id, [CLAIM_EVENT_ID] = ev, [CLAIM_AGGREGATE_TYPE] = "order",
            [CLAIM_AGGREGATE_ID] = key, [CLAIM_EVENT_TYPE] = "created", [CLAIM_PAYLOAD] = big ? NULL : "{}",
            [CLAIM_CREATED_MS] = "1000", [CLAIM_ATTEMPTS] = "0", [CLAIM_LEASE_PARTITION] = part,
            [CLAIM_PAYLOAD_BYTES] = bytes, [CLAIM_REQUEUED] = req};
        for (int c = 0; c < FIXTURE_COLUMNS; c++)
            PQsetvalue(res, i, c, (char *)(v[c] ? v[c] : NULL), v[c] ? (int)strlen(v[c]) : -1);
    }
    return res;
}

#endif
