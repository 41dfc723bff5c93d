/* Unit tests: Kafka partitions' shares of the in-flight window (slots by the producer's
 * murmur2, rows and bytes shares, held keys, draining to half frees them, the cap). */
#include <stdio.h>
#include <string.h>

#include "../tools/murmur2.h"
#include "relay/kshare.h"
#include "sink/kafka.h"
#include "tap.h"

/* A key of topic t whose partition (of 6) is p, by the test suite's own murmur2. */
static const char *key_on(int p, int nth)
{
    static char buf[32];
    for (int i = 0, seen = 0;; i++) {
        snprintf(buf, sizeof(buf), "k%d", i);
        if (kafka_key_partition(buf, strlen(buf), 6) == p && seen++ == nth)
            return buf;
    }
}

int main(void)
{
    struct kshare ks;
    int first;
    kshare_init(&ks, 2, 1000, sink_kafka_partition); /* the Kafka sink's own partitioner */
    is_int(kshare_slot(&ks, "t", "k1", 2), -1, "unknown topic: no slot");
    is_int(kshare_admit(&ks, -1, "k1", &first), KSHARE_ADMIT, "no slot: admitted");
    kshare_set_count(&ks, "t", 6);
    for (int i = 0; i < 20; i++) {
        char k[8];
        snprintf(k, sizeof(k), "k%d", i);
        if (kshare_partition(kshare_slot(&ks, "t", k, strlen(k))) != kafka_key_partition(k, strlen(k), 6))
            ok(0, "slot of %s differs from the Java client's partition", k);
    }
    ok(1, "slots follow the Java client's murmur2 partitioner");

    char a[32], b[32], c[32];
    snprintf(a, sizeof(a), "%s", key_on(0, 0));
    snprintf(b, sizeof(b), "%s", key_on(0, 1));
    snprintf(c, sizeof(c), "%s", key_on(3, 0));
    int s0 = kshare_slot(&ks, "t", a, strlen(a)), s3 = kshare_slot(&ks, "t", c, strlen(c));
    is_int(kshare_slot(&ks, "t", b, strlen(b)), s0, "two keys on partition 0");
    is_str(kshare_topic(&ks, s0), "t", "slot names its topic");

    is_int(kshare_admit(&ks, s0, a, &first), KSHARE_ADMIT, "first row admitted");
    kshare_produced(&ks, s0, 10);
    is_int(kshare_admit(&ks, s0, a, &first), KSHARE_ADMIT, "second row admitted");
    kshare_produced(&ks, s0, 10);
    is_int(kshare_inflight(&ks, s0), 2, "two rows in the producer");
    is_int(kshare_admit(&ks, s0, b, &first), KSHARE_HOLD, "the share is full: held");
    ok(first, "the partition's first hold is flagged (logged once)");
    is_int(kshare_admit(&ks, s0, a, &first), KSHARE_HOLD, "another key of the full partition: held");
    ok(!first, "second hold not flagged");
    is_int(kshare_admit(&ks, s0, b, &first), KSHARE_HOLD, "a held key stays held");
    is_int(ks.n_held, 2, "two keys held, each once");
    is_int(kshare_admit(&ks, s3, c, &first), KSHARE_ADMIT, "other partitions are not limited");
    struct strbuf sb;
    strbuf_init(&sb);
    kshare_held_literal(&ks, &sb);
    char wantbuf[80];
    const char *want = wantbuf;
    snprintf(wantbuf, sizeof(wantbuf), "{\"%s\",\"%s\"}", b, a);
    is_str(sb.buf, want, "held keys as a text[] literal for the claim");

    is_int(kshare_left(&ks, s0, 10), 2, "drained to half the share: both held keys freed");
    is_int(ks.n_held, 0, "nothing held");
    is_int(kshare_admit(&ks, s0, b, &first), KSHARE_ADMIT, "the freed key is admitted again");

    /* bytes: a share of 1000 bytes is full with one 1500-byte row */
    kshare_left(&ks, s0, 10);
    kshare_produced(&ks, s0, 1500);
    is_int(kshare_admit(&ks, s0, a, &first), KSHARE_HOLD, "the bytes share is full: held");
    kshare_left(&ks, s0, 1500);
    is_int(ks.n_held, 0, "freed when the bytes drain");

    /* the cap on held keys: beyond it the rest of the claim waits */
    kshare_produced(&ks, s0, 1);
    kshare_produced(&ks, s0, 1);
    char k[32];
    for (int i = 0; i < KSHARE_MAX_HELD; i++) {
        snprintf(k, sizeof(k), "held%d", i);
        kshare_admit(&ks, s0, k, &first);
    }
    is_int(ks.n_held, KSHARE_MAX_HELD, "held up to the cap");
    is_int(kshare_admit(&ks, s0, "one-more", &first), KSHARE_HOLD_ALL, "no room: the rest waits");
    is_int(kshare_admit(&ks, s0, "held7", &first), KSHARE_HOLD, "a held key is still found");

    /* a producer recreated holds nothing */
    kshare_clear(&ks);
    is_int(kshare_inflight(&ks, s0), 0, "cleared counts");
    is_int(ks.n_held, 0, "cleared keys");

    /* partition count changes: slots of rows in flight stay valid */
    kshare_produced(&ks, s0, 1);
    kshare_set_count(&ks, "t", 3);
    is_int(kshare_inflight(&ks, s0), 1, "a row in flight keeps its slot after a change");
    is_int(kshare_left(&ks, s0, 1), 0, "and leaves it");
    kshare_set_count(&ks, "bad", 0);
    is_int(kshare_slot(&ks, "bad", "x", 1), -1, "no partition count: no slot");

    strbuf_destroy(&sb);
    kshare_destroy(&ks);
    return done();
}
