/* A multi-host DSN's host list (hostlist.h). */
#include "pg/hostlist.h"

#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* Splits a comma-separated libpq list into n strings; returns the count. */
static int split_list(const char *value, char ***out)
{
    int n = 1;
    for (const char *c = value; *c; c++)
        n += *c == ',';
    char **items = xcalloc((size_t)n, sizeof(*items));
    const char *start = value;
    for (int i = 0; i < n; i++) {
        size_t len = strcspn(start, ",");
        items[i] = xstrndup(start, len);
        start += len + (start[len] == ',');
    }
    *out = items;
    return n;
}

static void free_list(char **items, int n)
{
    if (!items)
        return;
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

void hostlist_init(struct hostlist *hl, const char *dsn)
{
    memset(hl, 0, sizeof(*hl));
    hl->timeout_s = HOSTLIST_CONNECT_TIMEOUT_S;
    PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
    if (!opts)
        return; /* the connect itself reports a bad DSN (config validated it already) */
    const char *host = NULL, *hostaddr = NULL, *port = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || !o->val[0])
            continue;
        if (strcmp(o->keyword, "host") == 0)
            host = o->val;
        else if (strcmp(o->keyword, "hostaddr") == 0)
            hostaddr = o->val;
        else if (strcmp(o->keyword, "port") == 0)
            port = o->val;
        else if (strcmp(o->keyword, "connect_timeout") == 0) {
            int t = atoi(o->val);
            if (t > 0)
                hl->timeout_s = t < 2 ? 2 : t; /* libpq's own minimum */
        }
    }
    /* the host list (host, or hostaddr alone) sets n; hostaddr and port lists are rotated
     * with it when they have n entries (one port for every host needs no rotation) */
    const char *lists[3] = {host, hostaddr, port};
    char ***slots[3] = {&hl->host, &hl->hostaddr, &hl->port};
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!lists[i])
            continue;
        char **items;
        int count = split_list(lists[i], &items);
        if (n == 0 && i < 2)
            n = count;
        if (count == n && n > 1)
            *slots[i] = items;
        else
            free_list(items, count);
    }
    hl->n = n > 1 ? n : 0;
    PQconninfoFree(opts);
}

void hostlist_destroy(struct hostlist *hl)
{
    free_list(hl->host, hl->n);
    free_list(hl->hostaddr, hl->n);
    free_list(hl->port, hl->n);
}

char *hostlist_rotated(char **items, int n, int first)
{
    struct strbuf sb;
    strbuf_init(&sb);
    for (int i = 0; i < n; i++) {
        if (i)
            strbuf_puts(&sb, ",");
        strbuf_puts(&sb, items[(first + i) % n]);
    }
    return sb.buf;
}
