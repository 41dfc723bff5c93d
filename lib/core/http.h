/* HTTP endpoint: /metrics, /healthz, /readyz, /status, served by libmicrohttpd on its own
 * thread from a snapshot the loop publishes; requests never touch relay state, so a slow
 * or garbage client cannot disturb relaying. */
#ifndef OUTBOX_HTTP_H
#define OUTBOX_HTTP_H

#include <stddef.h>

struct http;

/* addr is "host:port" or ":port" (all interfaces). NULL with err on failure. */
struct http *http_new(const char *addr, char *err, size_t errlen);
void http_free(struct http *h);

/* Loop thread: replaces the snapshot (texts are copied). ready says whether /readyz
 * answers 200; /healthz answers 200 while snapshots keep arriving (the loop turns). */
void http_publish(struct http *h, const char *metrics_text, const char *status_json, int ready);

/* Parses "host:port" / ":port"; 0 or -1. host is "" for all interfaces. */
int http_parse_addr(const char *addr, char *host, size_t hostlen, int *port);

/* The `healthcheck` command of the images (no curl in them): GET path from the endpoint
 * at addr (an empty or 0.0.0.0 host means 127.0.0.1) within timeout_ms. Returns the HTTP
 * status, or -1 with err when nothing answered. */
int http_probe(const char *addr, const char *path, int timeout_ms, char *err, size_t errlen);

/* The programs' `healthcheck` command: asks /healthz at addr (the value of the setting
 * named `setting`, for the messages) and returns the exit status: 0 healthy, 1 not (logged),
 * 2 no endpoint configured. */
int http_healthcheck(const char *addr, const char *setting);

#endif
