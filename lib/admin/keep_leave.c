/* `outbox-relay migrate --leave-keep`: a table leaves keep mode. What keep mode knows from its
 * watermarks, records and parked table is written into the rows the way mark mode keeps it:
 * rows a record names (at or below their partition's watermark, or above it) become SENT
 * (sent_at: their record's time); rows parked for good become FAILED; failed attempts go
 * back to the rows' attempts and last_error. A row at or below the watermark that no record
 * names stays PENDING: a requeued row (W passed it while it was parked), or one the audit
 * has not reached yet; either may never have been published. Then the watermarks, records
 * and parked entries go, and relays in mark (or delete) mode take the table: they claim
 * exactly the rows that are still PENDING.
 *
 * No relay may run on the table meanwhile: a keep relay would go on recording (its rows
 * left PENDING here would be published again) and set a watermark again, which makes the
 * table keep mode's once more. So the step refuses while any relay is a member of the
 * table's leases, and checks once more inside its transaction, after taking the keep
 * tables in ACCESS EXCLUSIVE mode (a relay that started in between waits on its first
 * write there, and is seen). Writers go on: the step only updates rows that were published
 * (their row locks wait for nothing a writer holds, since writers only insert). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "pg/pgutil.h"
#include "core/util.h"
#include "admin/admin.h"
#include "relay/outbox.h"
#include "relay/schema.h"

/* The relays that are members of the table's leases now: their count, or -1 (err set). */
static long relays_running(PGconn *conn, int key, char *names, size_t len, char *err, size_t errlen)
{
    char q[600];
    snprintf(q, sizeof(q),
             "SELECT count(*), coalesce(string_agg(DISTINCT a.application_name || ' (pid ' || a.pid || ')', ', '), '')"
             " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE " OUTBOX_MEMBERS_WHERE,
             key);
    PGresult *res = pgconn_exec(conn, q, 0, NULL, err, errlen);
    if (!res)
        return -1;
    long n = atol(PQgetvalue(res, 0, 0));
    snprintf(names, len, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    return n;
}

static int exec_ok(PGconn *conn, const char *sql, long *rows, char *err, size_t errlen)
{
    PGresult *res = pgconn_exec(conn, sql, 0, NULL, err, errlen);
    if (!res)
        return -1;
    if (rows)
        *rows = atol(PQcmdTuples(res));
    PQclear(res);
    return 0;
}

/* Why the table cannot leave keep mode now, in err: -1; or 0. The Debezium layout has no keep
 * mode, a partitioned table stays in it, and no relay of the table may be running. */
static int leave_refused(PGconn *conn, const struct config *cfg, const char *table_q, int key, char *err,
                         size_t errlen)
{
    char names[512];
    long n;
    if (cfg->debezium) {
        snprintf(err, errlen, "--leave-keep: the Debezium layout has no keep mode");
        return -1;
    }
    /* mark and delete modes do not keep partitions ahead of the identity, nor drop them */
    char *q = xasprintf("SELECT relkind = 'p' FROM pg_catalog.pg_class WHERE oid = '%s'::regclass", table_q);
    PGresult *kind = pgconn_exec(conn, q, 0, NULL, err, errlen);
    free(q);
    if (!kind)
        return -1;
    int partitioned = PQntuples(kind) == 1 && strcmp(PQgetvalue(kind, 0, 0), "t") == 0;
    PQclear(kind);
    if (partitioned) {
        snprintf(err, errlen, "--leave-keep: %s is partitioned by id (migrate --partition), which only keep "
                 "mode maintains (partitions ahead of the identity, retention by dropping them): it stays in "
                 "keep mode", table_q);
        return -1;
    }
    if ((n = relays_running(conn, key, names, sizeof(names), err, errlen)) < 0)
        return -1;
    if (n > 0) {
        snprintf(err, errlen, "--leave-keep: %ld relay%s still running on %s (%s): stop every relay "
                 "of the table first, then start them with OUTBOX_ON_SENT=mark (or delete) after this step",
                 n, n == 1 ? " is" : "s are", cfg->table, names);
        return -1;
    }
    return 0;
}

/* What keep mode's tables said, written back into the rows. */
struct leave_counts {
    long sent_w, sent_rec, failed, noted, unrecorded;
};

/* Inside the step's transaction, its tables locked: keep mode's records, parked entries and
 * failed attempts written back into the rows' status, attempts and last_error. 0, or -1. */
static int write_back(PGconn *conn, const char *table_q, const struct keep_names *k, struct leave_counts *c,
                      char *err, size_t errlen)
{
    const char *wm = k->wm, *pub = k->pub, *parked = k->parked;
    int rc = -1;
    /* published: at or below W, named by a record (not parked for good) ... */
    char *q = xasprintf("UPDATE %s o SET status = 'SENT', sent_at = r.at FROM"
                        " (SELECT p.lease_partition, i AS id, min(p.at) AS at FROM %s p CROSS JOIN unnest(p.ids) i"
                        "  GROUP BY p.lease_partition, i) r, %s wm"
                        " WHERE o.id = r.id AND o.lease_partition = r.lease_partition"
                        " AND wm.lease_partition = o.lease_partition AND o.id <= wm.w AND o.status = 'PENDING'"
                        " AND NOT EXISTS (SELECT 1 FROM %s k WHERE k.id = o.id AND k.failed)",
                        table_q, pub, wm, parked);
    if (exec_ok(conn, q, &c->sent_w, err, errlen) != 0)
        goto out;
    /* ... and recorded above it */
    free(q);
    q = xasprintf("UPDATE %s o SET status = 'SENT', sent_at = r.at FROM"
                  " (SELECT p.lease_partition, unnest(p.ids) AS id, p.at FROM %s p"
                  "  LEFT JOIN %s wm ON wm.lease_partition = p.lease_partition WHERE p.top > coalesce(wm.w, 0)) r"
                  " WHERE o.id = r.id AND o.lease_partition = r.lease_partition AND o.status = 'PENDING'",
                  table_q, pub, wm);
    if (exec_ok(conn, q, &c->sent_rec, err, errlen) != 0)
        goto out;
    /* parked for good; failed attempts of rows still pending */
    free(q);
    q = xasprintf("UPDATE %s o SET status = 'FAILED', attempts = k.attempts, last_error = k.last_error"
                  " FROM %s k WHERE k.id = o.id AND k.failed AND o.status = 'PENDING'",
                  table_q, parked);
    if (exec_ok(conn, q, &c->failed, err, errlen) != 0)
        goto out;
    free(q);
    q = xasprintf("UPDATE %s o SET attempts = k.attempts, last_error = k.last_error"
                  " FROM %s k WHERE k.id = o.id AND NOT k.failed AND o.status = 'PENDING'",
                  table_q, parked);
    if (exec_ok(conn, q, &c->noted, err, errlen) != 0)
        goto out;
    /* what stays PENDING at or below W: requeued, or never recorded (the next relay sends it) */
    free(q);
    q = xasprintf("SELECT count(*) FROM %s o JOIN %s wm ON wm.lease_partition = o.lease_partition"
                  " WHERE o.id <= wm.w AND o.status = 'PENDING'", table_q, wm);
    PGresult *res = pgconn_exec(conn, q, 0, NULL, err, errlen);
    if (!res)
        goto out;
    c->unrecorded = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    free(q);
    q = xasprintf("DELETE FROM %s; DELETE FROM %s; DELETE FROM %s", wm, pub, parked);
    if (exec_ok(conn, q, NULL, err, errlen) != 0)
        goto out;
    rc = 0;
out:
    free(q);
    return rc;
}

int keep_leave(PGconn *conn, const struct config *cfg, char *err, size_t errlen)
{
    char *schema_q, *table_q, *name;
    schema_names(cfg->table, &schema_q, &table_q, &name);
    struct keep_names k = {0};
    keep_names_init(&k, schema_q, table_q, name);
    char names[512];
    int key = outbox_lease_key(cfg->table), rc = -1;
    struct leave_counts c = {0};
    long n;
    char *q = NULL;
    if (leave_refused(conn, cfg, table_q, key, err, errlen) != 0)
        goto out;
    q = xasprintf("SELECT (SELECT count(*) FROM %s) + (SELECT count(*) FROM %s) + (SELECT count(*) FROM %s)",
                  k.wm, k.pub, k.parked);
    PGresult *res = pgconn_exec(conn, q, 0, NULL, err, errlen);
    if (!res)
        goto out;
    n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (n == 0) {
        log_info("migrate: %s is not in keep mode (no watermark, record or parked entry): nothing to leave",
                 cfg->table);
        rc = 0;
        goto out;
    }
    if (exec_ok(conn, "BEGIN", NULL, err, errlen) != 0)
        goto out;
    free(q);
    q = xasprintf("LOCK TABLE %s, %s, %s IN ACCESS EXCLUSIVE MODE", k.wm, k.pub, k.parked);
    if (exec_ok(conn, q, NULL, err, errlen) != 0)
        goto rollback;
    if ((n = relays_running(conn, key, names, sizeof(names), err, errlen)) < 0)
        goto rollback;
    if (n > 0) {
        snprintf(err, errlen, "--leave-keep: a relay started on %s meanwhile (%s): nothing changed; "
                 "stop it and run the step again", cfg->table, names);
        goto rollback;
    }
    if (write_back(conn, table_q, &k, &c, err, errlen) != 0)
        goto rollback;
    if (exec_ok(conn, "COMMIT", NULL, err, errlen) != 0)
        goto out;
    log_info("migrate: %s left keep mode: %ld rows at or below the watermarks and %ld recorded above them "
             "marked SENT, %ld parked rows FAILED, %ld rows' failed attempts written back, %ld rows at or "
             "below the watermarks left PENDING (requeued, or never recorded as published: the next relay "
             "publishes them); start its relays with OUTBOX_ON_SENT=mark (or delete)",
             cfg->table, c.sent_w, c.sent_rec, c.failed, c.noted, c.unrecorded);
    rc = 0;
    goto out;
rollback:
    PQclear(PQexec(conn, "ROLLBACK"));
out:
    free(q);
    free(schema_q);
    free(table_q);
    free(name);
    return rc;
}
