/* Unit tests: row -> Kafka message mapping (topic, headers, poison detection). */
#include <stdlib.h>
#include <string.h>

#include "sink/message.h"
#include "tap.h"

static struct outbox_row base_row(void)
{
    struct outbox_row row = {
        .id = 7,
        .event_id = "0b7c1f0e-1111-4222-8333-444455556666",
        .aggregate_type = "order",
        .aggregate_id = "order-42",
        .event_type = "OrderPlaced",
        .payload = "{\"a\": 1}",
        .payload_len = 8,
        .created_ms = 1700000000000,
    };
    return row;
}

static const char *header(const struct message *m, const char *name)
{
    for (size_t i = 0; i < m->n_headers; i++)
        if (strcmp(m->headers[i].name, name) == 0)
            return m->headers[i].value;
    return NULL;
}

int main(void)
{
    char err[256];
    struct message m;

    struct outbox_row row = base_row();
    is_int(message_build(&row, "outbox.event.{aggregate_type}", &m, err, sizeof(err)), 0, "builds");
    is_str(m.topic, "outbox.event.order", "topic from template");
    is_str(header(&m, "event_id"), row.event_id, "event_id header");
    is_str(header(&m, "event_type"), "OrderPlaced", "event_type header");
    is_str(header(&m, "aggregate_type"), "order", "aggregate_type header");
    message_destroy(&m);

    is_int(message_build(&row, "{aggregate_type}.{event_type}-v1", &m, err, sizeof(err)), 0,
           "two placeholders");
    is_str(m.topic, "order.OrderPlaced-v1", "both placeholders expanded");
    message_destroy(&m);

    row.topic = "explicit.topic";
    is_int(message_build(&row, "ignored.{aggregate_type}", &m, err, sizeof(err)), 0, "topic column");
    is_str(m.topic, "explicit.topic", "topic column overrides the template");
    message_destroy(&m);

    row = base_row();
    row.headers = "{\"trace\": \"abc\", \"tenant\": \"t1\"}";
    is_int(message_build(&row, "t.{aggregate_type}", &m, err, sizeof(err)), 0, "row headers");
    is_str(header(&m, "trace"), "abc", "row header trace");
    is_str(header(&m, "tenant"), "t1", "row header tenant");
    is_int(m.n_headers, 5, "3 standard + 2 row headers");
    message_destroy(&m);

    row.headers = "null";
    is_int(message_build(&row, "t", &m, err, sizeof(err)), 0, "JSON null headers are none");
    is_int(m.n_headers, 3, "only standard headers");
    message_destroy(&m);

    static const struct {
        const char *headers, *topic, *tmpl, *want;
    } poison[] = {
        {"[1,2]", NULL, "t", "JSON object"},
        {"{\"n\": 5}", NULL, "t", "'n' is not a string"},
        {"{\"event_id\": \"spoof\"}", NULL, "t", "reserved"},
        {"{broken", NULL, "t", "not valid JSON"},
        {"{\"\": \"x\"}", NULL, "t", "empty header name"},
        {NULL, "bad topic!", "t", "not a valid Kafka topic"},
        {NULL, "..", "t", "not a valid Kafka topic"},
        {NULL, NULL, "events.{aggregate_type}", "not a valid Kafka topic"},
        {"{\"event_type\": \"spoof\"}", NULL, "t", "reserved"},
        {"{\"aggregate_type\": \"spoof\"}", NULL, "t", "reserved"},
        {"{\"outbox_lease\": \"0/99999999999999999/me/1\"}", NULL, "t", "reserved for the relay"},
    };
    for (size_t i = 0; i < sizeof(poison) / sizeof(poison[0]); i++) {
        row = base_row();
        row.headers = poison[i].headers;
        row.topic = poison[i].topic;
        if (i == 7)
            row.aggregate_type = "has space";
        err[0] = '\0';
        int rc = message_build(&row, poison[i].tmpl, &m, err, sizeof(err));
        ok(rc == -1 && strstr(err, poison[i].want), "poison case %zu rejected: %s", i, err);
    }

    /* room is kept for the relay's two headers */
    row = base_row();
    char many[64 * 16 + 8];
    size_t off = (size_t)snprintf(many, sizeof(many), "{");
    for (int i = 0; i < MESSAGE_MAX_ROW_HEADERS; i++)
        off += (size_t)snprintf(many + off, sizeof(many) - off, "%s\"h%d\": \"v\"", i ? ", " : "", i);
    snprintf(many + off, sizeof(many) - off, "}");
    row.headers = many;
    is_int(message_build(&row, "t", &m, err, sizeof(err)), 0, "60 writer headers fit: %s", err);
    message_add_relay_header(&m, "outbox_lease", "3/17/r/1");
    is_int(m.n_headers, 64, "with the relay's own: 64");
    is_str(m.headers[63].name, "outbox_lease", "the relay's header is last");
    message_destroy(&m);
    char *at = strchr(many, '}');
    snprintf(at, sizeof(many) - (size_t)(at - many), ", \"one_more\": \"v\"}");
    row.headers = many;
    ok(message_build(&row, "t", &m, err, sizeof(err)) == -1 && strstr(err, "more than 60 headers"),
       "a 61st writer header is refused: %s", err);

    /* The Debezium layout: the id header, then the additional placement's; a NULL column is
     * a header without a value; the native layout's names are free there, id is not. */
    const struct message_layout dbz = {.topic_template = "outbox.event.{aggregate_type}", .debezium = 1};
    const struct message_layout dbz_t = {.topic_template = "t", .debezium = 1};
    row = base_row();
    row.headers = "{\"tenant\": \"t1\", \"eventType\": \"OrderPlaced\", \"gone\": null, \"event_type\": \"x\"}";
    is_int(message_build_layout(&row, &dbz, &m, err, sizeof(err)), 0,
           "debezium layout builds: %s", err);
    is_str(m.topic, "outbox.event.order", "debezium: topic from the template");
    is_int(m.n_headers, 5, "debezium: id + 4 placement headers");
    is_str(m.headers[0].name, "id", "debezium: id first");
    is_str(m.headers[0].value, row.event_id, "debezium: id is the event id");
    ok(header(&m, "event_id") == NULL, "debezium: no event_id header");
    is_str(header(&m, "eventType"), "OrderPlaced", "debezium: placement header");
    is_str(header(&m, "event_type"), "x", "debezium: event_type is an ordinary name");
    ok(m.headers[3].value == NULL && strcmp(m.headers[3].name, "gone") == 0, "debezium: NULL column, NULL value");
    message_destroy(&m);
    row.headers = "{\"id\": \"spoof\"}";
    ok(message_build_layout(&row, &dbz_t, &m, err, sizeof(err)) == -1 && strstr(err, "'id' is reserved"),
       "debezium: a header named id is refused: %s", err);
    row.headers = "{\"gone\": null}";
    ok(message_build(&row, "t", &m, err, sizeof(err)) == -1 && strstr(err, "not a string"),
       "native: a null header value is still refused: %s", err);

    /* CloudEvents binary mode: the attributes after the relay's three headers, the row's own
     * after them, content-type last unless the row has one (the row's wins); a row header
     * ce_* is refused only while CloudEvents are on. */
    const struct message_layout ce = {.topic_template = "t", .ce_source = "/orders-service",
                                      .ce_content_type = "application/json"};
    row = base_row();
    row.created_ms = 1700000000123;
    row.headers = "{\"traceparent\": \"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\"}";
    is_int(message_build_layout(&row, &ce, &m, err, sizeof(err)), 0, "cloudevents builds: %s", err);
    static const char *const ce_names[] = {"event_id", "event_type", "aggregate_type", "ce_specversion",
                                           "ce_id", "ce_source", "ce_type", "ce_subject", "ce_time",
                                           "traceparent", "content-type"};
    is_int(m.n_headers, 11, "cloudevents: 3 + 6 attributes + 1 row header + content-type");
    for (size_t i = 0; i < 11 && i < m.n_headers; i++)
        is_str(m.headers[i].name, ce_names[i], "cloudevents: header %zu", i);
    is_str(header(&m, "ce_specversion"), "1.0", "ce_specversion");
    is_str(header(&m, "ce_id"), row.event_id, "ce_id is the event id");
    is_str(header(&m, "ce_source"), "/orders-service", "ce_source is the setting");
    is_str(header(&m, "ce_type"), "OrderPlaced", "ce_type is the event type");
    is_str(header(&m, "ce_subject"), "order-42", "ce_subject is the aggregate id");
    is_str(header(&m, "ce_time"), "2023-11-14T22:13:20.123Z", "ce_time: RFC 3339, UTC, ms");
    is_str(header(&m, "content-type"), "application/json", "content-type from the layout");
    message_destroy(&m);
    row.created_ms = -1;
    is_int(message_build_layout(&row, &ce, &m, err, sizeof(err)), 0, "cloudevents, 1969");
    is_str(header(&m, "ce_time"), "1969-12-31T23:59:59.999Z", "ce_time before the epoch floors");
    message_destroy(&m);
    row = base_row();
    row.headers = "{\"content-type\": \"application/vnd.order+json\"}";
    is_int(message_build_layout(&row, &ce, &m, err, sizeof(err)), 0, "cloudevents, own content-type");
    size_t cts = 0;
    for (size_t i = 0; i < m.n_headers; i++)
        cts += strcmp(m.headers[i].name, "content-type") == 0;
    is_int(cts, 1, "one content-type header");
    is_str(header(&m, "content-type"), "application/vnd.order+json", "the row's content-type wins");
    message_destroy(&m);
    row.headers = "{\"ce_type\": \"spoof\"}";
    ok(message_build_layout(&row, &ce, &m, err, sizeof(err)) == -1 &&
       strstr(err, "'ce_type' is reserved for the CloudEvents attributes"),
       "cloudevents: a ce_ row header is refused: %s", err);
    is_int(message_build(&row, "t", &m, err, sizeof(err)), 0, "cloudevents off: a ce_ row header is the row's");
    is_str(header(&m, "ce_type"), "spoof", "cloudevents off: nothing changes");
    ok(header(&m, "content-type") == NULL && header(&m, "ce_specversion") == NULL, "cloudevents off: no attributes");
    message_destroy(&m);
    const struct message_layout ce_dbz = {.topic_template = "t", .debezium = 1, .ce_source = "urn:x",
                                          .ce_content_type = "text/plain; charset=utf-8"};
    row = base_row();
    row.headers = "{\"tenant\": \"t1\"}";
    is_int(message_build_layout(&row, &ce_dbz, &m, err, sizeof(err)), 0, "cloudevents, debezium layout");
    is_str(m.headers[0].name, "id", "debezium + cloudevents: id first");
    is_str(m.headers[1].name, "ce_specversion", "debezium + cloudevents: then the attributes");
    is_str(header(&m, "ce_subject"), "order-42", "debezium + cloudevents: subject from aggregateid");
    is_str(m.headers[m.n_headers - 1].value, "text/plain; charset=utf-8", "debezium + cloudevents: content-type last");
    message_destroy(&m);
    row.headers = many; /* 60 row headers: still room for the attributes and the lease */
    at = strstr(many, ", \"one_more\"");
    snprintf(at, sizeof(many) - (size_t)(at - many), "}");
    is_int(message_build_layout(&row, &ce, &m, err, sizeof(err)), 0, "60 row headers with cloudevents: %s", err);
    message_add_relay_header(&m, "outbox_lease", "3/17/r/1");
    is_int(m.n_headers, MESSAGE_MAX_HEADERS, "3 + 6 + 60 + content-type + lease: all fit");
    is_str(m.headers[MESSAGE_MAX_HEADERS - 1].name, "outbox_lease", "the lease last");
    message_destroy(&m);
    is_str(message_content_type("jsonb"), "application/json", "jsonb -> application/json");
    is_str(message_content_type("json"), "application/json", "json -> application/json");
    is_str(message_content_type("text"), "text/plain; charset=utf-8", "text -> text/plain");
    is_str(message_content_type("bytea"), "application/octet-stream", "bytea -> octet-stream");

    char long_name[300];
    memset(long_name, 'a', 250);
    long_name[250] = '\0';
    ok(!message_topic_valid(long_name), "250-character topic rejected");
    long_name[249] = '\0';
    ok(message_topic_valid(long_name), "249-character topic accepted");
    return done();
}
