/* Unit tests: log lines are safe to print (control characters and bytes that are not
 * UTF-8 escaped, valid UTF-8 kept) and cut only between UTF-8 sequences; a limited line is
 * due once per period, with the count held back in between. */
#include <string.h>

#include "core/log.h"
#include "tap.h"

static const char *escaped(const char *in, size_t len)
{
    static struct strbuf sb;
    if (!sb.buf)
        strbuf_init(&sb);
    strbuf_reset(&sb);
    log_escape(in, len, &sb);
    return sb.buf;
}

int main(void)
{
    is_str(escaped("plain text", 10), "plain text", "plain text unchanged");
    is_str(escaped("a\nb\r\tc", 6), "a\\nb\\r\\tc", "newline, return and tab escaped");
    is_str(escaped("\x1b[31mred", 8), "\\x1b[31mred", "terminal escape sequences defused");
    is_str(escaped("nul\x7f", 4), "nul\\x7f", "DEL escaped");
    is_str(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
           "valid 2-, 3- and 4-byte UTF-8 kept");
    is_str(escaped("bad\xff\xfe", 5), "bad\\xff\\xfe", "bytes that are not UTF-8 escaped");
    is_str(escaped("\xc0\xaf", 2), "\\xc0\\xaf", "overlong encoding escaped");
    is_str(escaped("\xed\xa0\x80", 3), "\\xed\\xa0\\x80", "surrogate escaped");
    is_str(escaped("x\xc3", 2), "x\\xc3", "a sequence cut short escaped");
    char with_nul[] = {'a', 0, 'b'};
    is_str(escaped(with_nul, 3), "a\\x00b", "NUL escaped");

    is_int(log_utf8_cut("abc", 3), 3, "ASCII: no cut");
    is_int(log_utf8_cut("ab\xc3\xa9", 4), 4, "ends on a whole sequence: no cut");
    is_int(log_utf8_cut("ab\xc3", 3), 2, "a lead byte without its continuation goes");
    is_int(log_utf8_cut("ab\xe2\x82", 4), 2, "a 3-byte sequence cut after 2 goes");
    is_int(log_utf8_cut("ab\xf0\x9f\x98", 5), 2, "a 4-byte sequence cut after 3 goes");
    is_int(log_utf8_cut("ab\xf0\x9f\x98\x80", 6), 6, "a whole 4-byte sequence stays");

    struct log_limit lim = {0};
    long held = -1;
    is_int(log_limit_due(&lim, 60000, &held), 1, "the first limited line is due");
    is_int(held, 0, "nothing held back before the first");
    is_int(log_limit_due(&lim, 60000, &held), 0, "the next one within the period is held back");
    is_int(log_limit_due(&lim, 60000, &held), 0, "and the one after it");
    lim.logged_ms -= 60000; /* the period has passed */
    is_int(log_limit_due(&lim, 60000, &held), 1, "due again once the period passed");
    is_int(held, 2, "with the two held back counted");
    is_int(log_limit_due(&lim, 60000, &held), 0, "then held back again");
    return done();
}
