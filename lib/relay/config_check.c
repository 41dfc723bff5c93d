/* The relay's settings' value checks, one per kind of value (the settings table in
 * config.c names them): each returns 0, or -1 with what is wrong in err. */
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "relay/config_int.h"
#include "core/amqp.h"
#include "core/dsn.h"
#include "core/util.h"

int config_check_log_level(const char *v, char *err, size_t errlen)
{
    enum log_level l;
    if (log_level_parse(v, &l) != 0)
        return set_err(err, errlen, "expected one of debug, info, warn, error, got '%s'", v);
    return 0;
}

int config_check_log_format(const char *v, char *err, size_t errlen)
{
    enum log_format f;
    if (log_format_parse(v, &f) != 0)
        return set_err(err, errlen, "expected text or json, got '%s'", v);
    return 0;
}

int config_check_dsn(const char *v, char *err, size_t errlen)
{
    if (v[0] == '\0')
        return 0;
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(v, &perr);
    if (!opts) {
        /* libpq's message quotes the bad part, which may hold the password */
        char line[512];
        dsn_redact(v, perr ? perr : "out of memory", line, sizeof(line));
        line[strcspn(line, "\n")] = '\0';
        PQfreemem(perr);
        return set_err(err, errlen, "not a valid libpq conninfo or URI: %s", line);
    }
    PQconninfoFree(opts);
    return 0;
}

int config_check_topic_allow(const char *v, char *err, size_t errlen)
{
    for (const char *p = v; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 0)
            return set_err(err, errlen, "expected comma-separated glob patterns, got an empty one in '%s'", v);
        p += n + (p[n] == ',');
    }
    return 0;
}

int config_topic_allowed(const char *allow, const char *topic)
{
    if (!allow || !allow[0])
        return topic[0] != '_';
    char pattern[256];
    for (const char *p = allow; *p;) {
        size_t n = strcspn(p, ",");
        snprintf(pattern, sizeof(pattern), "%.*s", (int)n, p);
        if (fnmatch(pattern, topic, 0) == 0)
            return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

int config_check_channel(const char *v, char *err, size_t errlen)
{
    if (v[0] != '\0' && !settings_is_ident(v, strlen(v)))
        return set_err(err, errlen,
                       "expected a channel name of letters, digits and '_' (1..63 characters) "
                       "or empty to disable LISTEN, got '%s'", v);
    return 0;
}

int config_check_topic_template(const char *v, char *err, size_t errlen)
{
    if (v[0] == '\0')
        return set_err(err, errlen, "must not be empty");
    for (const char *p = v; *p;) {
        if (*p == '{') {
            const char *end = strchr(p, '}');
            if (!end)
                return set_err(err, errlen, "unclosed '{' in '%s'", v);
            size_t n = (size_t)(end - p + 1);
            if (!(n == 16 && strncmp(p, "{aggregate_type}", n) == 0) &&
                !(n == 12 && strncmp(p, "{event_type}", n) == 0))
                return set_err(err, errlen,
                               "unknown placeholder '%.*s' (allowed: {aggregate_type}, "
                               "{event_type})", (int)n, p);
            p = end + 1;
            continue;
        }
        if (!(isalnum((unsigned char)*p) || *p == '.' || *p == '_' || *p == '-'))
            return set_err(err, errlen,
                           "character '%c' is not allowed in a Kafka topic name "
                           "(allowed: letters, digits, '.', '_', '-')", *p);
        p++;
    }
    if (strlen(v) > 249)
        return set_err(err, errlen, "longer than Kafka's 249-character topic limit");
    return 0;
}

int config_check_duration(const char *v, char *err, size_t errlen)
{
    int s;
    if (settings_parse_duration(v, &s) != 0)
        return set_err(err, errlen, "expected a duration like 3600, 90s, 15m, 24h or 7d (0 "
                       "disables), got '%s'", v);
    return 0;
}

int config_check_policy(const char *v, char *err, size_t errlen)
{
    if (strcmp(v, "block") != 0 && strcmp(v, "skip") != 0)
        return set_err(err, errlen, "expected block or skip, got '%s'", v);
    return 0;
}

int config_check_on_sent(const char *v, char *err, size_t errlen)
{
    if (v[0] && strcmp(v, "mark") != 0 && strcmp(v, "delete") != 0 && strcmp(v, "keep") != 0)
        return set_err(err, errlen, "expected mark, delete or keep, got '%s'", v);
    return 0;
}

int config_check_sink(const char *v, char *err, size_t errlen)
{
    if (strcmp(v, "kafka") != 0 && strcmp(v, "rabbitmq") != 0)
        return set_err(err, errlen, "expected kafka or rabbitmq, got '%s'", v);
    return 0;
}

int config_check_rabbitmq_url(const char *v, char *err, size_t errlen)
{
    return v[0] ? rmq_check_url(v, err, errlen) : 0;
}

/* An AMQP short string of printable characters. */
int config_check_rabbitmq_exchange(const char *v, char *err, size_t errlen)
{
    size_t n = strlen(v);
    if (n == 0 || n > 255)
        return set_err(err, errlen, "expected an exchange name of 1 to 255 characters");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x21 || (unsigned char)v[i] == 0x7f)
            return set_err(err, errlen, "exchange name '%s': no spaces or control characters", v);
    return 0;
}

int config_check_layout(const char *v, char *err, size_t errlen)
{
    if (strcmp(v, "native") != 0 && strcmp(v, "debezium") != 0)
        return set_err(err, errlen, "expected native or debezium, got '%s'", v);
    return 0;
}

/* One item of OUTBOX_ADDITIONAL_PLACEMENT ("column:header[:name]", the placements of the
 * Debezium event router's table.fields.additional.placement that map to Kafka headers).
 * Columns and header names are plain identifiers: they become quoted SQL identifiers and
 * JSON keys. */
int config_placement_next(const char **cursor, char column[CONFIG_IDENT_MAX],
                          char header[CONFIG_IDENT_MAX], char *err, size_t errlen)
{
    const char *p = *cursor;
    if (!*p)
        return 0;
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char item[3 * CONFIG_IDENT_MAX];
    if (n == 0 || n >= sizeof(item))
        return set_err(err, errlen, "expected column:header[:name],... got an %s item",
                       n ? "overlong" : "empty");
    memcpy(item, p, n);
    item[n] = '\0';
    char *fields[4] = {0};
    int nf = 0;
    for (char *f = item; f && nf < 4; nf++) {
        fields[nf] = f;
        char *c = strchr(f, ':');
        if (c)
            *c++ = '\0';
        f = c;
    }
    if (nf < 2 || nf > 3)
        return set_err(err, errlen, "expected column:header[:name], got '%.*s'", (int)n, p);
    if (strcmp(fields[1], "header") != 0)
        return set_err(err, errlen, "placement '%s' of column '%s' is not supported: only "
                       "header (the relay sends the payload as the value, unwrapped, so "
                       "there is no envelope; the partition follows the key)", fields[1], fields[0]);
    for (int i = 0; i < nf; i += 2) {
        const char *id = fields[i];
        int ok = (isalpha((unsigned char)id[0]) || id[0] == '_') && strlen(id) < CONFIG_IDENT_MAX;
        for (const char *c = id; ok && *c; c++)
            ok = isalnum((unsigned char)*c) || *c == '_';
        if (!ok)
            return set_err(err, errlen, "'%s' in '%.*s' is not a plain identifier (letters, "
                           "digits, _; at most %d)", id, (int)n, p, CONFIG_IDENT_MAX - 1);
    }
    const char *hname = nf == 3 ? fields[2] : fields[0];
    if (strcmp(hname, "id") == 0 || strcmp(hname, "outbox_lease") == 0)
        return set_err(err, errlen, "header name '%s' is reserved (the row's id, the relay's "
                       "lease token)", hname);
    if (end && !end[1])
        return set_err(err, errlen, "trailing comma");
    /* both are plain identifiers shorter than CONFIG_IDENT_MAX (checked above) */
    memcpy(column, fields[0], strlen(fields[0]) + 1);
    memcpy(header, hname, strlen(hname) + 1);
    *cursor = end ? end + 1 : p + n;
    return 1;
}

int config_check_placement(const char *v, char *err, size_t errlen)
{
    char column[CONFIG_IDENT_MAX], header[CONFIG_IDENT_MAX];
    const char *list = v;
    int rc;
    while ((rc = config_placement_next(&v, column, header, err, errlen)) == 1) {
        /* a header name twice would make every row's headers unpublishable */
        const char *other = list;
        char c2[CONFIG_IDENT_MAX], h2[CONFIG_IDENT_MAX];
        int same = 0;
        while (other < v && config_placement_next(&other, c2, h2, err, errlen) == 1 && other < v)
            same += strcmp(h2, header) == 0;
        if (same)
            return set_err(err, errlen, "header name '%s' is given twice", header);
    }
    return rc;
}

int config_check_uri_reference(const char *v, char *err, size_t errlen)
{
    if (!v[0])
        return set_err(err, errlen, "expected a URI-reference (RFC 3986), got an empty value");
    size_t scheme_end = strcspn(v, ":/?#");
    if (v[scheme_end] == ':') { /* a scheme: a relative reference cannot start with "x:" */
        int ok = scheme_end > 0 && isalpha((unsigned char)v[0]);
        for (size_t i = 1; ok && i < scheme_end; i++)
            ok = isalnum((unsigned char)v[i]) || v[i] == '+' || v[i] == '-' || v[i] == '.';
        if (!ok)
            return set_err(err, errlen, "'%s' is not a URI-reference (RFC 3986): '%.*s' before "
                           "the first ':' is not a scheme (letter, then letters, digits, + - .), "
                           "and a relative reference cannot have a ':' in its first segment",
                           v, (int)scheme_end, v);
    }
    const char *after_scheme = v[scheme_end] == ':' ? v + scheme_end + 1 : v;
    const char *authority_end = after_scheme;
    if (strncmp(after_scheme, "//", 2) == 0)
        authority_end = after_scheme + 2 + strcspn(after_scheme + 2, "/?#");
    int hashes = 0;
    for (const char *c = v; *c; c++) {
        unsigned char u = (unsigned char)*c;
        if (u == '%') {
            if (!isxdigit((unsigned char)c[1]) || !isxdigit((unsigned char)c[2]))
                return set_err(err, errlen, "'%s' is not a URI-reference (RFC 3986): '%%' at "
                               "offset %d is not followed by two hex digits", v, (int)(c - v));
            c += 2;
            continue;
        }
        if ((u == '[' || u == ']') && !(c >= after_scheme + 2 && c < authority_end))
            return set_err(err, errlen, "'%s' is not a URI-reference (RFC 3986): '%c' outside "
                           "an authority's IP literal", v, u);
        hashes += u == '#';
        if (!isalnum(u) && !strchr("-._~:/?#[]@!$&'()*+,;=", u)) /* u is not NUL here */
            return set_err(err, errlen, "'%s' is not a URI-reference (RFC 3986): character "
                           "0x%02x at offset %d must be percent-encoded", v, u, (int)(c - v));
    }
    if (hashes > 1)
        return set_err(err, errlen, "'%s' is not a URI-reference (RFC 3986): more than one '#'", v);
    return 0;
}

int config_check_ce_source(const char *v, char *err, size_t errlen)
{
    return v[0] ? config_check_uri_reference(v, err, errlen) : 0;
}

/* A media type as a header value: type/subtype, optionally with parameters; printable. */
int config_check_content_type(const char *v, char *err, size_t errlen)
{
    if (!v[0])
        return 0;
    const char *slash = strchr(v, '/');
    if (!slash || slash == v || !slash[1] || slash[1] == ';' || slash[1] == ' ')
        return set_err(err, errlen, "expected a media type such as application/json, got '%s'", v);
    for (const char *c = v; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            return set_err(err, errlen, "expected printable ASCII, got character 0x%02x",
                           (unsigned char)*c);
    return 0;
}

int config_check_payload_type(const char *v, char *err, size_t errlen)
{
    if (v[0] && strcmp(v, "jsonb") != 0 && strcmp(v, "json") != 0 && strcmp(v, "text") != 0 &&
        strcmp(v, "bytea") != 0)
        return set_err(err, errlen, "expected jsonb, json, text or bytea, got '%s'", v);
    return 0;
}

int config_check_optional_topic(const char *v, char *err, size_t errlen)
{
    if (v[0] == '\0')
        return 0;
    if (strchr(v, '{'))
        return set_err(err, errlen, "a fixed topic name, not a template, got '%s'", v);
    return config_check_topic_template(v, err, errlen);
}

int config_check_http_addr(const char *v, char *err, size_t errlen)
{
    if (v[0] == '\0')
        return 0;
    const char *colon = strrchr(v, ':');
    char *end;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon[1] == '\0' || *end || port < 1 || port > 65535)
        return set_err(err, errlen, "expected host:port or :port (empty disables), got '%s'", v);
    return 0;
}

/* It becomes part of application_name (63 bytes): "outbox-relay " and up to 50 more. */
int config_check_relay_name(const char *v, char *err, size_t errlen)
{
    if (strlen(v) > 50)
        return set_err(err, errlen, "expected at most 50 characters, got %zu", strlen(v));
    for (const char *c = v; *c; c++)
        if (*c < 0x21 || *c > 0x7e || *c == '\'' || *c == '\\')
            return set_err(err, errlen, "expected printable ASCII without spaces, quotes or "
                           "backslashes, got character 0x%02x", (unsigned char)*c);
    return 0;
}
