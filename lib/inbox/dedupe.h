/* What makes two messages the same for the inbox: the event id header, or a business key
 * made of headers and payload fields (INBOX_DEDUPE_KEY). Pure. */
#ifndef OUTBOX_INBOX_DEDUPE_H
#define OUTBOX_INBOX_DEDUPE_H

#include <jansson.h>
#include "source/source.h"

#include "inbox/inbox_config.h"
#include "core/util.h"

/* The value at a JSON pointer (RFC 6901: "/a/b/0", ~1 for '/', ~0 for '~'), borrowed from
 * doc; NULL when absent. "" is the whole document. */
json_t *inbox_json_pointer(json_t *doc, const char *pointer);

/* The message's event id for the handler and the inbox row (caller frees; NULL if none):
 * the INBOX_EVENT_ID_HEADER header, or with `auto` event_id, else id, else ce_id. */
char *inbox_event_id(const struct inbox_config *cfg, const struct source_msg *m);

/* The message's dedupe key into out: the event id header's value (with `auto`: event_id,
 * else id, else ["ce_source","ce_id"]), or with key parts a JSON
 * array of their values as text (["ERP","invoice","42"]: unambiguous whatever they hold).
 * payload may be NULL (parsed lazily from value). Returns 0, or -1 with why (a header or
 * field missing, a payload that is not JSON). */
int inbox_dedupe_key(const struct inbox_config *cfg, const struct source_msg *m, json_t *payload,
                     struct strbuf *out, char *why, size_t whylen);

/* The last value of header name as a NUL-terminated copy (caller frees), or NULL. */
char *inbox_header(const struct source_msg *m, const char *name);

/* 1 if s is a UUID in its text form (8-4-4-4-12 hex digits). */
int inbox_is_uuid(const char *s);

#endif
