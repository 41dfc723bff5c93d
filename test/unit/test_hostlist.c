/* Unit tests: a multi-host DSN's host list and its rotation (pgconn.c starts each attempt at
 * the host after the one that did not answer). */
#include <stdlib.h>

#include "pg/hostlist.h"
#include "tap.h"

static void rotated_is(char **items, int n, int first, const char *want)
{
    char *got = hostlist_rotated(items, n, first);
    is_str(got, want, "rotated to start at %d", first);
    free(got);
}

int main(void)
{
    struct hostlist hl;

    hostlist_init(&hl, "host=db1 dbname=app");
    is_int(hl.n, 0, "one host: nothing to rotate");
    is_int(hl.timeout_s, HOSTLIST_CONNECT_TIMEOUT_S, "default per-host timeout");
    hostlist_destroy(&hl);

    hostlist_init(&hl, "host=a,b,c port=5432 dbname=app connect_timeout=7");
    is_int(hl.n, 3, "three hosts");
    ok(hl.host && !hl.hostaddr && !hl.port, "one port for every host is not rotated");
    is_int(hl.timeout_s, 7, "the DSN's connect_timeout");
    rotated_is(hl.host, hl.n, 0, "a,b,c");
    rotated_is(hl.host, hl.n, 1, "b,c,a");
    rotated_is(hl.host, hl.n, 2, "c,a,b");
    hostlist_destroy(&hl);

    hostlist_init(&hl, "postgresql://u@a:5433,b:5434/app?connect_timeout=1");
    is_int(hl.n, 2, "a URI's two hosts");
    ok(hl.port != NULL, "a port per host is rotated with them");
    if (hl.port)
        rotated_is(hl.port, hl.n, 1, "5434,5433");
    is_int(hl.timeout_s, 2, "connect_timeout below libpq's minimum of 2 s is raised to it");
    hostlist_destroy(&hl);

    hostlist_init(&hl, "hostaddr=10.0.0.1,10.0.0.2 port=1,2");
    is_int(hl.n, 2, "hostaddr alone sets the list");
    ok(!hl.host && hl.hostaddr && hl.port, "hostaddr and ports kept");
    hostlist_destroy(&hl);

    hostlist_init(&hl, "host=a,b port=1,2,3");
    is_int(hl.n, 2, "two hosts");
    ok(hl.port == NULL, "a port list of another length is not rotated (libpq reports it)");
    hostlist_destroy(&hl);

    hostlist_init(&hl, "host='unterminated");
    is_int(hl.n, 0, "a DSN libpq cannot parse: nothing to rotate");
    hostlist_destroy(&hl);
    return done();
}
