/* Unit tests: the migrations' placeholder expansion over every embedded migration, and the
 * table-name helpers the statements are built from. */
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "relay/schema.h"
#include "tap.h"

int main(void)
{
    char *s = schema_expand("CREATE TABLE @TABLE@ (p @PAYLOAD_TYPE@); CREATE INDEX @NAME@_x ON @TABLE@ "
                            "(p); GRANT USAGE ON SCHEMA @SCHEMA@; -- @OTHER@ @ @@",
                            "billing.events", "bytea");
    is_str(s, "CREATE TABLE \"billing\".\"events\" (p bytea); CREATE INDEX events_x ON \"billing\".\"events\" "
              "(p); GRANT USAGE ON SCHEMA \"billing\"; -- @OTHER@ @ @@",
           "placeholders filled in; anything else left as written");
    free(s);
    s = schema_expand("@TABLE@/@SCHEMA@/@NAME@", "outbox", "jsonb");
    is_str(s, "\"public\".\"outbox\"/\"public\"/outbox", "no schema: public");
    free(s);

    /* every migration the binary carries expands to SQL without a placeholder left over */
    regex_t leftover;
    regcomp(&leftover, "@[A-Z_]+@", REG_EXTENDED | REG_NOSUB);
    ok(schema_file_count >= 6, "the binary carries its migrations (%d)", schema_file_count);
    int versions_ok = 1;
    for (int i = 0; i < schema_file_count; i++) {
        char *sql = schema_expand(schema_files[i].sql, "app.outbox", "jsonb");
        ok(regexec(&leftover, sql, 0, NULL, 0) != 0, "%s: no placeholder left", schema_files[i].name);
        ok(strstr(sql, "\"app\"") != NULL || strstr(schema_files[i].sql, "@") == NULL,
           "%s: the schema is the configured one", schema_files[i].name);
        free(sql);
        versions_ok &= schema_files[i].version >= 1 && schema_files[i].version <= schema_version();
    }
    regfree(&leftover);
    ok(versions_ok, "every migration's version is within 1..%d", schema_version());

    char *schema_q, *table_q, *name;
    schema_names("a.b", &schema_q, &table_q, &name);
    is_str(schema_q, "\"a\"", "schema quoted");
    is_str(table_q, "\"a\".\"b\"", "table quoted with its schema");
    is_str(name, "b", "bare name");
    free(schema_q);
    free(table_q);
    free(name);
    s = schema_rows_relation("a.b", 0);
    is_str(s, "\"a\".\"b\"", "native layout: the table itself");
    free(s);
    s = schema_rows_relation("a.b", 1);
    is_str(s, "\"a\".\"b_relay_rows\"", "Debezium layout: the view with native names");
    free(s);
    s = schema_version_query("public.outbox");
    ok(strstr(s, "FROM \"public\".outbox_relay_schema") != NULL, "version query reads the schema's own table: %s", s);
    free(s);
    return done();
}
