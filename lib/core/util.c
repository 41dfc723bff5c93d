/* Small helpers shared by every module: allocation, string buffer, clocks. */
#include "core/util.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void out_of_memory(size_t size)
{
    fprintf(stderr, "outbox-relay: out of memory allocating %zu bytes\n", size);
    abort();
}

void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        out_of_memory(n * size);
    return p;
}

void *xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void strbuf_init(struct strbuf *sb)
{
    sb->cap = 64;
    sb->len = 0;
    sb->buf = xmalloc(sb->cap);
    sb->buf[0] = '\0';
}

void strbuf_destroy(struct strbuf *sb)
{
    free(sb->buf);
    sb->buf = NULL;
    sb->len = sb->cap = 0;
}

void strbuf_reset(struct strbuf *sb)
{
    sb->len = 0;
    sb->buf[0] = '\0';
}

static void strbuf_reserve(struct strbuf *sb, size_t extra)
{
    if (sb->len + extra + 1 <= sb->cap)
        return;
    while (sb->len + extra + 1 > sb->cap)
        sb->cap *= 2;
    sb->buf = xrealloc(sb->buf, sb->cap);
}

void strbuf_append(struct strbuf *sb, const char *data, size_t len)
{
    strbuf_reserve(sb, len);
    memcpy(sb->buf + sb->len, data, len);
    sb->len += len;
    sb->buf[sb->len] = '\0';
}

void strbuf_puts(struct strbuf *sb, const char *s)
{
    strbuf_append(sb, s, strlen(s));
}

static void strbuf_vprintf(struct strbuf *sb, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n >= 0) {
        strbuf_reserve(sb, (size_t)n);
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, again);
        sb->len += (size_t)n;
    }
    va_end(again);
}

void strbuf_printf(struct strbuf *sb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(sb, fmt, ap);
    va_end(ap);
}

char *xasprintf(const char *fmt, ...)
{
    struct strbuf sb;
    strbuf_init(&sb);
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(&sb, fmt, ap);
    va_end(ap);
    return sb.buf;
}

void strbuf_json_string(struct strbuf *sb, const char *s, size_t len)
{
    strbuf_append(sb, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': strbuf_append(sb, "\\\"", 2); break;
        case '\\': strbuf_append(sb, "\\\\", 2); break;
        case '\n': strbuf_append(sb, "\\n", 2); break;
        case '\r': strbuf_append(sb, "\\r", 2); break;
        case '\t': strbuf_append(sb, "\\t", 2); break;
        default:
            if (c < 0x20)
                strbuf_printf(sb, "\\u%04x", c);
            else
                strbuf_append(sb, (const char *)&s[i], 1);
        }
    }
    strbuf_append(sb, "\"", 1);
}

int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t mono_ms(void)
{
    return mono_us() / 1000;
}

int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

long long pg_int(const char *s)
{
    const char *p = s + (*s == '-');
    unsigned long long u = 0;
    int n = 0;
    for (; *p >= '0' && *p <= '9' && n < 18; p++, n++)
        u = u * 10 + (unsigned long long)(*p - '0');
    if (*p != '\0' || n == 0)
        return strtoll(s, NULL, 10); /* longer, or not plain digits */
    return *s == '-' ? -(long long)u : (long long)u;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

long hex_decode(const char *hex, size_t n, unsigned char *out)
{
    if (n % 2)
        return -1;
    for (size_t i = 0; i < n; i += 2) {
        int hi = hex_digit(hex[i]), lo = hex_digit(hex[i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

void pgarray_open(struct strbuf *sb)
{
    strbuf_puts(sb, "{");
}

static void pgarray_sep(struct strbuf *sb)
{
    if (sb->len && sb->buf[sb->len - 1] != '{')
        strbuf_puts(sb, ",");
}

/* Digits by hand: claims and marks list every id in flight, and printf's machinery was
 * a third of the loop thread's instructions. */
void pgarray_int(struct strbuf *sb, long long v)
{
    char buf[24];
    char *p = buf + sizeof(buf);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    if (sb->len && sb->buf[sb->len - 1] != '{')
        *--p = ',';
    strbuf_append(sb, p, (size_t)(buf + sizeof(buf) - p));
}

void pgarray_str(struct strbuf *sb, const char *s)
{
    pgarray_sep(sb);
    strbuf_puts(sb, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            strbuf_puts(sb, "\\");
        strbuf_append(sb, s, 1);
    }
    strbuf_puts(sb, "\"");
}

void pgarray_close(struct strbuf *sb)
{
    strbuf_puts(sb, "}");
}

int wake_pipe_open(int fds[2])
{
    if (pipe(fds) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    return 0;
}

void wake_pipe_poke(int fd)
{
    ssize_t n = write(fd, "x", 1);
    (void)n; /* a full pipe already wakes its reader */
}

void wake_pipe_drain(int fd)
{
    char buf[256];
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
}
