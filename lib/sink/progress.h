/* Exactly-once's progress record (kafka_txn.c): the rows a producer committed to Kafka that
 * PostgreSQL has not been seen to record, by id and event id, and the record's value as
 * it goes into each transaction. Pure: unit-tested. */
#ifndef OUTBOX_SINK_PROGRESS_H
#define OUTBOX_SINK_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

/* id -> event id, open addressing (id 0: empty, -1: removed). Zero-initialise. Each put
 * stamps its entry with a new version, so that a delete meant for one row cannot remove a
 * later row given the same id (progress_del_version). */
struct progress_rows {
    int64_t *id;
    char **event_id;
    uint64_t *ver;
    size_t cap, n, removed;
    uint64_t next_ver;
};

/* Adds a row (ids > 0; event_id copied); a row already there takes the new event id. */
void progress_put(struct progress_rows *c, int64_t id, const char *event_id);
void progress_del(struct progress_rows *c, int64_t id);
/* The version of id's entry (0: none); deletes id's entry only if it still has version ver. */
uint64_t progress_version(const struct progress_rows *c, int64_t id);
void progress_del_version(struct progress_rows *c, int64_t id, uint64_t ver);
int progress_has(const struct progress_rows *c, int64_t id, const char *event_id);
void progress_clear(struct progress_rows *c);
/* The record's value: the rows of a and of b (either may be NULL), as JSON
 * {"v":1,"rows":[[id,"event id"],...]}. */
void progress_value(const struct progress_rows *a, const struct progress_rows *b, struct strbuf *out);
/* Reads a value: its rows into *ids and *event_ids (allocated, *n of them). 0, or -1 with err. */
int progress_parse(const char *value, size_t len, int64_t **ids, char ***event_ids, size_t *n,
                   char *err, size_t errlen);

#endif
