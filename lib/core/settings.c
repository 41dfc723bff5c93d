/* Settings for both programs (settings.h): the table-driven loader, NAME_FILE secrets read
 * again when a connection or Kafka client is made, librdkafka properties from
 * <PREFIX>KAFKA_<NAME>, Kubernetes service link variables, and the checks both share. */
#include "core/settings.h"

#include <ctype.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"

/* ---- the loader ---------------------------------------------------------------------- */

static char **str_field(void *cfg, size_t offset)
{
    return (char **)((char *)cfg + offset);
}

static int *int_field(void *cfg, size_t offset)
{
    return (int *)((char *)cfg + offset);
}

static struct kafka_prop **kafka_field(const struct settings_spec *sp, void *cfg)
{
    return (struct kafka_prop **)((char *)cfg + sp->kafka_offset);
}

static size_t *n_kafka_field(const struct settings_spec *sp, void *cfg)
{
    return (size_t *)((char *)cfg + sp->n_kafka_offset);
}

static int parse_int(const char *v, long min, long max, int *out)
{
    if (!*v)
        return -1;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < min || n > max)
        return -1;
    *out = (int)n;
    return 0;
}

void settings_defaults(const struct settings_spec *sp, void *cfg)
{
    for (size_t i = 0; i < sp->n; i++) {
        const struct setting *s = &sp->table[i];
        if (s->type == SETTING_INT)
            parse_int(s->def, s->min, s->max, int_field(cfg, s->offset));
        else
            *str_field(cfg, s->offset) = xstrdup(s->def);
    }
}

/* Assigns one setting; origin names where the value came from. */
static int apply(void *cfg, const struct setting *s, const char *value, const char *origin,
                 char *err, size_t errlen)
{
    if (s->type == SETTING_INT) {
        if (parse_int(value, s->min, s->max, int_field(cfg, s->offset)) != 0)
            return set_err(err, errlen, "%s: expected an integer %ld..%ld, got '%s'", origin,
                           s->min, s->max, value);
        return 0;
    }
    char detail[512];
    if (s->check && s->check(value, detail, sizeof(detail)) != 0)
        return set_err(err, errlen, "%s: %s", origin, detail);
    char **f = str_field(cfg, s->offset);
    free(*f);
    *f = xstrdup(value);
    return 0;
}

static const struct setting *find_env(const struct settings_spec *sp, const char *name)
{
    for (size_t i = 0; i < sp->n; i++)
        if (strcmp(sp->table[i].env, name) == 0)
            return &sp->table[i];
    return NULL;
}

static const struct setting *find_flag(const struct settings_spec *sp, const char *name, size_t n)
{
    for (size_t i = 0; i < sp->n; i++) {
        const char *f = sp->table[i].flag;
        if (f && strlen(f) == n && strncmp(f, name, n) == 0)
            return &sp->table[i];
    }
    return NULL;
}

/* name is a <PREFIX>KAFKA_<NAME> variable. */
static int is_kafka_var(const struct settings_spec *sp, const char *name)
{
    size_t p = strlen(sp->prefix);
    return strncmp(name, sp->prefix, p) == 0 && strncmp(name + p, "KAFKA_", 6) == 0 && name[p + 6];
}

/* One environment variable "NAME=value". */
static int load_env_var(const struct settings_spec *sp, void *cfg, const char *var, char *err,
                        size_t errlen)
{
    const char *eq = strchr(var, '=');
    if (strncmp(var, sp->prefix, strlen(sp->prefix)) != 0 || !eq)
        return 0;
    char *name = xstrndup(var, (size_t)(eq - var));
    char *value = xstrdup(eq + 1);
    size_t n = strlen(name);
    int rc = 0;
    char *file = NULL; /* NAME_FILE: the value is a path to read */
    if (n > 5 && strcmp(name + n - 5, "_FILE") == 0) {
        name[n - 5] = '\0';
        if (find_env(sp, name) || is_kafka_var(sp, name)) {
            char origin[300];
            snprintf(origin, sizeof(origin), "%s_FILE", name);
            char *secret = settings_read_secret(value, origin, err, errlen);
            if (!secret) {
                rc = -1;
                goto out;
            }
            file = value;
            value = secret;
        } else {
            name[n - 5] = '_';
        }
    }
    const struct setting *s = find_env(sp, name);
    if (s) {
        rc = apply(cfg, s, value, name, err, errlen);
        if (rc == 0 && s->offset == sp->dsn_offset) { /* read again at each reconnect */
            char **f = str_field(cfg, sp->dsn_file_offset);
            free(*f);
            *f = file ? xstrdup(file) : NULL;
        }
    } else if (is_kafka_var(sp, name)) {
        if (settings_is_service_link(name)) {
            log_warn("ignoring %s: looks like a Kubernetes service link variable "
                     "(set enableServiceLinks: false on the pod)", name);
        } else {
            char *prop = settings_kafka_name(name + strlen(sp->prefix) + 6);
            settings_kafka_add(kafka_field(sp, cfg), n_kafka_field(sp, cfg), prop, value, name, file);
            free(prop);
        }
    } else {
#ifdef OUTBOX_TEST_HOOKS
        size_t p = strlen(sp->prefix); /* <PREFIX>TESTHOOK_*: test builds' fault points */
        if (strncmp(name + p, "TESTHOOK_", 9) != 0)
#endif
            log_warn("ignoring unknown environment variable %s", name);
    }
out:
    free(name);
    free(value);
    free(file);
    return rc;
}

int settings_load_env(const struct settings_spec *sp, void *cfg, char **envp, char *err, size_t errlen)
{
    for (char **e = envp; e && *e; e++)
        if (load_env_var(sp, cfg, *e, err, errlen) != 0)
            return -1;
    return 0;
}

int settings_flag(const struct settings_spec *sp, void *cfg, int argc, char **argv, int *i,
                  char *err, size_t errlen)
{
    const char *name = argv[*i] + 2;
    const char *eq = strchr(name, '=');
    size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
    int is_kafka = name_len == 5 && strncmp(name, "kafka", 5) == 0;
    const struct setting *s = is_kafka ? NULL : find_flag(sp, name, name_len);
    if (!is_kafka && !s)
        return 0;
    char flag[128];
    snprintf(flag, sizeof(flag), "--%.*s", (int)name_len, name);
    const char *value = eq ? eq + 1 : NULL;
    if (!value) {
        if (*i + 1 >= argc)
            return set_err(err, errlen, "%s: missing value", flag);
        value = argv[++*i];
    }
    if (is_kafka) {
        const char *peq = strchr(value, '=');
        if (!peq || peq == value)
            return set_err(err, errlen, "--kafka: expected name=value, got '%s'", value);
        char *prop = xstrndup(value, (size_t)(peq - value));
        char origin[300];
        snprintf(origin, sizeof(origin), "--kafka %s", prop);
        settings_kafka_add(kafka_field(sp, cfg), n_kafka_field(sp, cfg), prop, peq + 1, origin, NULL);
        free(prop);
        return 1;
    }
    if (apply(cfg, s, value, flag, err, errlen) != 0)
        return -1;
    if (s->offset == sp->dsn_offset) { /* the flag wins over <PREFIX>PG_DSN_FILE */
        char **f = str_field(cfg, sp->dsn_file_offset);
        free(*f);
        *f = NULL;
    }
    return 1;
}

int settings_check_kafka(const struct settings_spec *sp, const void *cfg, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int rc = settings_kafka_apply(conf, *kafka_field(sp, (void *)cfg), *n_kafka_field(sp, (void *)cfg),
                                  err, errlen);
    rd_kafka_conf_destroy(conf);
    return rc;
}

void settings_free(const struct settings_spec *sp, void *cfg)
{
    for (size_t i = 0; i < sp->n; i++)
        if (sp->table[i].type == SETTING_STRING) {
            char **f = str_field(cfg, sp->table[i].offset);
            free(*f);
            *f = NULL;
        }
    settings_kafka_free(*kafka_field(sp, cfg), *n_kafka_field(sp, cfg));
    *kafka_field(sp, cfg) = NULL;
    *n_kafka_field(sp, cfg) = 0;
    char **file = str_field(cfg, sp->dsn_file_offset);
    free(*file);
    *file = NULL;
}

void settings_print_help(const struct settings_spec *sp, FILE *out)
{
    for (size_t i = 0; i < sp->n; i++) {
        const struct setting *s = &sp->table[i];
        if (s->flag)
            fprintf(out, "  --%-22s %-28s [%s]\n      %s\n", s->flag, s->env, s->def, s->help);
        else
            fprintf(out, "  %-28s [%s]\n      %s\n", s->env, s->def, s->help);
    }
}

void settings_print_markdown(const struct settings_spec *sp, FILE *out)
{
    int flags = sp->n && sp->table[0].flag;
    fprintf(out, flags ? "| env | flag | default | meaning |\n|---|---|---|---|\n"
                       : "| env | default | meaning |\n|---|---|---|\n");
    for (size_t i = 0; i < sp->n; i++) {
        const struct setting *s = &sp->table[i];
        fprintf(out, "| %s |", s->env);
        if (flags)
            fprintf(out, " --%s |", s->flag);
        const char *tick = s->def[0] && s->type == SETTING_STRING ? "`" : "";
        fprintf(out, " %s%s%s | %s", tick, s->def, tick, s->help);
        if (s->type == SETTING_INT)
            fprintf(out, " (%ld..%ld)", s->min, s->max);
        fprintf(out, " |\n");
    }
    fprintf(out, "| %sKAFKA_<NAME> |%s see below | any librdkafka property; the env name maps "
                 "lower-case with `_` → `.` |\n", sp->prefix, flags ? " --kafka name=value |" : "");
}

/* ---- secrets and librdkafka properties ----------------------------------------------- */

void settings_kafka_add(struct kafka_prop **props, size_t *n, const char *name, const char *value,
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

void settings_kafka_free(struct kafka_prop *props, size_t n)
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
    return settings_current_secret(p->value, p->file, p->origin);
}

int settings_kafka_apply(rd_kafka_conf_t *conf, const struct kafka_prop *props, size_t n, char *err, size_t errlen)
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

char *settings_kafka_file_snapshot(const struct kafka_prop *props, size_t n)
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

int settings_kafka_files_changed(const struct kafka_prop *props, size_t n, const char *seen)
{
    if (!seen)
        return 0;
    char *now = settings_kafka_file_snapshot(props, n);
    int changed = now && strcmp(now, seen) != 0;
    free(now);
    return changed;
}

char *settings_current_secret(const char *value, const char *file, const char *origin)
{
    if (!file)
        return xstrdup(value);
    char err[512];
    char *v = settings_read_secret(file, origin, err, sizeof(err));
    if (!v) {
        log_warn("%s (the value read before is used)", err);
        return xstrdup(value);
    }
    return v;
}

/* Reads a NAME_FILE secret: whole file, one trailing newline removed. */
char *settings_read_secret(const char *path, const char *origin, char *err, size_t errlen)
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
int settings_is_service_link(const char *name)
{
    size_t n = strlen(name);
    if (n >= 5 && strcmp(name + n - 5, "_PORT") == 0)
        return 1;
    return strstr(name, "_PORT_") != NULL || strstr(name, "_SERVICE_HOST") != NULL ||
           strstr(name, "_SERVICE_PORT") != NULL;
}

char *settings_kafka_name(const char *suffix)
{
    char *name = xstrdup(suffix);
    for (char *p = name; *p; p++)
        *p = *p == '_' ? '.' : (char)tolower((unsigned char)*p);
    return name;
}


/* ---- checks ---------------------------------------------------------------------------- */

int settings_is_ident(const char *s, size_t n)
{
    if (n == 0 || n > 63 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return 0;
    return 1;
}

int settings_check_table(const char *v, char *err, size_t errlen)
{
    const char *dot = strchr(v, '.');
    int ok = dot ? settings_is_ident(v, (size_t)(dot - v)) && settings_is_ident(dot + 1, strlen(dot + 1))
                 : settings_is_ident(v, strlen(v));
    if (!ok)
        return set_err(err, errlen,
                       "expected [schema.]table of letters, digits and '_' (each part 1..63 "
                       "characters, not starting with a digit), got '%s'", v);
    /* the longest name derived from it, "<table>_lease_log_partition_idx", must fit in 63 */
    if (strlen(dot ? dot + 1 : v) > 39)
        return set_err(err, errlen, "the table name '%s' is longer than 39 characters, too long "
                       "for the names derived from it (such as <table>_lease_log_partition_idx, "
                       "63 at most)", dot ? dot + 1 : v);
    return 0;
}

int settings_parse_duration(const char *v, int *seconds)
{
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || errno || n < 0)
        return -1;
    long mult = 1;
    if (*end == 's')
        end++;
    else if (*end == 'm')
        mult = 60, end++;
    else if (*end == 'h')
        mult = 3600, end++;
    else if (*end == 'd')
        mult = 86400, end++;
    if (*end || n > 3650L * 86400 / mult)
        return -1;
    *seconds = (int)(n * mult);
    return 0;
}

int settings_kafka_has(const struct kafka_prop *props, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(props[i].name, name) == 0)
            return 1;
    return 0;
}
