/* Unit tests: a slow worker statement's proof of life (worker.c), no server: an answer
 * counts as contact only when it says the worker's backend is there and the worker is
 * still the session asked about; contact never moves back. */
#include <stdlib.h>
#include <string.h>

#include "loop_fixture.h"
#include "tap.h"

/* A one-row, one-column result holding v, as the question's answer (PQmakeEmptyPGresult
 * and PQsetvalue build it without a server). */
static PGresult *answer(const char *v)
{
    PGresult *res = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    PGresAttDesc col = {.name = "exists", .format = 0, .typid = 16, .typlen = 1, .atttypmod = -1};
    if (!res || !PQsetResultAttrs(res, 1, &col) || !PQsetvalue(res, 0, 0, (char *)v, (int)strlen(v)))
        abort();
    return res;
}

int main(void)
{
    PGresult *yes = answer("t"), *no = answer("f");
    PGresult *err = PQmakeEmptyPGresult(NULL, PGRES_FATAL_ERROR);
    is_int(worker_alive_counts(yes, 4242, 50000, 4242, 50000), 1, "seen, the same session: counts");
    is_int(worker_alive_counts(no, 4242, 50000, 4242, 50000), 0, "not seen: does not count");
    is_int(worker_alive_counts(yes, 4242, 50000, 4343, 50002), 0, "the worker reconnected since: does not count");
    is_int(worker_alive_counts(yes, 4242, 50000, 4242, 50001), 0, "the same pid, another port (pid reused): does not count");
    is_int(worker_alive_counts(yes, 0, 0, 0, 0), 0, "asked about no session: does not count");
    is_int(worker_alive_counts(yes, 4242, -1, 4242, -1), 1, "over a Unix socket (port -1): the pid decides");
    is_int(worker_alive_counts(err, 4242, 50000, 4242, 50000), 0, "the question failed: does not count");
    is_int(worker_alive_counts(NULL, 4242, 50000, 4242, 50000), 0, "the listen session lost: does not count");

    struct config cfg;
    memset(&cfg, 0, sizeof(cfg));
    struct relay *r = fixture_relay(&cfg);
    r->last_contact_ms = 1000;
    worker_contact(r, 900);
    is_int((int)r->last_contact_ms, 1000, "an earlier send time never moves contact back");
    worker_contact(r, 1500);
    is_int((int)r->last_contact_ms, 1500, "a later one moves it forward");
    PQclear(yes);
    PQclear(no);
    PQclear(err);
    free(r);
    return done();
}
