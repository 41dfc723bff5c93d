/* Small helpers shared by every module: allocation (abort on out-of-memory, the
 * project's one OOM policy), a growable string buffer, and monotonic time. */
#ifndef OUTBOX_UTIL_H
#define OUTBOX_UTIL_H

/* The programs' exit statuses (README "Running it"), one meaning each wherever a program or
 * command ends. */
enum outbox_exit {
    OUTBOX_EXIT_OK = 0,     /* done; a clean shutdown; audit: nothing lost */
    OUTBOX_EXIT_FAILED = 1, /* could not do it: the schema missing or at another version, a
                             * server unreachable (--check-config, the commands), a command
                             * failed, a second signal; audit: a row lost or out of order;
                             * healthcheck: not healthy */
    OUTBOX_EXIT_USAGE = 2,  /* an invalid setting or argument, or a setup the relay refuses (a
                             * pooler in transaction mode, a producer it cannot create); audit:
                             * it cannot tell; replay: a window too large without --limit;
                             * healthcheck: no endpoint configured */
};

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Growable NUL-terminated byte buffer; embedded, so strbuf_init/strbuf_destroy. */
struct strbuf {
    char *buf;
    size_t len;
    size_t cap;
};

void strbuf_init(struct strbuf *sb);
void strbuf_destroy(struct strbuf *sb);
void strbuf_reset(struct strbuf *sb);
void strbuf_append(struct strbuf *sb, const char *data, size_t len);
void strbuf_puts(struct strbuf *sb, const char *s);
void strbuf_printf(struct strbuf *sb, const char *fmt, ...) PRINTF_LIKE(2, 3);
/* A formatted copy (caller frees). */
char *xasprintf(const char *fmt, ...) PRINTF_LIKE(1, 2);
/* Appends s as a JSON string literal (with quotes). */
void strbuf_json_string(struct strbuf *sb, const char *s, size_t len);

/* PostgreSQL array literals, built item by item: pgarray_open, pgarray_int / pgarray_str
 * (quoted and escaped), pgarray_close. Used for every array parameter ($1::bigint[], ...). */
void pgarray_open(struct strbuf *sb);
/* An integer as PostgreSQL's text output writes it ([-]digits); anything else goes through
 * strtoll. Faster than strtoll for the claim's columns, read for every row. */
long long pg_int(const char *s);
/* Decodes n hex digits (an even count, either case) into out, n / 2 bytes. Returns the
 * bytes written, or -1 at a character that is not a hex digit or an odd count. */
long hex_decode(const char *hex, size_t n, unsigned char *out);
void pgarray_int(struct strbuf *sb, long long v);
void pgarray_str(struct strbuf *sb, const char *s);
void pgarray_close(struct strbuf *sb);

/* A self-pipe for waking a poller from another thread: both ends non-blocking and
 * close-on-exec. 0, or -1 with errno. wake_pipe_poke writes a byte (a full pipe already wakes
 * its reader); wake_pipe_drain reads everything pending. */
int wake_pipe_open(int fds[2]);
void wake_pipe_poke(int fd);
void wake_pipe_drain(int fd);

/* Monotonic clock in milliseconds / microseconds; wall clock in milliseconds. */
int64_t mono_ms(void);
int64_t mono_us(void);
int64_t wall_ms(void);

/* Formats into err (may be NULL) and returns -1, for "return set_err(...)". */
int set_err(char *err, size_t errlen, const char *fmt, ...) PRINTF_LIKE(3, 4);

#endif
