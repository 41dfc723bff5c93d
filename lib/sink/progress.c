/* Exactly-once's progress record (progress.h). */
#include "sink/progress.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_of(int64_t id, size_t cap)
{
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (cap - 1);
}

/* Where id is, or the empty slot where it would go (removed slots are passed over). */
static size_t find(const struct progress_rows *c, int64_t id)
{
    size_t i = slot_of(id, c->cap);
    while (c->id[i] != 0 && c->id[i] != id)
        i = (i + 1) & (c->cap - 1);
    return i;
}

static void grow(struct progress_rows *c)
{
    struct progress_rows old = *c;
    c->cap = old.cap && old.n * 4 > old.cap ? old.cap * 2 : old.cap ? old.cap : 64;
    c->id = xcalloc(c->cap, sizeof(*c->id));
    c->event_id = xcalloc(c->cap, sizeof(*c->event_id));
    c->ver = xcalloc(c->cap, sizeof(*c->ver));
    c->n = c->removed = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.id[i] > 0) {
            size_t j = find(c, old.id[i]);
            c->id[j] = old.id[i];
            c->event_id[j] = old.event_id[i]; /* moved, not copied */
            c->ver[j] = old.ver[i];
            c->n++;
        }
    free(old.id);
    free(old.event_id);
    free(old.ver);
}

void progress_put(struct progress_rows *c, int64_t id, const char *event_id)
{
    if ((c->n + c->removed + 1) * 2 > c->cap)
        grow(c);
    size_t i = find(c, id);
    if (c->id[i] == id)
        free(c->event_id[i]);
    else
        c->n++;
    c->id[i] = id;
    c->event_id[i] = xstrdup(event_id);
    c->ver[i] = ++c->next_ver;
}

uint64_t progress_version(const struct progress_rows *c, int64_t id)
{
    if (!c->cap)
        return 0;
    size_t i = find(c, id);
    return c->id[i] == id ? c->ver[i] : 0;
}

void progress_del_version(struct progress_rows *c, int64_t id, uint64_t ver)
{
    if (progress_version(c, id) == ver)
        progress_del(c, id);
}

void progress_del(struct progress_rows *c, int64_t id)
{
    if (!c->cap)
        return;
    size_t i = find(c, id);
    if (c->id[i] != id)
        return;
    free(c->event_id[i]);
    c->event_id[i] = NULL;
    c->id[i] = -1;
    c->n--;
    c->removed++;
}

int progress_has(const struct progress_rows *c, int64_t id, const char *event_id)
{
    if (!c->cap)
        return 0;
    size_t i = find(c, id);
    return c->id[i] == id && strcmp(c->event_id[i], event_id) == 0;
}

void progress_clear(struct progress_rows *c)
{
    for (size_t i = 0; i < c->cap; i++)
        free(c->event_id[i]);
    free(c->id);
    free(c->event_id);
    free(c->ver);
    uint64_t next_ver = c->next_ver; /* (versions are never reused) */
    memset(c, 0, sizeof(*c));
    c->next_ver = next_ver;
}

static void add_rows(const struct progress_rows *c, struct strbuf *out, int *first)
{
    for (size_t i = 0; c && i < c->cap; i++)
        if (c->id[i] > 0) {
            strbuf_printf(out, "%s[%lld,", *first ? "" : ",", (long long)c->id[i]);
            strbuf_json_string(out, c->event_id[i], strlen(c->event_id[i]));
            strbuf_puts(out, "]");
            *first = 0;
        }
}

void progress_value(const struct progress_rows *a, const struct progress_rows *b, struct strbuf *out)
{
    int first = 1;
    strbuf_puts(out, "{\"v\":1,\"rows\":[");
    add_rows(a, out, &first);
    add_rows(b, out, &first);
    strbuf_puts(out, "]}");
}

int progress_parse(const char *value, size_t len, int64_t **ids, char ***event_ids, size_t *n,
                   char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_loadb(value, len, 0, &jerr);
    json_t *rows = root ? json_object_get(root, "rows") : NULL;
    *ids = NULL;
    *event_ids = NULL;
    *n = 0;
    if (!json_is_array(rows) || json_integer_value(json_object_get(root, "v")) != 1) {
        snprintf(err, errlen, "the progress record is not one this relay writes (%s)",
                 root ? "no version 1 rows" : jerr.text);
        json_decref(root);
        return -1;
    }
    size_t count = json_array_size(rows);
    *ids = xcalloc(count ? count : 1, sizeof(**ids));
    *event_ids = xcalloc(count ? count : 1, sizeof(**event_ids));
    for (size_t i = 0; i < count; i++) {
        json_t *row = json_array_get(rows, i);
        json_t *id = json_array_get(row, 0), *eid = json_array_get(row, 1);
        if (!json_is_integer(id) || json_integer_value(id) <= 0 || !json_is_string(eid)) {
            for (size_t k = 0; k < *n; k++)
                free((*event_ids)[k]);
            free(*ids);
            free(*event_ids);
            *ids = NULL;
            *event_ids = NULL;
            *n = 0;
            snprintf(err, errlen, "the progress record's row %zu is not [id, \"event id\"]", i);
            json_decref(root);
            return -1;
        }
        (*ids)[*n] = json_integer_value(id);
        (*event_ids)[(*n)++] = xstrdup(json_string_value(eid));
    }
    json_decref(root);
    return 0;
}
