/* Unit tests: the statements a session prepared, found by text and parameter count, named
 * uniquely, forgotten one by one or all at once, and full at PREPARED_MAX. */
#include <stdio.h>
#include <string.h>

#include "pg/prepared.h"
#include "tap.h"

int main(void)
{
    struct prepared p;
    memset(&p, 0, sizeof(p));
    int free_slot;
    is_int(prepared_find(&p, "SELECT 1", 0, &free_slot), -1, "an empty cache holds nothing");
    is_int(free_slot, 0, "the first free slot");
    prepared_add(&p, free_slot, "SELECT 1", 0);
    ok(prepared_held(&p, 0), "slot 0 taken");
    is_int(prepared_find(&p, "SELECT 1", 0, &free_slot), 0, "found by its text");
    is_int(prepared_find(&p, "SELECT 1", 1, &free_slot), -1, "another parameter count is another statement");
    is_int(free_slot, 1, "the next free slot");
    is_int(prepared_find(&p, "SELECT 12", 0, &free_slot), -1, "a longer text is another statement");

    char a[32], b[32];
    prepared_name(&p, 0, a, sizeof(a));
    ok(strncmp(a, "outbox_", 7) == 0, "named outbox_...: %s", a);
    prepared_forget(&p, 0);
    ok(!prepared_held(&p, 0), "forgotten");
    prepared_forget(&p, 0);
    ok(!prepared_held(&p, 0), "forgetting a free slot is a no-op");
    prepared_add(&p, 0, "SELECT 1", 0);
    prepared_name(&p, 0, b, sizeof(b));
    ok(strcmp(a, b) != 0, "prepared again under a new name (%s, then %s)", a, b);

    char sql[32];
    for (int i = 1; i < PREPARED_MAX; i++) {
        snprintf(sql, sizeof(sql), "SELECT %d", i + 100);
        prepared_find(&p, sql, 0, &free_slot);
        prepared_add(&p, free_slot, sql, 0);
    }
    is_int(prepared_find(&p, "SELECT -1", 0, &free_slot), -1, "a new text when full");
    is_int(free_slot, -1, "full: no free slot (the text runs unprepared)");
    snprintf(sql, sizeof(sql), "SELECT %d", PREPARED_MAX - 1 + 100);
    is_int(prepared_find(&p, sql, 0, &free_slot), PREPARED_MAX - 1, "the last one found");
    prepared_forget_all(&p);
    for (int i = 0, any = 0; i <= PREPARED_MAX; i++) {
        if (i == PREPARED_MAX) {
            ok(!any, "forget_all frees every slot");
            break;
        }
        any |= prepared_held(&p, i);
    }
    return done();
}
