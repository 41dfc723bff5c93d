/* What the tests' two checkers (outbox-check for Kafka, amqp-check for RabbitMQ) read the
 * same way from a message: its bytes against an expected value in hex, and the relay's
 * outbox_lease header. */
#ifndef OUTBOX_TEST_CHECK_COMMON_H
#define OUTBOX_TEST_CHECK_COMMON_H

#include <stdio.h>
#include <string.h>

/* Whether the len bytes at v are the bytes hex spells (lower-case, two digits a byte). */
static inline int check_bytes_are_hex(const void *v, size_t len, const char *hex)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *b = v;
    if (strlen(hex) != 2 * len)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (hex[2 * i] != digits[b[i] >> 4] || hex[2 * i + 1] != digits[b[i] & 15])
            return 0;
    return 1;
}

/* The lease partition and token of an outbox_lease header's value ("P/TOKEN/relay/pid",
 * len bytes, not terminated): 1 when readable. */
static inline int check_lease_token(const void *value, size_t len, int *part, long long *token)
{
    char buf[400];
    if (len >= sizeof(buf))
        return 0;
    memcpy(buf, value, len);
    buf[len] = '\0';
    return sscanf(buf, "%d/%lld", part, token) == 2 && *part >= 0;
}

#endif
