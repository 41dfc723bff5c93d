/* HTTP endpoint on libmicrohttpd's internal thread, serving the loop's last snapshot. */
#include "core/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

/* /healthz fails when the loop has not published for this long. */
#define STALE_AFTER_MS 15000

struct http {
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock; /* guards the snapshot below (HTTP thread reads, loop writes) */
    char *metrics_text;
    char *status_json;
    int ready;
    int64_t published_ms;
};

int http_parse_addr(const char *addr, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon[1] == '\0')
        return -1;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 1 || p > 65535)
        return -1;
    size_t n = (size_t)(colon - addr);
    if (n >= hostlen)
        return -1;
    memcpy(host, addr, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

/* Waits for fd to become ready for events until deadline_ms; 0, or -1 on timeout. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
    for (;;) {
        int64_t left = deadline_ms - mono_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

int http_probe(const char *addr, const char *path, int timeout_ms, char *err, size_t errlen)
{
    char host[256];
    int port;
    if (http_parse_addr(addr, host, sizeof(host), &port) != 0) {
        set_err(err, errlen, "expected host:port or :port, got '%s'", addr);
        return -1;
    }
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        strcpy(host, "127.0.0.1");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        set_err(err, errlen, "'%s' is not an IPv4 address", host);
        return -1;
    }
    int64_t deadline = mono_ms() + timeout_ms;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        set_err(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int status = -1;
    char req[512], buf[256];
    int reqlen = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host);
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
        set_err(err, errlen, "%s:%d: %s", host, port, strerror(errno));
        goto out;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (wait_fd(fd, POLLOUT, deadline) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
        set_err(err, errlen, "%s:%d: %s", host, port, soerr ? strerror(soerr) : "no answer");
        goto out;
    }
    if (send(fd, req, (size_t)reqlen, MSG_NOSIGNAL) != reqlen) {
        set_err(err, errlen, "%s:%d: send: %s", host, port, strerror(errno));
        goto out;
    }
    /* the status line is all we need: "HTTP/1.x NNN ..." */
    while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
        if (wait_fd(fd, POLLIN, deadline) != 0)
            break;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    int code;
    if (sscanf(buf, "HTTP/%*d.%*d %d", &code) == 1 && code >= 100 && code <= 599)
        status = code;
    else
        set_err(err, errlen, "%s:%d%s: no HTTP answer within %d ms", host, port, path, timeout_ms);
out:
    close(fd);
    return status;
}

int http_healthcheck(const char *addr, const char *setting)
{
    if (!addr[0]) {
        log_error("healthcheck: %s is empty, so there is no /healthz to ask", setting);
        return OUTBOX_EXIT_USAGE;
    }
    char err[512];
    int status = http_probe(addr, "/healthz", 3000, err, sizeof(err));
    if (status == 200)
        return OUTBOX_EXIT_OK;
    if (status < 0)
        log_error("healthcheck: %s", err);
    else
        log_error("healthcheck: /healthz answered %d", status);
    return OUTBOX_EXIT_FAILED;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             const char *body)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    enum MHD_Result rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* Runs on libmicrohttpd's thread. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **req_cls)
{
    (void)version;
    (void)upload_data;
    struct http *h = cls;
    if (*req_cls == NULL) { /* first call: headers only */
        *req_cls = h;
        return MHD_YES;
    }
    if (*upload_size) { /* ignore bodies */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "method not allowed\n");

    pthread_mutex_lock(&h->lock);
    char *body = NULL;
    unsigned status = MHD_HTTP_OK;
    const char *type = "text/plain; charset=utf-8";
    int fresh = h->published_ms && mono_ms() - h->published_ms < STALE_AFTER_MS;
    if ((strcmp(url, "/metrics") == 0 || strcmp(url, "/status") == 0) && !h->metrics_text) {
        /* before the loop's first snapshot: not an empty page a scraper would take as data */
        status = MHD_HTTP_SERVICE_UNAVAILABLE;
        body = xstrdup("starting: no snapshot yet\n");
    } else if (strcmp(url, "/metrics") == 0) {
        body = xstrdup(h->metrics_text);
        type = "text/plain; version=0.0.4; charset=utf-8";
    } else if (strcmp(url, "/status") == 0) {
        body = xstrdup(h->status_json ? h->status_json : "{}");
        type = "application/json";
    } else if (strcmp(url, "/healthz") == 0) {
        status = fresh ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        body = xstrdup(fresh ? "ok\n" : "event loop not turning\n");
    } else if (strcmp(url, "/readyz") == 0) {
        int ok = fresh && h->ready;
        status = ok ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
        body = xstrdup(ok ? "ready\n" : "not ready\n");
    } else {
        status = MHD_HTTP_NOT_FOUND;
        body = xstrdup("not found: try /metrics, /healthz, /readyz, /status\n");
    }
    pthread_mutex_unlock(&h->lock);
    enum MHD_Result rc = reply(conn, status, type, body);
    free(body);
    return rc;
}

struct http *http_new(const char *addr, char *err, size_t errlen)
{
    char host[256];
    int port;
    if (http_parse_addr(addr, host, sizeof(host), &port) != 0) {
        set_err(err, errlen, "OUTBOX_HTTP_ADDR: expected host:port or :port, got '%s'", addr);
        return NULL;
    }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        set_err(err, errlen, "OUTBOX_HTTP_ADDR: '%s' is not an IPv4 address", host);
        return NULL;
    }
    struct http *h = xcalloc(1, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    /* One internal thread polls every connection: a slow client holds a slot, not the thread.
     * Limits: 64 connections, 10 s idle timeout, 32 KiB per connection. */
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, handle, h,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)32, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)10, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_END);
    if (!h->daemon) {
        pthread_mutex_destroy(&h->lock);
        free(h);
        set_err(err, errlen, "OUTBOX_HTTP_ADDR: cannot listen on %s (port in use?)", addr);
        return NULL;
    }
    log_info("http: serving /metrics, /healthz, /readyz, /status on %s", addr);
    return h;
}

void http_publish(struct http *h, const char *metrics_text, const char *status_json, int ready)
{
    char *m = xstrdup(metrics_text), *s = xstrdup(status_json);
    pthread_mutex_lock(&h->lock);
    char *old_m = h->metrics_text, *old_s = h->status_json;
    h->metrics_text = m;
    h->status_json = s;
    h->ready = ready;
    h->published_ms = mono_ms();
    pthread_mutex_unlock(&h->lock);
    free(old_m);
    free(old_s);
}

void http_free(struct http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->lock);
    free(h->metrics_text);
    free(h->status_json);
    free(h);
}
