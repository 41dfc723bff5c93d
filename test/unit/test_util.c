/* Unit tests: PostgreSQL array literals (integers by hand, strings quoted and escaped). */
#include <limits.h>
#include <stdio.h>

#include "tap.h"
#include "core/util.h"

int main(void)
{
    struct strbuf sb;
    strbuf_init(&sb);
    pgarray_open(&sb);
    pgarray_close(&sb);
    is_str(sb.buf, "{}", "empty array");

    strbuf_reset(&sb);
    pgarray_open(&sb);
    long long v[] = {0, 7, -7, 10, 1234567890123LL, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        pgarray_int(&sb, v[i]);
    pgarray_close(&sb);
    char want[200];
    snprintf(want, sizeof(want), "{0,7,-7,10,1234567890123,%lld,%lld}", LLONG_MAX, LLONG_MIN);
    const char *wantp = want;
    is_str(sb.buf, wantp, "integers, signs, extremes, separators");

    strbuf_reset(&sb);
    strbuf_puts(&sb, "prefix ");
    pgarray_open(&sb);
    pgarray_int(&sb, 5);
    pgarray_str(&sb, "a\"b\\c");
    pgarray_int(&sb, 6);
    pgarray_close(&sb);
    is_str(sb.buf, "prefix {5,\"a\\\"b\\\\c\",6}", "mixed items after other text, escaped");
    strbuf_destroy(&sb);

    is_int(pg_int("0"), 0, "pg_int 0");
    is_int(pg_int("42"), 42, "pg_int 42");
    is_int(pg_int("-42"), -42, "pg_int -42");
    is_int(pg_int("1796009395090630"), 1796009395090630LL, "pg_int 16 digits");
    ok(pg_int("9223372036854775807") == LLONG_MAX, "pg_int LLONG_MAX (19 digits, through strtoll)");
    ok(pg_int("-9223372036854775808") == LLONG_MIN, "pg_int LLONG_MIN");
    is_int(pg_int("12x"), 12, "pg_int stops like strtoll at a non-digit");
    is_int(pg_int(""), 0, "pg_int of nothing is 0");

    unsigned char bytes[8];
    is_int(hex_decode("00ff7fA0", 8, bytes), 4, "hex_decode: 4 bytes");
    ok(bytes[0] == 0x00 && bytes[1] == 0xff && bytes[2] == 0x7f && bytes[3] == 0xa0,
       "hex_decode: NUL, 0xff, 0x7f, upper case");
    is_int(hex_decode("", 0, bytes), 0, "hex_decode: nothing is 0 bytes");
    is_int(hex_decode("abc", 3, bytes), -1, "hex_decode: an odd count is refused");
    is_int(hex_decode("0g", 2, bytes), -1, "hex_decode: a non-hex character is refused");
    is_int(hex_decode("\\x00", 4, bytes), -1, "hex_decode: bytea_output's \\x prefix is not hex");
    return done();
}
