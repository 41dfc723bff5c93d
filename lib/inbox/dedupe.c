/* Dedupe keys and the small parsing they need. */
#include "inbox/dedupe.h"

#include <stdlib.h>
#include <string.h>

json_t *inbox_json_pointer(json_t *doc, const char *pointer)
{
    if (!doc || !pointer)
        return NULL;
    if (!*pointer)
        return doc;
    if (*pointer != '/')
        return NULL;
    json_t *at = doc;
    const char *p = pointer + 1;
    for (;;) {
        size_t n = strcspn(p, "/");
        char *token = xmalloc(n + 1);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                token[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                token[k++] = p[i];
            }
        }
        token[k] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, token);
        } else if (json_is_array(at)) {
            char *end;
            unsigned long idx = strtoul(token, &end, 10);
            at = *token && !*end && (token[0] != '0' || !token[1]) ? json_array_get(at, idx) : NULL;
        } else {
            at = NULL;
        }
        free(token);
        if (!at || !p[n])
            return at;
        p += n + 1;
    }
}

char *inbox_header(const struct source_msg *m, const char *name)
{
    size_t len = 0;
    const char *val = m ? source_header_last(m, name, &len) : NULL;
    if (!val)
        return NULL;
    if (memchr(val, '\0', len))
        return NULL; /* a header value that is not text cannot be a key */
    return xstrndup(val, len);
}

int inbox_is_uuid(const char *s)
{
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (size_t i = 0; i < sizeof(shape) - 1; i++) {
        char c = s[i];
        if (shape[i] == '-' ? c != '-'
                            : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return 0;
    }
    return s[sizeof(shape) - 1] == '\0';
}

/* A header's value when present and not empty (caller frees), else NULL. */
static char *nonempty_header(const struct source_msg *m, const char *name)
{
    char *v = inbox_header(m, name);
    if (v && !*v) {
        free(v);
        v = NULL;
    }
    return v;
}

char *inbox_event_id(const struct inbox_config *cfg, const struct source_msg *m)
{
    if (strcmp(cfg->event_id_header, "auto") != 0)
        return nonempty_header(m, cfg->event_id_header);
    char *id = nonempty_header(m, "event_id");
    if (!id)
        id = nonempty_header(m, "id");
    if (!id)
        id = nonempty_header(m, "ce_id");
    return id;
}

/* The event identity as the dedupe key: the configured header's value; with `auto`, event_id,
 * else id, else ["ce_source","ce_id"] as a JSON array (CloudEvents makes the pair unique, not
 * the id alone; the array keeps "a/b"+"c" apart from "a"+"b/c"). The order is fixed so that a
 * producer turning CloudEvents on (this relay keeps event_id or id beside the ce_ headers)
 * does not change the key of an event redelivered across the switch. */
static int identity_key(const struct inbox_config *cfg, const struct source_msg *m, struct strbuf *out,
                        char *why, size_t whylen)
{
    int autodetect = strcmp(cfg->event_id_header, "auto") == 0;
    char *id = nonempty_header(m, autodetect ? "event_id" : cfg->event_id_header);
    if (!id && autodetect)
        id = nonempty_header(m, "id");
    if (id) {
        strbuf_puts(out, id);
        free(id);
        return 0;
    }
    if (!autodetect)
        return set_err(why, whylen, "no dedupe key: the message has no '%s' header", cfg->event_id_header);
    char *source = nonempty_header(m, "ce_source"), *ce_id = nonempty_header(m, "ce_id");
    char *text = NULL;
    if (source && ce_id) {
        json_t *pair = json_pack("[ss]", source, ce_id);
        text = pair ? json_dumps(pair, JSON_COMPACT) : NULL; /* NULL: not UTF-8 */
        json_decref(pair);
    }
    free(source);
    free(ce_id);
    if (!text)
        return set_err(why, whylen, "no dedupe key: the message has no event_id or id header, nor "
                       "CloudEvents' ce_source and ce_id (as UTF-8)");
    strbuf_puts(out, text);
    free(text);
    return 0;
}

int inbox_dedupe_key(const struct inbox_config *cfg, const struct source_msg *m, json_t *payload,
                     struct strbuf *out, char *why, size_t whylen)
{
    strbuf_reset(out);
    if (cfg->n_key_parts == 0)
        return identity_key(cfg, m, out, why, whylen);
    json_t *parts = json_array();
    for (int i = 0; i < cfg->n_key_parts; i++) {
        const struct inbox_key_part *kp = &cfg->key_parts[i];
        if (kp->from_payload) {
            json_t *v = payload ? inbox_json_pointer(payload, kp->name) : NULL;
            if (!v || json_is_null(v)) {
                json_decref(parts);
                return set_err(why, whylen, "no dedupe key: the payload has no value at %s%s", kp->name,
                               payload ? "" : " (the value is not JSON)");
            }
            json_array_append(parts, v);
        } else {
            char *h = inbox_header(m, kp->name);
            if (!h) {
                json_decref(parts);
                return set_err(why, whylen, "no dedupe key: the message has no '%s' header", kp->name);
            }
            json_array_append_new(parts, json_string(h));
            free(h);
        }
    }
    char *text = json_dumps(parts, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(parts);
    if (!text)
        return set_err(why, whylen, "no dedupe key: a part is not valid UTF-8");
    strbuf_puts(out, text);
    free(text);
    return 0;
}
