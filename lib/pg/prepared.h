/* The statements one PostgreSQL session has prepared, by text (pgconn.c). A statement is
 * parsed, analysed and (once PostgreSQL settles on a generic plan) planned once per session
 * instead of on every call: the claim's planning cost more than its execution at a steady
 * rate (docs/PERFORMANCE.md). Forgotten at every new connection; an entry is forgotten too when its preparation failed,
 * or its execution because a changed table made PostgreSQL refuse the cached plan or the
 * statement is gone: the next call prepares the text again under a new name. Other errors
 * (a timeout, a conflict) leave it prepared. When full, further texts run unprepared. */
#ifndef OUTBOX_PREPARED_H
#define OUTBOX_PREPARED_H

#include <stddef.h>

#define PREPARED_MAX 48

struct prepared_entry {
    char *sql; /* NULL: a free slot */
    size_t len;
    int nparams;
    unsigned serial; /* in its name (prepared_name) */
};
struct prepared {
    struct prepared_entry e[PREPARED_MAX]; /* zeroed: all free */
};

/* The slot holding sql with nparams parameters, or -1; then *free_slot is the first free
 * slot, or -1 when all are taken (the text runs unprepared). */
int prepared_find(const struct prepared *p, const char *sql, int nparams, int *free_slot);
/* Puts sql (copied) in a free slot, under a name no earlier statement of this process had. */
void prepared_add(struct prepared *p, int slot, const char *sql, int nparams);
/* Whether slot holds a statement. */
int prepared_held(const struct prepared *p, int slot);
/* The slot's statement name, "outbox_<process nonce>_<serial>" (size 32 is enough). */
void prepared_name(const struct prepared *p, int slot, char *name, size_t size);
/* The slot is free again (a no-op on a free slot); forget_all: every slot (a new session). */
void prepared_forget(struct prepared *p, int slot);
void prepared_forget_all(struct prepared *p);

#endif
