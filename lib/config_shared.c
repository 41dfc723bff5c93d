/* What both programs' settings share (outbox-relay's config.c, outbox-inbox's
 * inbox_config.c): NAME_FILE secrets, read again when a connection or a Kafka client is
 * made; librdkafka properties from <PREFIX>_KAFKA_<NAME>; Kubernetes service link variables. */
#include <ctype.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "util.h"

void config_kafka_add(struct kafka_prop **props, size_t *n, const char *name, const char *value,
                      const char *origin, const char *file)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*props)[i].name, name) == 0) {
            free((*props)[i].value);
            free((*props)[i].origin);
            free((*props)[i].file);
            (*props)[i].value = xstrdup(value);
            (*props)[i].origin = xstrdup(origin);
            (*props)[i].file = file ? xstrdup(file) : NULL;
            return;
        }
    }
    *props = xrealloc(*props, (*n + 1) * sizeof(**props));
    (*props)[(*n)++] = (struct kafka_prop){xstrdup(name), xstrdup(value), xstrdup(origin),
                                           file ? xstrdup(file) : NULL};
}

void config_kafka_free(struct kafka_prop *props, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(props[i].name);
        free(props[i].value);
        free(props[i].origin);
        free(props[i].file);
    }
    free(props);
}

/* A property's value now: its file's content when it came from one. Caller frees. */
static char *kafka_prop_current(const struct kafka_prop *p)
{
    return config_current_secret(p->value, p->file, p->origin);
}

int config_kafka_apply(rd_kafka_conf_t *conf, const struct kafka_prop *props, size_t n, char *err, size_t errlen)
{
    char kerr[512];
    for (size_t i = 0; i < n; i++) {
        char *value = kafka_prop_current(&props[i]);
        rd_kafka_conf_res_t res = rd_kafka_conf_set(conf, props[i].name, value, kerr, sizeof(kerr));
        free(value);
        if (res != RD_KAFKA_CONF_OK)
            return set_err(err, errlen, "%s: %s", props[i].origin, kerr);
    }
    return 0;
}

char *config_kafka_file_snapshot(const struct kafka_prop *props, size_t n)
{
    struct strbuf sb;
    strbuf_init(&sb);
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        if (!props[i].file)
            continue;
        char *value = kafka_prop_current(&props[i]);
        strbuf_printf(&sb, "%s=%zu:%s\n", props[i].name, strlen(value), value);
        free(value);
        any = 1;
    }
    if (!any) {
        strbuf_destroy(&sb);
        return NULL;
    }
    return sb.buf;
}

int config_kafka_files_changed(const struct kafka_prop *props, size_t n, const char *seen)
{
    if (!seen)
        return 0;
    char *now = config_kafka_file_snapshot(props, n);
    int changed = now && strcmp(now, seen) != 0;
    free(now);
    return changed;
}

char *config_current_secret(const char *value, const char *file, const char *origin)
{
    if (!file)
        return xstrdup(value);
    char err[512];
    char *v = config_read_secret(file, origin, err, sizeof(err));
    if (!v) {
        log_warn("%s (the value read before is used)", err);
        return xstrdup(value);
    }
    return v;
}

/* Reads a NAME_FILE secret: whole file, one trailing newline removed. */
char *config_read_secret(const char *path, const char *origin, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, errlen, "%s: cannot read '%s': %s", origin, path, strerror(errno));
        return NULL;
    }
    struct strbuf sb;
    strbuf_init(&sb);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        strbuf_append(&sb, chunk, n);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        strbuf_destroy(&sb);
        set_err(err, errlen, "%s: error reading '%s'", origin, path);
        return NULL;
    }
    if (sb.len && sb.buf[sb.len - 1] == '\n')
        sb.buf[--sb.len] = '\0';
    if (sb.len && sb.buf[sb.len - 1] == '\r')
        sb.buf[--sb.len] = '\0';
    return sb.buf;
}

/* Kubernetes service links for a Service named "outbox"/"outbox-kafka" produce variables
 * such as OUTBOX_KAFKA_PORT or OUTBOX_KAFKA_SERVICE_HOST that nobody set on purpose. */
int config_is_service_link(const char *name)
{
    size_t n = strlen(name);
    if (n >= 5 && strcmp(name + n - 5, "_PORT") == 0)
        return 1;
    return strstr(name, "_PORT_") != NULL || strstr(name, "_SERVICE_HOST") != NULL ||
           strstr(name, "_SERVICE_PORT") != NULL;
}

char *config_kafka_name(const char *suffix)
{
    char *name = xstrdup(suffix);
    for (char *p = name; *p; p++)
        *p = *p == '_' ? '.' : (char)tolower((unsigned char)*p);
    return name;
}

/* Checks every librdkafka property by setting it on a scratch configuration. */
