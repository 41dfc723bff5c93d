/* Minimal TAP producer for unit tests: ok(), is_int(), is_str(), done(). */
#ifndef OUTBOX_TAP_H
#define OUTBOX_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is_int(got, want, ...) tap_is_int((long long)(got), (long long)(want), __FILE__, __LINE__, __VA_ARGS__)
#define is_str(got, want, ...) tap_is_str((got), (want), __FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 4, 5))) static int tap_ok(int cond, const char *file, int line,
                                                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s %d - ", cond ? "ok" : "not ok", ++tap_n);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (!cond) {
        tap_failed++;
        printf("#   failed at %s:%d\n", file, line);
    }
    return cond;
}

#define tap_is_int(got, want, file, line, ...)                                                 \
    (tap_ok((got) == (want), file, line, __VA_ARGS__) ||                                       \
     (printf("#   got %lld, want %lld\n", (got), (want)), 0))

#define tap_is_str(got, want, file, line, ...)                                                 \
    (tap_ok((got) && (want) && strcmp((got), (want)) == 0, file, line, __VA_ARGS__) ||         \
     (printf("#   got '%s', want '%s'\n", (got) ? (got) : "(null)", (want) ? (want) : "(null)"), 0))

static int done(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif
