/* Leveled logging to stderr, text or JSON lines; serialised by a mutex. */
#include "core/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum log_level min_level = LOG_INFO;
static enum log_format out_format = LOG_FORMAT_TEXT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_setup(enum log_level level, enum log_format format)
{
    min_level = level;
    out_format = format;
}

int log_enabled(enum log_level level)
{
    return level >= min_level;
}

int log_level_parse(const char *s, enum log_level *out)
{
    for (size_t i = 0; i < ARRAY_LEN(level_names); i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

int log_format_parse(const char *s, enum log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = LOG_FORMAT_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = LOG_FORMAT_JSON;
    else
        return -1;
    return 0;
}

/* Length of the UTF-8 sequence starting at s (at most len bytes), 0 if invalid there. */
static size_t utf8_seq(const unsigned char *s, size_t len)
{
    size_t n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
               : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || n > len || (n == 2 && s[0] < 0xc2) || (n == 4 && s[0] > 0xf4))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] > 0x9f) ||
        (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] > 0x8f))
        return 0; /* overlong, surrogate, beyond U+10FFFF */
    return n;
}

void log_escape(const char *text, size_t len, struct strbuf *out)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        size_t n = utf8_seq(s + i, len - i);
        if (n == 1 && s[i] >= 0x20 && s[i] != 0x7f) {
            strbuf_append(out, text + i, 1);
        } else if (n > 1) {
            strbuf_append(out, text + i, n);
        } else {
            if (s[i] == '\n')
                strbuf_puts(out, "\\n");
            else if (s[i] == '\r')
                strbuf_puts(out, "\\r");
            else if (s[i] == '\t')
                strbuf_puts(out, "\\t");
            else
                strbuf_printf(out, "\\x%02x", s[i]);
            n = 1;
        }
        i += n;
    }
}

size_t log_utf8_cut(const char *s, size_t len)
{
    size_t lead = len;
    while (lead > 0 && len - lead < 4 && ((unsigned char)s[lead - 1] & 0xc0) == 0x80)
        lead--;
    if (lead == 0)
        return len; /* no lead byte: nothing to cut (escaping shows the bytes) */
    unsigned char c = (unsigned char)s[--lead];
    size_t want = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
    return len - lead < want ? lead : len; /* a sequence cut short at the end goes */
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < min_level)
        return;
    char raw[2048];
    va_list ap;
    va_start(ap, fmt);
    int full = vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    size_t rawlen = strlen(raw);
    int cut = full >= (int)sizeof(raw);
    if (cut)
        rawlen = log_utf8_cut(raw, rawlen);
    struct strbuf safe;
    strbuf_init(&safe);
    log_escape(raw, rawlen, &safe);
    if (cut)
        strbuf_puts(&safe, "...");
    const char *msg = safe.buf;

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char stamp[40];
    size_t n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ", ts.tv_nsec / 1000000);

    struct strbuf line;
    strbuf_init(&line);
    if (out_format == LOG_FORMAT_JSON) {
        strbuf_printf(&line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", stamp, level_names[level]);
        strbuf_json_string(&line, msg, strlen(msg));
        strbuf_puts(&line, "}\n");
    } else {
        strbuf_printf(&line, "%s %-5s %s\n", stamp, level_names[level], msg);
    }
    pthread_mutex_lock(&log_lock);
    fwrite(line.buf, 1, line.len, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_lock);
    strbuf_destroy(&line);
    strbuf_destroy(&safe);
}

void log_format_early(char **envp, const char *var, const char *value)
{
    size_t n = strlen(var);
    for (char **e = envp; !value && e && *e; e++)
        if (strncmp(*e, var, n) == 0 && (*e)[n] == '=')
            value = *e + n + 1;
    enum log_format format;
    if (value && log_format_parse(value, &format) == 0)
        log_setup(LOG_INFO, format);
}

int log_limit_due(struct log_limit *l, int64_t every_ms, long *held)
{
    int64_t now = mono_ms();
    if (l->logged_ms && now - l->logged_ms < every_ms) {
        l->held++;
        return 0;
    }
    *held = l->held;
    l->logged_ms = now;
    l->held = 0;
    return 1;
}
