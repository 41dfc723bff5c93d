/* The outbox table's SQL: every statement the relay, the monitor and the admin commands
 * run, built once from the configured table name (quoted) and topic template. */
#ifndef OUTBOX_OUTBOX_H
#define OUTBOX_OUTBOX_H

/* Lease partitions of the table, fixed by schema/001 (lease_partition column). */
#define OUTBOX_LEASE_PARTITIONS 64
/* Second key of the table's membership lock, held shared by every relay's worker session. */
#define OUTBOX_MEMBER_LOCK 1000
/* The pg_locks rows (alias l) of the relays that are members of the table's leases now, in
 * this database; a format with one %d: the table's lease key (outbox_lease_key). */
#define OUTBOX_STR_(x) #x
#define OUTBOX_STR(x) OUTBOX_STR_(x)
#define OUTBOX_MEMBERS_WHERE                                                                   \
    "l.locktype = 'advisory' AND l.classid = %d::oid AND l.objid = "                           \
    OUTBOX_STR(OUTBOX_MEMBER_LOCK) " AND l.objsubid = 2"                                       \
    " AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"

#include "relay/config.h"
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
                            also $4 their lease partitions, $5 the lease key (keep.c) */
    char *keep_advance;  /* keep mode: $1 lease key, $2 the floors' proof, $3 relay name, $4
                            partitions whose W the relay knows, $5 their W, $6 their W as
                            written, $7 write them (keep.c) */
    char *keep_audit;    /* keep mode: $1 lease key, $2 partition, $3 reason, $4 after this id,
                            $5 up to this one: rows at or below its W neither
                            recorded nor parked go to the parked table as requeued (keep.c) */
    char *keep_check;    /* keep mode: the id's identity kind, its sequence's cache and last
                            value (0 before the first id, NULL when this role may not read it),
                            max(id), max(W), the sequence's name */
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

/* Expressions over a row's created_at that cannot throw, whatever an application wrote
 * (infinity, -infinity, dates before 1970): the Kafka timestamp in ms (the claim's time
 * when created_at is not a usable one), and the age of the oldest finite one. */
/* The mark's record of the highest id this relay has claimed ($2 relay, $3 the id; the
 * schema and the table's name fill its two %s), for the duplicates estimate after a crash:
 * a CTE named s, in mark and delete modes' marks and keep mode's. */
#define OUTBOX_RELAY_STATE_CTE                                                                     \
    " s AS (INSERT INTO %s.\"%s_relay_state\" AS s (relay, claimed_high)"                          \
    "  VALUES ($2, $3::int8)"                                                                      \
    "  ON CONFLICT (relay) DO UPDATE SET claimed_high = excluded.claimed_high,"                    \
    "   updated_at = clock_timestamp()"                                                            \
    "  WHERE s.claimed_high < excluded.claimed_high)"

#define OUTBOX_CREATED_MS(col) \
    "(CASE WHEN isfinite(" col ") AND " col " >= 'epoch' THEN (extract(epoch FROM " col        \
    ") * 1000)::int8 ELSE (extract(epoch FROM clock_timestamp()) * 1000)::int8 END)"
#define OUTBOX_OLDEST_AGE(col) \
    "greatest(0, extract(epoch FROM clock_timestamp() - min(" col ") FILTER (WHERE isfinite(" col \
    "))))"

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
    LEASE_SCAN_RELAYS, LEASE_SCAN_LOCKED, LEASE_SCAN_FOREIGN, LEASE_SCAN_FOREIGN_HOLDERS
};
enum lease_acquire_col {
    LEASE_ACQUIRE_PARTITION, LEASE_ACQUIRE_GOT, LEASE_ACQUIRE_LAST_EVENT, LEASE_ACQUIRE_LAST_HOLDER,
    LEASE_ACQUIRE_TOKEN
};

void outbox_sql_init(struct outbox_sql *sql, const struct config *cfg);

/* keep.c: keep mode's statements (they replace mark, park, note_failed, row_failed, stats,
 * purge and duplicates) and its parts of the claim. */
struct keep_claim {
    const char *from, *skip, *requeued, *attempts;
};
enum keep_mark_col { KEEP_MARK_RECORDED, KEEP_MARK_REFUSED };
enum keep_advance_col {
    KEEP_ADVANCE_PART, KEEP_ADVANCE_W, KEEP_ADVANCE_SAVED, KEEP_ADVANCE_RECORDS, KEEP_ADVANCE_WRITTEN,
    KEEP_ADVANCE_OLDEST_AGE
};
enum keep_audit_col {
    KEEP_AUDIT_HELD, KEEP_AUDIT_GAPS, KEEP_AUDIT_IDS, KEEP_AUDIT_DROPPED, KEEP_AUDIT_W, KEEP_AUDIT_LOW
};
enum keep_check_col {
    KEEP_CHECK_IDENTITY, KEEP_CHECK_CACHE, KEEP_CHECK_LAST_VALUE, KEEP_CHECK_MAX_ID, KEEP_CHECK_MAX_W,
    KEEP_CHECK_SEQUENCE, KEEP_CHECK_PARTITIONS_DENIED
};
/* The relations keep mode's statements are written with (keep.c, keep_leave.c). */
struct keep_names {
    char wm[200], pub[200], parked[200];
    const char *schema_q, *table_q, *name;
};
void keep_names_init(struct keep_names *k, const char *schema_q, const char *table_q, const char *name);
void outbox_sql_keep(struct outbox_sql *sql, const char *schema_q, const char *table_q, const char *name);
void outbox_keep_claim_parts(const char *schema_q, const char *name, struct strbuf *from, struct strbuf *skip,
                             struct strbuf *requeued);

/* A row's headers as SQL (json or jsonb) over the rows relation aliased alias: its headers
 * column, or in the Debezium layout the OUTBOX_ADDITIONAL_PLACEMENT columns (validated plain
 * identifiers) of the view's source_row as a JSON object of strings in the setting's order,
 * null for a NULL column (a header without a value, as the event router sends it), each
 * encoded by its type as the event router does (types: the columns' types, '|'-joined, from
 * the start check or outbox_placement_types_query; NULL: PostgreSQL's text). Caller frees. */
char *outbox_headers_sql(const struct config *cfg, const char *alias, const char *types);
/* "SELECT <the placement columns' types, '|'-joined>" for the configured table. Caller frees. */
char *outbox_placement_types_query(const struct config *cfg);
/* Rebuilds the claim once the table is known: a bytea payload column is claimed as hex;
 * requeue_count reads the doorbell's count of requeues (schema 5). */
void outbox_sql_claim(struct outbox_sql *sql, const struct config *cfg, int bytea, int requeue_count);
/* The doorbell's arm statement for the table's schema: the bell sequence (schema 6) or the
 * doorbell row's armed column (before). */
void outbox_sql_arm(struct outbox_sql *sql, const struct config *cfg, int bell);
/* The table's advisory lock key (first half of the two-key form), from its name with the
 * schema made explicit, so that "outbox" and "public.outbox" are one table. */
int outbox_lease_key(const char *table);
void outbox_sql_destroy(struct outbox_sql *sql);

#endif
