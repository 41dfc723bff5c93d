/* The statements one PostgreSQL session has prepared (prepared.h). */
#include "pg/prepared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

/* Statement names: a number drawn once per process and a counter of the process, so that a
 * server session reused through a pooler (whose reset query may not deallocate) never holds
 * one of these names from another connection or process. Loop thread only. */
static unsigned prepared_nonce, prepared_counter;

int prepared_find(const struct prepared *p, const char *sql, int nparams, int *free_slot)
{
    size_t len = strlen(sql);
    *free_slot = -1;
    for (int i = 0; i < PREPARED_MAX; i++) {
        const struct prepared_entry *e = &p->e[i];
        if (!e->sql) {
            if (*free_slot < 0)
                *free_slot = i;
            continue;
        }
        if (e->len == len && e->nparams == nparams && memcmp(e->sql, sql, len) == 0)
            return i;
    }
    return -1;
}

void prepared_add(struct prepared *p, int slot, const char *sql, int nparams)
{
    struct prepared_entry *e = &p->e[slot];
    free(e->sql);
    e->sql = xstrdup(sql);
    e->len = strlen(sql);
    e->nparams = nparams;
    if (!prepared_nonce) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        prepared_nonce = ((unsigned)getpid() * 2654435761u) ^ (unsigned)ts.tv_nsec ^ (unsigned)ts.tv_sec;
        prepared_nonce |= 1;
    }
    e->serial = ++prepared_counter;
}

int prepared_held(const struct prepared *p, int slot)
{
    return slot >= 0 && slot < PREPARED_MAX && p->e[slot].sql != NULL;
}

void prepared_name(const struct prepared *p, int slot, char *name, size_t size)
{
    snprintf(name, size, "outbox_%08x_%u", prepared_nonce, p->e[slot].serial);
}

void prepared_forget(struct prepared *p, int slot)
{
    free(p->e[slot].sql);
    p->e[slot].sql = NULL;
}

void prepared_forget_all(struct prepared *p)
{
    for (int i = 0; i < PREPARED_MAX; i++)
        prepared_forget(p, i);
}
