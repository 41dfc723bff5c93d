/* Schema migrations carried in the binary (generated from schema/), applied by
 * `outbox-relay migrate`, and the version check the relay runs at start-up. */
#ifndef OUTBOX_SCHEMA_H
#define OUTBOX_SCHEMA_H

#include <libpq-fe.h>
#include <stddef.h>

#include "pg/pgutil.h" /* schema_names */

/* The table layouts a migration applies to (OUTBOX_LAYOUT; tools/embed_sql.c). */
#define SCHEMA_NATIVE 1
#define SCHEMA_DEBEZIUM 2

struct schema_file {
    int version;
    int layouts; /* SCHEMA_NATIVE, SCHEMA_DEBEZIUM or both */
    const char *name;
    const char *sql; /* with @SCHEMA@, @TABLE@, @NAME@ placeholders */
};

extern const struct schema_file schema_files[];
extern const int schema_file_count;

/* The version this build expects of a native table (the highest migration it carries), and
 * of a table in either layout (the Debezium layout's stops at 6: later migrations are the
 * native layout's). */
int schema_version(void);
int schema_layout_version(int debezium);

/* A migration's SQL with its placeholders filled in for the table: @SCHEMA@ and @TABLE@ (quoted),
 * @NAME@ (the bare name), @PAYLOAD_TYPE@. Pure; caller frees. */
char *schema_expand(const char *sql, const char *table, const char *payload_type);

/* (schema_names, the table's quoted parts: pg/pgutil.h) */

/* Applies missing migrations to the table, one at a time, serialised by a session advisory
 * lock, with lock_timeout and a pinned search_path; each in a transaction, with steps
 * outside it where the file asks (see schema.c). Blocking: only for the migrate command,
 * never on the relay loop. conn is borrowed. Returns 0, or -1 with err. */
/* migrate's lock (a session advisory lock; waited for by trying every 100 ms, at most 30 s),
 * for the steps migrate runs after the migrations (migrate --partition): 0, or -1 with err. */
int schema_lock(PGconn *conn, char *err, size_t errlen);
void schema_unlock(PGconn *conn);
int schema_migrate(PGconn *conn, const char *table, const char *payload_type, int debezium,
                   int *applied, char *err, size_t errlen);

/* The relation the relay reads and writes rows through: the table itself, or in the
 * Debezium layout the view "<name>_relay_rows" that gives its columns the native names.
 * Quoted, with its schema; caller frees. */
/* The relation the commands read rows' status from: schema_rows_relation's, or in keep
 * mode the view <table>_kept (schema 7), whose status, attempts, last_error and sent_at come
 * from the watermark, the published records and the parked table. Caller frees. */
char *schema_read_relation(const char *table, int debezium, int keep);
char *schema_rows_relation(const char *table, int debezium);

/* Blocking: the type of the table's payload column (format_type: "jsonb", "bytea", ...),
 * "" when the table or the column does not exist. Returns 0, or -1 with err. */
int schema_payload_type(PGconn *conn, const char *table, char *out, size_t outlen, char *err,
                        size_t errlen);

/* SQL returning the highest applied version for the table (NULL if none); fails with
 * undefined_table (42P01) before the first migrate. $1 = table as configured. Caller frees. */
char *schema_version_query(const char *table);

/* What the start-up check's result (outbox_sql.start_check, or the version query alone; ok
 * or failed, never NULL) means for a relay of this
 * build, which runs against its own schema version N and N-1 (rolling upgrades):
 * SCHEMA_OK (*have: the version found); SCHEMA_UNUSABLE (no schema, a version outside
 * those two, or row-level security hiding rows: the relay must stop, err says what to do); SCHEMA_RETRY (any other failure). */
enum schema_check { SCHEMA_OK, SCHEMA_UNUSABLE, SCHEMA_RETRY };
enum schema_check schema_check_result(const PGresult *res, const char *table, int debezium, int *have,
                                      char *err, size_t errlen);

#endif
