/* Leveled logging to stderr, text or JSON lines; serialised by a mutex. */
#include "log.h"

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

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < min_level)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

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
}
