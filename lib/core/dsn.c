/* Redacting a DSN's secrets from messages (see dsn.h). */
#include "core/dsn.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define MAX_SECRETS 16

struct secrets {
    char *s[MAX_SECRETS];
    int n;
};

static void add(struct secrets *sec, const char *start, size_t len)
{
    if (len == 0 || sec->n >= MAX_SECRETS - 1)
        return;
    sec->s[sec->n++] = xstrndup(start, len);
    /* libpq may quote the decoded value too */
    char *dec = xmalloc(len + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (start[i] == '%' && i + 2 < len && isxdigit((unsigned char)start[i + 1]) &&
            isxdigit((unsigned char)start[i + 2])) {
            char hex[3] = {start[i + 1], start[i + 2], 0};
            dec[o++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            dec[o++] = start[i];
        }
    }
    dec[o] = '\0';
    if (o && strncmp(dec, start, len) != 0)
        sec->s[sec->n++] = dec;
    else
        free(dec);
}

/* The password of a URI's userinfo (scheme://user:password@host...), any scheme. */
static void uri_password(struct secrets *sec, const char *dsn)
{
    const char *p = strstr(dsn, "://");
    if (!p)
        return;
    p += 3;
    size_t auth = strcspn(p, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < auth; i++)
        if (p[i] == '@')
            at = p + i; /* the last '@' ends the userinfo */
    if (!at)
        return;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon)
        add(sec, colon + 1, (size_t)(at - colon - 1));
}

/* Values of password= and sslpassword=, in key words ('quoted' or bare) or URI queries. */
static void keyword_passwords(struct secrets *sec, const char *dsn)
{
    for (const char *p = dsn; (p = strstr(p, "password")) != NULL; p += 8) {
        const char *v = p + 8;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v != '=')
            continue;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v == '\'') {
            const char *e = ++v;
            while (*e && *e != '\'')
                e += e[0] == '\\' && e[1] ? 2 : 1;
            add(sec, v, (size_t)(e - v));
        } else {
            add(sec, v, strcspn(v, " \t\n&#"));
        }
    }
}

void dsn_redact(const char *dsn, const char *text, char *out, size_t outlen)
{
    if (!outlen)
        return;
    struct secrets sec = {{0}, 0};
    if (dsn) {
        uri_password(&sec, dsn);
        keyword_passwords(&sec, dsn);
    }
    struct strbuf sb;
    strbuf_init(&sb);
    for (const char *t = text; *t;) {
        size_t best = 0;
        for (int i = 0; i < sec.n; i++) {
            size_t len = strlen(sec.s[i]);
            if (len > best && strncmp(t, sec.s[i], len) == 0)
                best = len;
        }
        if (best) {
            strbuf_puts(&sb, "***");
            t += best;
        } else {
            strbuf_append(&sb, t++, 1);
        }
    }
    snprintf(out, outlen, "%s", sb.buf ? sb.buf : "");
    strbuf_destroy(&sb);
    for (int i = 0; i < sec.n; i++)
        free(sec.s[i]);
}
