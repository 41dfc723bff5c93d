/* Test tool: a fault-injecting TCP proxy in front of one Kafka listener, on loopback only and
 * bounded in time. It reads Kafka's framing (a 4-byte size, then the request header's api key
 * and correlation id; a response's correlation id) so that it knows which Produce requests
 * are in flight on each connection, and can cut exactly those.
 *
 *   fault-proxy --listen PORT --target PORT [--deadline SECONDS] [--seed N] [--raw]
 *
 * --raw: the protocol is not Kafka's (RabbitMQ's AMQP): the bytes each read returns are one
 * frame and none is a Produce request, so delay, delay_requests and hold apply as below
 * (drop and reset, which act on Produce requests, find none).
 *
 * Listens on 127.0.0.1:PORT and forwards to 127.0.0.1:TARGET (the broker's listener whose
 * advertised address is this proxy). Prints "LISTENING PORT" on stdout once it accepts.
 * Commands on stdin, one per line, each acknowledged on stderr with "fault-proxy: done CMD":
 *   delay MS        hold each response a random 0..MS ms (per connection, order kept)
 *   delay_requests MS
 *                   hold each request MS ms before it reaches the broker (order kept):
 *                   what a client sent stays on the wire, beyond its reach, for MS ms
 *   drop N          swallow one Produce response in N at random (0: none); the connection
 *                   stays up, so the client sees its request time out
 *   reset MIN MAX   reset (TCP RST) each connection once it has been open a random MIN..MAX
 *                   ms (drawn per connection; for those already open, from the command),
 *                   at the first moment after that when it has a Produce request in flight;
 *                   0 0: off. Drawn per connection, not on one clock for all: on one clock, a
 *                   client whose reconnect backoff has grown past MAX (librdkafka doubles it
 *                   on every connect made within reconnect.backoff.max.ms of the last, up to
 *                   10 s) meets a reset already due on every new connection and has each one
 *                   cut at its first Produce request - nothing gets through at all
 *   hold on|off     hold every response until "hold off" (a broker that never answers);
 *                   requests still reach the broker
 *   pause on|off    stop reading what clients send until "pause off": their sockets fill
 *                   and their writes block (a network that stopped moving)
 *   cut             reset (TCP RST) every open connection now, both sides: what the proxy
 *                   holds and what the kernels still buffer on the way is lost, never
 *                   reaching the broker
 *   stats           prints one STATS line on stdout (below)
 *   quit            exits
 * STATS connections=.. produce_requests=.. produce_responses=.. delivered=.. dropped=..
 *       resets=.. cut=..
 * where cut counts the Produce requests whose response the client never got: dropped, or in
 * flight (sent on, or answered and held) when their connection was reset. The same line is
 * printed at exit. After --deadline seconds (default 900) the proxy exits by itself. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256
#define MAX_INFLIGHT 4096

struct buf {
    unsigned char *data;
    size_t len, cap;
};

struct response { /* a response frame waiting for its release time */
    struct response *next;
    int64_t release_ms; /* INT64_MAX while held */
    int produce;
    size_t len;
    unsigned char frame[];
};

struct conn {
    int cfd, sfd;
    struct buf from_client, to_server, from_server, to_client;
    int32_t inflight_corr[MAX_INFLIGHT]; /* requests sent on, in order */
    int16_t inflight_api[MAX_INFLIGHT];
    int inflight_head, inflight_len;
    struct response *queue, *queue_tail; /* answered, not yet passed on */
    int64_t last_release_ms;
    struct response *req_queue, *req_queue_tail; /* requests held back (delay_requests) */
    int64_t reset_at_ms; /* reset at the first Produce in flight from then (INT64_MAX: never) */
};

static struct conn *conns[MAX_CONNS];
static long long st_connections, st_produce_requests, st_produce_responses, st_delivered, st_dropped,
    st_resets, st_cut;
static int delay_ms, request_delay_ms, drop_one_in, reset_min_ms, reset_max_ms, hold, raw, paused;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void die(const char *what)
{
    fprintf(stderr, "fault-proxy: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void buf_put(struct buf *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (!grown)
            die("out of memory");
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void buf_drop(struct buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int rand_upto(int n) { return n > 0 ? rand() % (n + 1) : 0; }

static void print_stats(void)
{
    printf("STATS connections=%lld produce_requests=%lld produce_responses=%lld delivered=%lld "
           "dropped=%lld resets=%lld cut=%lld\n",
           st_connections, st_produce_requests, st_produce_responses, st_delivered, st_dropped, st_resets,
           st_cut);
    fflush(stdout);
}

/* When a connection opened (or told "reset" while open) at from_ms is to be reset. */
static int64_t reset_deadline(int64_t from_ms)
{
    return reset_max_ms > 0 ? from_ms + reset_min_ms + rand_upto(reset_max_ms - reset_min_ms) : INT64_MAX;
}

/* Produce requests of c whose response the client has not got: in flight or queued here. */
static int produce_pending(const struct conn *c)
{
    int n = 0;
    for (int i = 0; i < c->inflight_len; i++)
        n += c->inflight_api[(c->inflight_head + i) % MAX_INFLIGHT] == 0;
    for (const struct response *r = c->queue; r; r = r->next)
        n += r->produce;
    return n;
}

static void conn_close(int i, int reset)
{
    struct conn *c = conns[i];
    if (reset) {
        struct linger l = {1, 0}; /* close with RST */
        setsockopt(c->cfd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
        setsockopt(c->sfd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(c->cfd);
    close(c->sfd);
    while (c->queue) {
        struct response *r = c->queue;
        c->queue = r->next;
        free(r);
    }
    while (c->req_queue) {
        struct response *r = c->req_queue;
        c->req_queue = r->next;
        free(r);
    }
    free(c->from_client.data);
    free(c->to_server.data);
    free(c->from_server.data);
    free(c->to_client.data);
    free(c);
    conns[i] = NULL;
}

static void accept_one(int lfd, int target)
{
    int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (cfd < 0)
        return;
    int slot = -1;
    for (int i = 0; i < MAX_CONNS && slot < 0; i++)
        if (!conns[i])
            slot = i;
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)target),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (slot < 0 || sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(cfd); /* the client sees the broker unreachable */
        if (sfd >= 0)
            close(sfd);
        return;
    }
    fcntl(sfd, F_SETFL, O_NONBLOCK);
    int one = 1;
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = calloc(1, sizeof(*c));
    if (!c)
        die("out of memory");
    c->cfd = cfd;
    c->sfd = sfd;
    c->reset_at_ms = reset_deadline(now_ms());
    conns[slot] = c;
    st_connections++;
}

/* The length of the whole frame at b's start (Kafka: a 4-byte size and that many bytes;
 * --raw: all b holds), 0 while it is incomplete. */
static size_t frame_len(const struct buf *b)
{
    if (raw)
        return b->len;
    return b->len >= 4 && b->len >= 4 + (size_t)be32(b->data) ? 4 + (size_t)be32(b->data) : 0;
}

/* Whole request frames from the client: remembered in order, passed on to the broker. */
static void client_frames(struct conn *c)
{
    for (size_t len; (len = frame_len(&c->from_client)) > 0;) {
        if (!raw && len >= 4 + 8) { /* a request header: api key, version, correlation id */
            int16_t api = (int16_t)(c->from_client.data[4] << 8 | c->from_client.data[5]);
            int32_t corr = (int32_t)be32(c->from_client.data + 8);
            if (c->inflight_len < MAX_INFLIGHT) {
                int at = (c->inflight_head + c->inflight_len++) % MAX_INFLIGHT;
                c->inflight_corr[at] = corr;
                c->inflight_api[at] = api;
            }
            st_produce_requests += api == 0;
        }
        if (request_delay_ms > 0 || c->req_queue) { /* held back, behind any held before */
            struct response *r = malloc(sizeof(*r) + len);
            if (!r)
                die("out of memory");
            r->next = NULL;
            r->produce = 0;
            r->len = len;
            r->release_ms = now_ms() + request_delay_ms;
            memcpy(r->frame, c->from_client.data, len);
            if (c->req_queue_tail)
                c->req_queue_tail->next = r;
            else
                c->req_queue = r;
            c->req_queue_tail = r;
        } else {
            buf_put(&c->to_server, c->from_client.data, len);
        }
        buf_drop(&c->from_client, len);
    }
}

/* Whole response frames from the broker: dropped, held or queued for their release. */
static void server_frames(struct conn *c)
{
    for (size_t len; (len = frame_len(&c->from_server)) > 0;) {
        int produce = 0;
        if (!raw && len >= 4 + 4 && c->inflight_len > 0) { /* a response's correlation id */
            int32_t corr = (int32_t)be32(c->from_server.data + 4);
            for (int i = 0; i < c->inflight_len; i++) { /* normally the first */
                int at = (c->inflight_head + i) % MAX_INFLIGHT;
                if (c->inflight_corr[at] != corr)
                    continue;
                produce = c->inflight_api[at] == 0;
                for (int j = i; j > 0; j--) { /* remove it, keeping the order */
                    int to = (c->inflight_head + j) % MAX_INFLIGHT, from = (c->inflight_head + j - 1) % MAX_INFLIGHT;
                    c->inflight_corr[to] = c->inflight_corr[from];
                    c->inflight_api[to] = c->inflight_api[from];
                }
                c->inflight_head = (c->inflight_head + 1) % MAX_INFLIGHT;
                c->inflight_len--;
                break;
            }
        }
        st_produce_responses += produce;
        if (produce && drop_one_in > 0 && rand() % drop_one_in == 0) {
            st_dropped++;
            st_cut++;
        } else {
            struct response *r = malloc(sizeof(*r) + len);
            if (!r)
                die("out of memory");
            r->next = NULL;
            r->produce = produce;
            r->len = len;
            memcpy(r->frame, c->from_server.data, len);
            int64_t at = now_ms() + rand_upto(delay_ms);
            if (at < c->last_release_ms)
                at = c->last_release_ms;
            c->last_release_ms = at;
            r->release_ms = hold ? INT64_MAX : at;
            if (c->queue_tail)
                c->queue_tail->next = r;
            else
                c->queue = r;
            c->queue_tail = r;
        }
        buf_drop(&c->from_server, len);
    }
}

static void release_due(struct conn *c, int64_t now)
{
    while (c->req_queue && c->req_queue->release_ms <= now) {
        struct response *r = c->req_queue;
        buf_put(&c->to_server, r->frame, r->len);
        c->req_queue = r->next;
        if (!c->req_queue)
            c->req_queue_tail = NULL;
        free(r);
    }
    while (c->queue && c->queue->release_ms <= now) {
        struct response *r = c->queue;
        buf_put(&c->to_client, r->frame, r->len);
        st_delivered += r->produce;
        c->queue = r->next;
        if (!c->queue)
            c->queue_tail = NULL;
        free(r);
    }
}

/* A read's or write's result: 1 bytes moved or interrupted (go on), 0 it would block (try
 * when the loop says), -1 the connection is over (EOF or an error). */
static int io_step(ssize_t n)
{
    if (n > 0 || (n < 0 && errno == EINTR))
        return 1;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    return -1;
}

/* Reads what fd has into b; 0 on EOF or error (the connection is over). */
static int read_into(int fd, struct buf *b)
{
    unsigned char tmp[65536];
    for (;;) {
        ssize_t n = read(fd, tmp, sizeof(tmp));
        int step = io_step(n);
        if (step <= 0)
            return step + 1;
        if (n > 0)
            buf_put(b, tmp, (size_t)n);
    }
}

/* Writes what b holds to fd; 0 when the connection is over. */
static int write_from(int fd, struct buf *b)
{
    while (b->len) {
        ssize_t n = write(fd, b->data, b->len);
        int step = io_step(n);
        if (step <= 0)
            return step + 1;
        if (n > 0)
            buf_drop(b, (size_t)n);
    }
    return 1;
}

static int command(char *line)
{
    int a, b;
    char word[16];
    line[strcspn(line, "\n")] = '\0';
    if (sscanf(line, "delay_requests %d", &a) == 1)
        request_delay_ms = a;
    else if (sscanf(line, "delay %d", &a) == 1)
        delay_ms = a;
    else if (sscanf(line, "drop %d", &a) == 1)
        drop_one_in = a;
    else if (sscanf(line, "reset %d %d", &a, &b) == 2 && a <= b) {
        reset_min_ms = a;
        reset_max_ms = b;
        int64_t now = now_ms();
        for (int i = 0; i < MAX_CONNS; i++)
            if (conns[i])
                conns[i]->reset_at_ms = reset_deadline(now);
    } else if (sscanf(line, "hold %15s", word) == 1 && (!strcmp(word, "on") || !strcmp(word, "off"))) {
        hold = !strcmp(word, "on");
        if (!hold) { /* release what was held, in order */
            int64_t now = now_ms();
            for (int i = 0; i < MAX_CONNS; i++)
                for (struct response *r = conns[i] ? conns[i]->queue : NULL; r; r = r->next)
                    if (r->release_ms == INT64_MAX)
                        r->release_ms = now;
        }
    } else if (sscanf(line, "pause %15s", word) == 1 && (!strcmp(word, "on") || !strcmp(word, "off"))) {
        paused = !strcmp(word, "on");
    } else if (!strcmp(line, "cut")) {
        for (int i = 0; i < MAX_CONNS; i++)
            if (conns[i]) {
                st_resets++;
                conn_close(i, 1);
            }
    } else if (!strcmp(line, "stats"))
        print_stats();
    else if (!strcmp(line, "quit"))
        return 0;
    else {
        fprintf(stderr, "fault-proxy: unknown command: %s\n", line);
        return 1;
    }
    fprintf(stderr, "fault-proxy: done %s\n", line);
    return 1;
}

int main(int argc, char **argv)
{
    int listen_port = 0, target = 0, deadline_s = 900;
    unsigned seed = (unsigned)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--listen") && i + 1 < argc)
            listen_port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--target") && i + 1 < argc)
            target = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--deadline") && i + 1 < argc)
            deadline_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--raw"))
            raw = 1;
        else {
            fprintf(stderr, "usage: fault-proxy --listen PORT --target PORT [--deadline SECONDS] [--seed N] [--raw]\n");
            return 2;
        }
    }
    if (listen_port <= 0 || listen_port > 65535 || target <= 0 || target > 65535 || deadline_s <= 0) {
        fprintf(stderr, "fault-proxy: --listen and --target must be ports, --deadline positive\n");
        return 2;
    }
    srand(seed);
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)listen_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 64) != 0)
        die("listen");
    printf("LISTENING %d\n", listen_port);
    fflush(stdout);
    fprintf(stderr, "fault-proxy: 127.0.0.1:%d -> 127.0.0.1:%d, seed %u, deadline %d s\n", listen_port, target,
            seed, deadline_s);
    int64_t deadline = now_ms() + (int64_t)deadline_s * 1000;
    char line[256];
    size_t line_len = 0;
    int stdin_open = 1;
    for (;;) {
        int64_t now = now_ms();
        if (now >= deadline) {
            fprintf(stderr, "fault-proxy: deadline reached\n");
            break;
        }
        int64_t wake = deadline;
        for (int i = 0; i < MAX_CONNS; i++) { /* due: reset at the first Produce in flight */
            if (!conns[i] || conns[i]->reset_at_ms == INT64_MAX)
                continue;
            int pending = now >= conns[i]->reset_at_ms ? produce_pending(conns[i]) : 0;
            if (pending > 0) {
                st_cut += pending;
                st_resets++;
                conn_close(i, 1);
            } else if (conns[i]->reset_at_ms < wake) {
                wake = conns[i]->reset_at_ms;
            }
        }
        struct pollfd pfd[2 + 2 * MAX_CONNS];
        int owner[2 + 2 * MAX_CONNS], n = 0;
        if (wake < now + 1)
            wake = now + 1; /* an armed reset waits for a request: look again each ms */
        pfd[n] = (struct pollfd){.fd = lfd, .events = POLLIN}, owner[n++] = -1;
        if (stdin_open)
            pfd[n] = (struct pollfd){.fd = 0, .events = POLLIN}, owner[n++] = -2;
        for (int i = 0; i < MAX_CONNS; i++) {
            struct conn *c = conns[i];
            if (!c)
                continue;
            release_due(c, now);
            if (c->queue && c->queue->release_ms < wake)
                wake = c->queue->release_ms;
            if (c->req_queue && c->req_queue->release_ms < wake)
                wake = c->req_queue->release_ms;
            pfd[n] = (struct pollfd){.fd = c->cfd, .events = (paused ? 0 : POLLIN) | (c->to_client.len ? POLLOUT : 0)};
            owner[n++] = i;
            pfd[n] = (struct pollfd){.fd = c->sfd, .events = POLLIN | (c->to_server.len ? POLLOUT : 0)};
            owner[n++] = i;
        }
        int timeout = wake - now > 1000 ? 1000 : (int)(wake - now);
        if (poll(pfd, (nfds_t)n, timeout < 0 ? 0 : timeout) < 0 && errno != EINTR)
            die("poll");
        for (int k = 0; k < n; k++) {
            if (!pfd[k].revents)
                continue;
            if (owner[k] == -1) {
                accept_one(lfd, target);
            } else if (owner[k] == -2) {
                ssize_t got = read(0, line + line_len, sizeof(line) - 1 - line_len);
                if (got <= 0) {
                    stdin_open = 0;
                    continue;
                }
                line_len += (size_t)got;
                line[line_len] = '\0';
                char *nl;
                while ((nl = strchr(line, '\n'))) {
                    *nl = '\0';
                    if (!command(line))
                        goto out;
                    line_len -= (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, line_len + 1);
                }
                if (line_len == sizeof(line) - 1)
                    line_len = 0; /* an overlong line: dropped */
            } else {
                struct conn *c = conns[owner[k]];
                if (!c)
                    continue; /* closed earlier in this round */
                int ok = 1, is_client = pfd[k].fd == c->cfd;
                if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                    ok = read_into(pfd[k].fd, is_client ? &c->from_client : &c->from_server);
                    if (is_client)
                        client_frames(c);
                    else
                        server_frames(c);
                }
                release_due(c, now_ms());
                if (ok)
                    ok = write_from(c->cfd, &c->to_client) && write_from(c->sfd, &c->to_server);
                if (!ok)
                    conn_close(owner[k], 0);
            }
        }
    }
out:
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i])
            conn_close(i, 0);
    print_stats();
    return 0;
}
