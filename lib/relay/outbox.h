/* The outbox table's SQL: every statement the relay, the monitor and the admin commands
 * run, built once from the configured table name (quoted) and topic template. */
#ifndef OUTBOX_OUTBOX_H
#define OUTBOX_OUTBOX_H

#include "relay/sql_parts.h"
#include "relay/config.h"
#include "relay/keep_sql.h"
#include "core/util.h"

struct outbox_sql {
    char *claim;         /* $1 in-flight ids, $2 limit, $3 paused topics, $4 partitions,
                            $5 limit per partition, $6 payload bytes budget, $7 largest
                            payload fetched, $8 keys held back (kshare.h), $9 each
                            partition's floor (aligned with $4); in keep mode $10 each
                            partition's W as the relay knows it, -1 unknown: outbox_sql_claim */
    char *floor_probe;   /* $1 transactions (virtual ids) seen writing at the last probe: those
                            writing the table now, and how many of $1 still are (floor.c) */
    char *mark;          /* $1 ids, $2 relay name, $3 highest id claimed so far; in keep mode
                            also $4 their lease partitions, $5 the lease key (record.c, keep_sql.c) */
    char *keep_advance;  /* keep mode: $1 lease key, $2 the floors' proof, $3 relay name, $4
                            partitions whose W the relay knows, $5 their W, $6 their W as
                            written, $7 write them (keep.c, keep_sql.c) */
    char *keep_audit;    /* keep mode: $1 lease key, $2 partition, $3 reason, $4 after this id,
                            $5 up to this one: rows at or below its W neither
                            recorded nor parked go to the parked table as requeued (keep.c, keep_sql.c) */
    char *keep_check;    /* keep mode: the id's identity kind, its sequence's cache and last
                            value (0 before the first id, NULL when this role may not read it),
                            max(id), max(W), the sequence's name */
    char *recover;       /* exactly-once: $1 ids, $2 their event ids, from the progress record:
                            recorded as mark, delete or keep mode's record would (eos.c) */
    char *park;          /* $1 id, $2 reason */
    char *note_failed;   /* $1 ids, $2 reason: last_error only, attempts unchanged */
    char *row_failed;    /* $1 id, $2 reason, $3 max attempts: attempts+1, parks at the limit */
    char *arm;           /* $1 channel */
    char *version;       /* $1 table */
    char *start_check;   /* $1 table: version, whether row-level security hides rows, and the
                            payload column's type */
    char *stats;         /* $1 count cap */
    char *long_tx;       /* $1 threshold seconds */
    char *xmin_holder;   /* the replication slot or standby holding the xmin horizon, if any */
    char *purge;         /* $1 after id, $2 window, $3 retention seconds */
    char *orphans;       /* keep mode: parked entries whose row is gone, removed: their ids */
    char *partitions;    /* keep mode: $1 retention seconds (NULL: none): partitioned, created,
                            dropped, dropped_rows, ahead, busy, lost (schema 9) */
    char *duplicates;    /* rows a previous relay may have published: PENDING below its claim mark */
    char *topic_expr;    /* SQL expression of a row's topic (alias p) */
    char *lease_scan;    /* $1 lock key: relays of the table, partitions they lock, partitions
                            other sessions lock, and those sessions */
    char *lease_acquire; /* $1 lock key, $2 partitions: which were got, and their last log event */
    char *lease_release; /* $1 lock key, $2 partitions */
    char *lease_log;     /* $1 partitions, $2 relay, $3 events, $4 at, $5 publish_from, $6 publish_until
                            (arrays of equal length; times in ms, 0 = NULL) */
    int lease_key;       /* advisory lock key of this table (first half of the two-key form) */
    char *worker_setup;  /* session settings of the worker connection (no parameters) */
    char *listen_setup;  /* the LISTEN connection's, or NULL without a doorbell */
    char *placement_types; /* Debezium layout: the placement columns' types from the start
                            * check, '|'-joined, for the claim's headers; NULL before it */
};

/* Result columns, by statement: read them by these names, never by bare positions. */
enum claim_col {
    CLAIM_ID, CLAIM_EVENT_ID, CLAIM_AGGREGATE_TYPE, CLAIM_AGGREGATE_ID, CLAIM_EVENT_TYPE,
    CLAIM_TOPIC, CLAIM_PAYLOAD, CLAIM_HEADERS, CLAIM_CREATED_MS, CLAIM_ATTEMPTS,
    CLAIM_LEASE_PARTITION, CLAIM_PAYLOAD_BYTES, CLAIM_REQUEUED
};
enum floor_probe_col {
    FLOOR_PROBE_WRITERS, FLOOR_PROBE_HOLDER, FLOOR_PROBE_REQUEUED, FLOOR_PROBE_IDENTITY, FLOOR_PROBE_CACHE
};
enum start_check_col {
    START_CHECK_VERSION, START_CHECK_RLS_HIDES_ROWS, START_CHECK_PAYLOAD_TYPE,
    START_CHECK_DEBEZIUM_LAYOUT, /* "t" when the table has the Debezium layout's relay_seq */
    START_CHECK_MISSING_COLUMNS, /* OUTBOX_ADDITIONAL_PLACEMENT columns the table lacks, or NULL */
    START_CHECK_PLACEMENT_TYPES, /* their types, '|'-joined (outbox_sql.placement_types) */
    START_CHECK_KEEP_TABLE       /* "t" when a keep-mode watermark was set (NULL: unknown) */
};
enum row_failed_col {
    ROW_FAILED_STATUS, ROW_FAILED_ATTEMPTS, ROW_FAILED_EVENT_ID, ROW_FAILED_AGGREGATE_ID,
    ROW_FAILED_AGGREGATE_TYPE, ROW_FAILED_EVENT_TYPE, ROW_FAILED_CREATED_MS
};
enum lease_scan_col {
    LEASE_SCAN_RELAYS, LEASE_SCAN_LOCKED, LEASE_SCAN_FOREIGN, LEASE_SCAN_FOREIGN_HOLDERS,
    LEASE_SCAN_EXACTLY_ONCE, /* relays of them in exactly-once mode */
    LEASE_SCAN_OTHER_GROUPS  /* of those, relays with another OUTBOX_TRANSACTION_GROUPS */
};
enum lease_acquire_col {
    LEASE_ACQUIRE_PARTITION, LEASE_ACQUIRE_GOT, LEASE_ACQUIRE_LAST_EVENT, LEASE_ACQUIRE_LAST_HOLDER,
    LEASE_ACQUIRE_TOKEN
};

void outbox_sql_init(struct outbox_sql *sql, const struct config *cfg);

/* outbox_claim.c: the claim, and a row's headers as SQL. */
/* A row's headers as SQL (json or jsonb) over the rows relation aliased alias: its headers
 * column, or in the Debezium layout the OUTBOX_ADDITIONAL_PLACEMENT columns (validated plain
 * identifiers) of the view's source_row as a JSON object of strings in the setting's order,
 * null for a NULL column (a header without a value, as the event router sends it), each
 * encoded by its type as the event router does (types: the columns' types, '|'-joined, from
 * the start check or outbox_placement_types_query; NULL: PostgreSQL's text). Caller frees. */
char *outbox_headers_sql(const struct config *cfg, const char *alias, const char *types);
/* "SELECT <the placement columns' types, '|'-joined>" for the configured table. Caller frees. */
char *outbox_placement_types_query(const struct config *cfg);
/* The OUTBOX_ADDITIONAL_PLACEMENT columns as a SQL text[] literal, and their types over the
 * table t as a SQL expression (the start check's); caller frees. */
char *outbox_placement_columns(const struct config *cfg);
char *outbox_placement_types_sql(const struct config *cfg, const char *t);
/* Rebuilds the claim once the table is known: a bytea payload column is claimed as hex;
 * requeue_count reads the doorbell's count of requeues (schema 5). */
void outbox_sql_claim(struct outbox_sql *sql, const struct config *cfg, int bytea, int requeue_count);

/* outbox.c */
/* The doorbell's arm statement for the table's schema: the bell sequence (schema 6) or the
 * doorbell row's armed column (before). */
void outbox_sql_arm(struct outbox_sql *sql, const struct config *cfg, int bell);
/* The table's advisory lock key (first half of the two-key form), from its name with the
 * schema made explicit, so that "outbox" and "public.outbox" are one table. */
int outbox_lease_key(const char *table);
void outbox_sql_destroy(struct outbox_sql *sql);

#endif
