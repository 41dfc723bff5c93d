/* Leveled logging to stderr as text lines for humans or JSON lines for machines.
 * Thread-safe: librdkafka's log callback may call it from its own threads. */
#ifndef OUTBOX_LOG_H
#define OUTBOX_LOG_H

#include "core/util.h"

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

void log_setup(enum log_level level, enum log_format format);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) PRINTF_LIKE(2, 3);

/* Appends text (len bytes) to out as one safe log line: valid UTF-8 is kept, control
 * characters become \n \r \t or \xHH, and bytes that are not UTF-8 become \xHH. Pure. */
void log_escape(const char *text, size_t len, struct strbuf *out);
/* The longest prefix of s (len bytes) that does not end inside a UTF-8 sequence. */
size_t log_utf8_cut(const char *s, size_t len);

/* Parses "debug|info|warn|error" / "text|json"; 0 on success, -1 otherwise. */
int log_level_parse(const char *s, enum log_level *out);
int log_format_parse(const char *s, enum log_format *out);
/* Applies the log format named by "VAR=format" in envp (or by value, when not NULL, which
 * wins), before the settings are read, so that warnings about them are already in it. */
void log_format_early(char **envp, const char *var, const char *value);

/* A line that may come in bursts, logged at most once per every_ms (not thread-safe: one
 * owner's thread). log_limit_due returns 1 when the next one is due, with *held set to how
 * many were held back since the last one; 0 when this one is held back (and counted). */
struct log_limit {
    int64_t logged_ms; /* 0: never logged */
    long held;
};
int log_limit_due(struct log_limit *l, int64_t every_ms, long *held);

#define log_debug(...) do { if (log_enabled(LOG_DEBUG)) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
