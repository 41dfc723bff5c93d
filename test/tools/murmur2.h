/* Kafka's murmur2 key hash, written from the Java client's documented algorithm
 * (seed 0x9747b28c, m 0x5bd1e995, r 24), kept independent of librdkafka so tests can
 * check where librdkafka's murmur2_random partitioner put each key. */
#ifndef RELAYTEST_MURMUR2_H
#define RELAYTEST_MURMUR2_H

#include <stddef.h>
#include <stdint.h>

static inline uint32_t kafka_murmur2(const void *data, size_t len)
{
    const uint32_t m = 0x5bd1e995;
    const int r = 24;
    const unsigned char *p = data;
    uint32_t h = 0x9747b28cu ^ (uint32_t)len;
    size_t n4 = len / 4;
    for (size_t i = 0; i < n4; i++) {
        uint32_t k = (uint32_t)p[i * 4] | (uint32_t)p[i * 4 + 1] << 8 |
                     (uint32_t)p[i * 4 + 2] << 16 | (uint32_t)p[i * 4 + 3] << 24;
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *tail = p + n4 * 4;
    switch (len & 3) {
    case 3: h ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: h ^= tail[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* The partition the Java client's default partitioner picks for a non-null key. */
static inline int32_t kafka_key_partition(const void *key, size_t len, int32_t partitions)
{
    return (int32_t)((kafka_murmur2(key, len) & 0x7fffffff) % (uint32_t)partitions);
}

#endif
