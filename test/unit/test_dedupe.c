/* Unit tests: JSON pointers and the inbox's dedupe keys. */
#include <stdlib.h>
#include <string.h>

#include "inbox/dedupe.h"
#include "inbox/inbox_config.h"
#include "tap.h"

static void test_pointer(void)
{
    json_t *doc = json_loads("{\"a\": {\"b\": [10, {\"c\": \"x\"}]}, \"m~n\": 1, \"p/q\": 2, \"\": 3}", 0, NULL);
    ok(inbox_json_pointer(doc, "") == doc, "empty pointer: the document");
    is_int((int)json_integer_value(inbox_json_pointer(doc, "/a/b/0")), 10, "array index");
    is_str(json_string_value(inbox_json_pointer(doc, "/a/b/1/c")), "x", "nested object in array");
    is_int((int)json_integer_value(inbox_json_pointer(doc, "/m~0n")), 1, "~0 is ~");
    is_int((int)json_integer_value(inbox_json_pointer(doc, "/p~1q")), 2, "~1 is /");
    is_int((int)json_integer_value(inbox_json_pointer(doc, "/")), 3, "the empty key");
    ok(inbox_json_pointer(doc, "/a/b/2") == NULL, "index past the end");
    ok(inbox_json_pointer(doc, "/a/b/01") == NULL, "leading zero is not an index");
    ok(inbox_json_pointer(doc, "/a/x") == NULL, "missing member");
    ok(inbox_json_pointer(doc, "a") == NULL, "pointer without leading slash");
    ok(inbox_json_pointer(doc, "/a/b/0/z") == NULL, "through a number");
    json_decref(doc);
}

/* A message carrying only headers, as a source hands it over. */
struct test_msg {
    struct source_header h[8];
    struct source_msg m;
};

static struct test_msg *msg_new(void)
{
    struct test_msg *t = calloc(1, sizeof(*t));
    t->m.headers = t->h;
    return t;
}

static void msg_add(struct test_msg *t, const char *name, const char *value)
{
    t->h[t->m.n_headers++] = (struct source_header){name, value, strlen(value)};
}

static void test_keys(void)
{
    struct inbox_config cfg;
    char err[512] = "";
    char *env[] = {"INBOX_PG_DSN=host=x", "INBOX_TOPICS=t", "INBOX_HANDLER=h", NULL};
    char *argv[] = {"outbox-inbox", NULL};
    is_int(inbox_config_load(&cfg, env, 1, argv, err, sizeof(err)), 0, "defaults load: %s", err);
    is_str(cfg.name, "h", "INBOX_NAME defaults to the handler's name");
    struct test_msg *h = msg_new();
    msg_add(h, "event_id", "6f1c2a4e-0000-4000-8000-000000000001");
    msg_add(h, "source", "ERP");
    struct strbuf key;
    strbuf_init(&key);
    char why[256] = "";
    is_int(inbox_dedupe_key(&cfg, &h->m, NULL, &key, why, sizeof(why)), 0, "event id key");
    is_str(key.buf, "6f1c2a4e-0000-4000-8000-000000000001", "the event_id header is the key");
    inbox_config_destroy(&cfg);

    char *env2[] = {"INBOX_PG_DSN=host=x", "INBOX_TOPICS=t", "INBOX_HANDLER=s.h",
                    "INBOX_DEDUPE_KEY=header:source,payload:/doc/number", NULL};
    is_int(inbox_config_load(&cfg, env2, 1, argv, err, sizeof(err)), 0, "business key loads: %s", err);
    is_str(cfg.name, "h", "INBOX_NAME: the handler's name without its schema");
    json_t *p = json_loads("{\"doc\": {\"number\": 42}}", 0, NULL);
    is_int(inbox_dedupe_key(&cfg, &h->m, p, &key, why, sizeof(why)), 0, "business key");
    is_str(key.buf, "[\"ERP\",42]", "the parts as a JSON array");
    json_t *q = json_loads("{\"doc\": {}}", 0, NULL);
    is_int(inbox_dedupe_key(&cfg, &h->m, q, &key, why, sizeof(why)), -1, "missing field: no key");
    ok(strstr(why, "no value at /doc/number") != NULL, "says which part: %s", why);
    struct test_msg *h2 = msg_new();
    is_int(inbox_dedupe_key(&cfg, &h2->m, p, &key, why, sizeof(why)), -1, "missing header: no key");
    ok(strstr(why, "no 'source' header") != NULL, "names the header: %s", why);
    inbox_config_destroy(&cfg);
    json_decref(p);
    json_decref(q);
    free(h);
    free(h2);
    strbuf_destroy(&key);

    ok(inbox_is_uuid("6f1c2a4e-0000-4000-8000-00000000000A"), "a uuid");
    ok(!inbox_is_uuid("6f1c2a4e-0000-4000-8000-00000000000"), "too short");
    ok(!inbox_is_uuid("6f1c2a4e-0000-4000-8000-0000000000001"), "too long");
    ok(!inbox_is_uuid("6f1c2a4e00000-4000-8000-000000000001"), "dash misplaced");
}

/* The event identity with INBOX_EVENT_ID_HEADER=auto (the default) and with a named header. */
static void test_identity(void)
{
    struct inbox_config cfg;
    char err[512] = "", why[256] = "";
    char *env[] = {"INBOX_PG_DSN=host=x", "INBOX_TOPICS=t", "INBOX_HANDLER=h", NULL};
    char *argv[] = {"outbox-inbox", NULL};
    is_int(inbox_config_load(&cfg, env, 1, argv, err, sizeof(err)), 0, "defaults load: %s", err);
    is_str(cfg.event_id_header, "auto", "the identity is found automatically by default");
    struct strbuf key;
    strbuf_init(&key);
    static const struct {
        const char *headers[8]; /* name, value pairs */
        const char *key, *event_id;
    } cases[] = {
        {{"event_id", "e1", "id", "d1", "ce_source", "/s", "ce_id", "c1"}, "e1", "e1"},  /* this relay */
        {{"id", "d1", "ce_source", "/s", "ce_id", "c1"}, "d1", "d1"},                    /* Debezium */
        {{"ce_source", "/orders", "ce_id", "42"}, "[\"/orders\",\"42\"]", "42"},       /* CloudEvents */
        {{"ce_source", "/a\"b", "ce_id", "x"}, "[\"/a\\\"b\",\"x\"]", "x"},          /* JSON-escaped */
        {{"event_id", "", "ce_source", "/s", "ce_id", "c1"}, "[\"/s\",\"c1\"]", "c1"},  /* empty is none */
        {{"ce_id", "c1"}, NULL, "c1"},                                                  /* no source */
        {{"ce_source", "/s"}, NULL, NULL},                                              /* no id */
        {{"other", "x"}, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct test_msg *h = msg_new();
        for (int j = 0; j < 8 && cases[i].headers[j]; j += 2)
            msg_add(h, cases[i].headers[j], cases[i].headers[j + 1]);
        why[0] = '\0';
        int rc = inbox_dedupe_key(&cfg, &h->m, NULL, &key, why, sizeof(why));
        if (cases[i].key) {
            is_int(rc, 0, "case %zu: a key", i);
            is_str(key.buf, cases[i].key, "case %zu: the key", i);
        } else {
            ok(rc == -1 && strstr(why, "no event_id or id header, nor CloudEvents' ce_source and ce_id"),
               "case %zu: no key: %s", i, why);
        }
        char *id = inbox_event_id(&cfg, &h->m);
        if (cases[i].event_id)
            is_str(id, cases[i].event_id, "case %zu: the handler's event id", i);
        else
            ok(id == NULL, "case %zu: no event id", i);
        free(id);
        free(h);
    }
    inbox_config_destroy(&cfg);

    char *named[] = {"INBOX_PG_DSN=host=x", "INBOX_TOPICS=t", "INBOX_HANDLER=h", "INBOX_EVENT_ID_HEADER=id", NULL};
    is_int(inbox_config_load(&cfg, named, 1, argv, err, sizeof(err)), 0, "a named header loads: %s", err);
    struct test_msg *h = msg_new();
    msg_add(h, "event_id", "e1");
    msg_add(h, "id", "d1");
    is_int(inbox_dedupe_key(&cfg, &h->m, NULL, &key, why, sizeof(why)), 0, "named: a key");
    is_str(key.buf, "d1", "named: that header alone");
    char *id = inbox_event_id(&cfg, &h->m);
    is_str(id, "d1", "named: the handler's event id from it");
    free(id);
    free(h);
    h = msg_new();
    msg_add(h, "event_id", "e1");
    ok(inbox_dedupe_key(&cfg, &h->m, NULL, &key, why, sizeof(why)) == -1 && strstr(why, "no 'id' header"),
       "named: no fallback: %s", why);
    free(h);
    inbox_config_destroy(&cfg);
    strbuf_destroy(&key);
}

static void test_invalid(void)
{
    static const char *const bad[][2] = {
        {"INBOX_DEDUPE_KEY=source", "INBOX_DEDUPE_KEY"},
        {"INBOX_DEDUPE_KEY=payload:doc", "INBOX_DEDUPE_KEY"},
        {"INBOX_MAX_ATTEMPTS=0", "INBOX_MAX_ATTEMPTS"},
        {"INBOX_RETENTION=7 days", "INBOX_RETENTION"},
        {"INBOX_HANDLER=f(uuid)", "INBOX_HANDLER"},
        {"INBOX_HANDLER=x; drop table y", "INBOX_HANDLER"},
        {"INBOX_TABLE=a.b.c", "INBOX_TABLE"},
        {"INBOX_KAFKA_NO_SUCH=1", "INBOX_KAFKA_NO_SUCH"},
        {"INBOX_RETRY_BACKOFF_MAX_MS=5", "INBOX_RETRY_BACKOFF_MAX_MS"},
        {"INBOX_LOG_LEVEL=loud", "INBOX_LOG_LEVEL"},
    };
    char *argv[] = {"outbox-inbox", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct inbox_config cfg;
        char err[512] = "";
        char *env[] = {"INBOX_PG_DSN=host=x", "INBOX_TOPICS=t", "INBOX_HANDLER=h", (char *)bad[i][0], NULL};
        int rc = inbox_config_load(&cfg, env, 1, argv, err, sizeof(err));
        ok(rc == -1 && strstr(err, bad[i][1]) != NULL, "%s -> error naming %s (%s)", bad[i][0], bad[i][1], err);
        inbox_config_destroy(&cfg);
    }
    struct inbox_config cfg;
    char err[512] = "";
    char *env[] = {"INBOX_PG_DSN=host=x", "INBOX_HANDLER=h", NULL};
    ok(inbox_config_load(&cfg, env, 1, argv, err, sizeof(err)) == -1 && strstr(err, "INBOX_TOPICS"),
       "run without INBOX_TOPICS: %s", err);
    inbox_config_destroy(&cfg);
    char *env2[] = {"INBOX_PG_DSN=host=x", NULL};
    char *argv2[] = {"outbox-inbox", "migrate", NULL};
    is_int(inbox_config_load(&cfg, env2, 2, argv2, err, sizeof(err)), 0, "migrate needs only the DSN: %s", err);
    inbox_config_destroy(&cfg);
}

int main(void)
{
    test_pointer();
    test_keys();
    test_identity();
    test_invalid();
    return done();
}
