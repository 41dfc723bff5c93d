/* SQL pieces over the outbox's rows that every mode's statements share (outbox.c, keep_sql.c,
 * and the loop's and the commands' own statements), and what the schema fixes. */
#ifndef OUTBOX_SQL_PARTS_H
#define OUTBOX_SQL_PARTS_H

/* Lease partitions of the table, fixed by schema/001 (lease_partition column). */
#define OUTBOX_LEASE_PARTITIONS 64
/* Second key of the table's membership lock, held shared by every relay's worker session. */
#define OUTBOX_MEMBER_LOCK 1000
/* held shared, beside it, by the relays of the table in exactly-once mode */
#define OUTBOX_EOS_LOCK 1001
/* and, with OUTBOX_TRANSACTION_GROUPS = G above 1, this + G (1003 .. 1065) */
#define OUTBOX_EOS_GROUPS_LOCK 1001
/* The pg_locks rows (alias l) of the relays that are members of the table's leases now, in
 * this database; a format with one %d: the table's lease key (outbox_lease_key). */
#define OUTBOX_STR_(x) #x
#define OUTBOX_STR(x) OUTBOX_STR_(x)
#define OUTBOX_MEMBERS_WHERE                                                                   \
    "l.locktype = 'advisory' AND l.classid = %d::oid AND l.objid = "                           \
    OUTBOX_STR(OUTBOX_MEMBER_LOCK) " AND l.objsubid = 2"                                       \
    " AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"

/* The mark's record of the highest id this relay has claimed ($2 relay, $3 the id; the
 * schema and the table's name fill its two %s), for the duplicates estimate after a crash:
 * a CTE named s, in mark and delete modes' marks and keep mode's. */
#define OUTBOX_RELAY_STATE_CTE                                                                     \
    " s AS (INSERT INTO %s.\"%s_relay_state\" AS s (relay, claimed_high)"                          \
    "  VALUES ($2, $3::int8)"                                                                      \
    "  ON CONFLICT (relay) DO UPDATE SET claimed_high = excluded.claimed_high,"                    \
    "   updated_at = clock_timestamp()"                                                            \
    "  WHERE s.claimed_high < excluded.claimed_high)"

/* Expressions over a row's created_at that cannot throw, whatever an application wrote
 * (infinity, -infinity, dates before 1970): the Kafka timestamp in ms (the claim's time
 * when created_at is not a usable one), and the age of the oldest finite one. */
#define OUTBOX_CREATED_MS(col) \
    "(CASE WHEN isfinite(" col ") AND " col " >= 'epoch' THEN (extract(epoch FROM " col        \
    ") * 1000)::int8 ELSE (extract(epoch FROM clock_timestamp()) * 1000)::int8 END)"
#define OUTBOX_OLDEST_AGE(col) \
    "greatest(0, extract(epoch FROM clock_timestamp() - min(" col ") FILTER (WHERE isfinite(" col \
    "))))"

#endif
