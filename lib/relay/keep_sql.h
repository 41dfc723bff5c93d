/* OUTBOX_ON_SENT=keep's SQL (keep_sql.c, schema/007_keep.sql): the statements that replace
 * mark mode's mark, recover, park, note_failed, row_failed, stats, purge and duplicates, keep mode's own,
 * and its parts of the claim, each built from the table's quoted names. outbox.c puts the
 * statements into struct outbox_sql; the loop (keep.c) and keep_leave.c run them. Below
 * outbox.h: it includes this file, never the other way round. */
#ifndef OUTBOX_KEEP_SQL_H
#define OUTBOX_KEEP_SQL_H

#include "core/util.h"

/* keep_sql_init fills it; each statement is caller frees (outbox.c moves them into struct
 * outbox_sql, whose fields of the same names say what their parameters are). */
struct keep_statements {
    int lease_key; /* the table's advisory lock key (outbox_lease_key) */
    char *mark, *recover, *park, *note_failed, *row_failed, *stats, *purge, *duplicates, *orphans, *partitions;
    char *keep_advance, *keep_audit, *keep_check;
};
void keep_sql_init(struct keep_statements *sql, const char *schema_q, const char *table_q, const char *name,
                   int lease_key);

/* The claim's parts in keep mode (outbox_sql_claim): where each partition starts, the rows
 * to skip, the source of requeued rows; appended to the caller's buffers. */
void keep_sql_claim_parts(const char *schema_q, const char *name, struct strbuf *from, struct strbuf *skip,
                          struct strbuf *requeued);
struct keep_claim {
    const char *from, *skip, *requeued, *attempts;
};

/* Result columns of keep mode's statements. */
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

/* The relations keep mode's statements are written with (keep_sql.c, keep_leave.c). */
struct keep_names {
    char wm[200], pub[200], parked[200];
    const char *schema_q, *table_q, *name;
};
void keep_names_init(struct keep_names *k, const char *schema_q, const char *table_q, const char *name);

#endif
