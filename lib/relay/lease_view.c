/* The lease set as the other files of the loop read it (relay_int.h): lease.c writes it, and
 * calls some of them (keep.c, reset.c), so its readers come here instead, a file that calls
 * none (test/circles.sh). */
#include "relay/relay_int.h"

enum lease_state lease_state(const struct relay *r, int partition)
{
    return r->lease.part[partition].state;
}

const char *lease_token(const struct relay *r, int partition)
{
    return r->lease.part[partition].token;
}

int lease_held(const struct relay *r)
{
    return lease_count_held(r->lease.part);
}
