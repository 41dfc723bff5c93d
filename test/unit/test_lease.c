/* Unit tests: lease partition rules (balance target, scan parsing, which partitions to
 * acquire and to hand back, grace periods, clean takeovers). */
#include <string.h>

#include "relay/lease.h"
#include "tap.h"

static void set_all(struct lease *l, enum lease_state s)
{
    for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
        l[p] = (struct lease){.state = s};
}

int main(void)
{
    is_int(lease_balance_target(1), 64, "one relay holds all 64");
    is_int(lease_balance_target(0), 64, "no count (scan failed): as one relay");
    is_int(lease_balance_target(2), 32, "two: 32 each");
    is_int(lease_balance_target(3), 22, "three: 22 each (a ceiling: 66 >= 64 covers every partition)");
    ok(lease_balance_target(5) * 5 >= 64 && lease_balance_target(7) * 7 >= 64, "targets cover all partitions");
    is_int(lease_balance_target(100), 1, "more relays than partitions: one each");

    int locked[OUTBOX_LEASE_PARTITIONS];
    is_int(lease_parse_locked("{3,17,63}", locked), 3, "three locked");
    ok(locked[3] && locked[17] && locked[63] && !locked[0] && !locked[4], "the right ones");
    is_int(lease_parse_locked("{}", locked), 0, "none");
    is_int(lease_parse_locked("{5,64,-1,5,1000}", locked), 1, "out of range and repeats ignored");
    ok(locked[5], "5 locked");
    is_int(lease_parse_locked("", locked), 0, "empty text");

    struct lease l[OUTBOX_LEASE_PARTITIONS];
    set_all(l, LEASE_FREE);
    l[0].state = LEASE_ACTIVE;
    l[1].state = LEASE_GRACE;
    l[2].state = LEASE_DRAINING;
    is_int(lease_count_held(l), 2, "ACTIVE and GRACE count as held, DRAINING does not");

    lease_parse_locked("{3,4}", locked);
    struct strbuf sb;
    strbuf_init(&sb);
    is_int(lease_pick_acquire(l, locked, 3, &sb), 3, "three to acquire");
    is_str(sb.buf, "{5,6,7}", "lowest free partitions nobody locks (0-2 ours, 3-4 locked)");
    strbuf_reset(&sb);
    lease_parse_locked("{}", locked);
    is_int(lease_pick_acquire(l, locked, 100, &sb), 61, "at most every free partition");

    set_all(l, LEASE_ACTIVE);
    l[63].state = LEASE_GRACE;
    l[62].state = LEASE_DRAINING;
    is_int(lease_pick_handback(l, 3, 1), 3, "hand back three");
    ok(l[63].state == LEASE_DRAINING && l[61].state == LEASE_DRAINING && l[60].state == LEASE_DRAINING &&
       l[59].state == LEASE_ACTIVE, "the highest held ones (62 was already draining)");
    is_int(lease_count_held(l), 60, "60 held");
    /* groups of 16: only whole ones, every partition held, the highest first */
    set_all(l, LEASE_ACTIVE);
    for (int p = 56; p < 64; p++)
        l[p].state = LEASE_FREE; /* group 3 half held (still being taken) */
    is_int(lease_pick_handback(l, 40, 16), 32, "two whole groups of 16 for 40");
    ok(l[47].state == LEASE_DRAINING && l[16].state == LEASE_DRAINING && l[15].state == LEASE_ACTIVE &&
       l[48].state == LEASE_ACTIVE, "groups 2 and 1; group 3 (partly held) and group 0 kept");
    is_int(lease_pick_handback(l, 15, 16), 0, "less than a group: nothing");

    set_all(l, LEASE_FREE);
    l[1] = (struct lease){.state = LEASE_GRACE, .publish_from_ms = 500};
    l[2] = (struct lease){.state = LEASE_ACTIVE};
    l[3] = (struct lease){.state = LEASE_DRAINING};
    strbuf_reset(&sb);
    is_int(lease_activate(l, 499, &sb), 1, "in grace until its time");
    is_str(sb.buf, "{2}", "only the active one is claimed");
    strbuf_reset(&sb);
    is_int(lease_activate(l, 500, &sb), 2, "grace over at 500");
    is_str(sb.buf, "{1,2}", "draining partitions are not claimed");
    ok(l[1].state == LEASE_ACTIVE, "now ACTIVE");

    ok(lease_takeover_clean(NULL, NULL, "me/1"), "never held: clean");
    ok(lease_takeover_clean("released", "other/2", "me/1"), "released by its holder: clean");
    ok(!lease_takeover_clean("acquired", "other/2", "me/1"), "held by another that may still publish: grace");
    ok(!lease_takeover_clean("lost", "other/2", "me/1"), "lost by another: grace");
    ok(lease_takeover_clean("lost", "me/1", "me/1"), "lost by this very process: clean");
    strbuf_destroy(&sb);
    /* Groups (exactly-once: the table moves whole): a group's first partition is taken
     * before the rest, and the rest only by whoever holds the first. */
    {
        struct lease g[OUTBOX_LEASE_PARTITIONS];
        int lk[OUTBOX_LEASE_PARTITIONS] = {0}, fg[OUTBOX_LEASE_PARTITIONS] = {0};
        unsigned char before[OUTBOX_LEASE_PARTITIONS] = {0};
        struct strbuf acq;
        int back = 0;
        set_all(g, LEASE_FREE);
        strbuf_init(&acq);
        is_int(lease_decide(g, lk, fg, before, 64, 64, &acq, &back), 1, "one group, nothing held: its first alone");
        is_str(acq.buf, "{0}", "partition 0 first");
        lk[0] = 1;
        memset(before, 1, sizeof(before)); /* the others unowned for two scans: liveness would take them */
        strbuf_reset(&acq);
        is_int(lease_decide(g, lk, fg, before, 64, 64, &acq, &back), 0,
               "another relay holds the first: nothing, not even long-unowned partitions");
        lk[0] = 0;
        lk[5] = 1; /* still held by a relay going away */
        g[0].state = LEASE_ACTIVE;
        memset(before, 0, sizeof(before));
        strbuf_reset(&acq);
        is_int(lease_decide(g, lk, fg, before, 64, 64, &acq, &back), 62, "holding the first: every free one of the group");
        ok(strncmp(acq.buf, "{1,2,3,4,6,", 11) == 0, "the locked one left for a later scan (%s)", acq.buf);
        is_int(back, 0, "nothing handed back");
        set_all(g, LEASE_FREE);
        lk[5] = 0;
        memset(before, 0, sizeof(before)); /* (the last decision noted what was free then) */
        strbuf_reset(&acq);
        is_int(lease_decide(g, lk, fg, before, 32, 1, &acq, &back), 32, "group 1: partitions alone, up to the target");
        /* OUTBOX_TRANSACTION_GROUPS=4: groups of 16; two relays, a target of 32 each */
        set_all(g, LEASE_FREE);
        memset(before, 0, sizeof(before));
        memset(lk, 0, sizeof(lk));
        strbuf_reset(&acq);
        is_int(lease_decide(g, lk, fg, before, 32, 16, &acq, &back), 2, "groups of 16, nothing held: two groups' first");
        is_str(acq.buf, "{0,16}", "the first partitions of as many groups as the target holds");
        for (int p = 0; p < OUTBOX_LEASE_PARTITIONS; p++)
            lk[p] = p < 16 || p == 32; /* another relay holds group 0 whole and group 2's first */
        g[16].state = LEASE_ACTIVE;
        lk[16] = 1;
        memset(before, 1, sizeof(before)); /* everything free unowned for two scans */
        strbuf_reset(&acq);
        lease_decide(g, lk, fg, before, 32, 16, &acq, &back);
        ok(strstr(acq.buf, "17,") && !strstr(acq.buf, ",33") && strstr(acq.buf, "48"),
           "the rest of its own group and a free group's first, never group 2's other partitions (%s)",
           acq.buf);
        memset(before, 0, sizeof(before));
        strbuf_reset(&acq);
        lease_decide(g, lk, fg, before, 16, 16, &acq, &back);
        is_str(acq.buf, "{17,18,19,20,21,22,23,24,25,26,27,28,29,30,31}",
               "at the target: the rest of its group alone, no other group's first");
        strbuf_destroy(&acq);
    }
    return done();
}
