/* Unit tests: the statements outbox_sql builds from a configuration, compared with golden
 * files (test/golden/sql-*.txt: a change to any statement shows up as a diff to review).
 * UPDATE_GOLDEN=1 writes them anew. GOLDEN_DIR names their folder (meson sets it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relay/config.h"
#include "relay/outbox.h"
#include "tap.h"

static void add(struct strbuf *sb, const char *name, const char *sql)
{
    strbuf_printf(sb, "-- %s\n%s\n\n", name, sql ? sql : "(none)");
}

/* Every statement of the configuration, one after the other. */
static char *statements(char **env, int bytea, int requeue_count, int bell)
{
    struct config cfg;
    struct command cmd;
    char err[512];
    char *argv[] = {"outbox-relay", NULL};
    int rc = config_load(&cfg, &cmd, env, 1, argv, err, sizeof(err));
    command_destroy(&cmd);
    if (rc != 0) {
        printf("# config: %s\n", err);
        config_destroy(&cfg);
        return NULL;
    }
    struct outbox_sql sql;
    outbox_sql_init(&sql, &cfg);
    outbox_sql_claim(&sql, &cfg, bytea, requeue_count);
    outbox_sql_arm(&sql, &cfg, bell);
    struct strbuf sb;
    strbuf_init(&sb);
    add(&sb, "claim", sql.claim);
    add(&sb, "floor_probe", sql.floor_probe);
    add(&sb, "mark", sql.mark);
    add(&sb, "park", sql.park);
    add(&sb, "note_failed", sql.note_failed);
    add(&sb, "row_failed", sql.row_failed);
    add(&sb, "arm", sql.arm);
    add(&sb, "version", sql.version);
    add(&sb, "start_check", sql.start_check);
    add(&sb, "stats", sql.stats);
    add(&sb, "long_tx", sql.long_tx);
    add(&sb, "xmin_holder", sql.xmin_holder);
    add(&sb, "purge", sql.purge);
    add(&sb, "duplicates", sql.duplicates);
    add(&sb, "topic_expr", sql.topic_expr);
    add(&sb, "lease_scan", sql.lease_scan);
    add(&sb, "lease_acquire", sql.lease_acquire);
    add(&sb, "lease_release", sql.lease_release);
    add(&sb, "lease_log", sql.lease_log);
    add(&sb, "worker_setup", sql.worker_setup);
    add(&sb, "listen_setup", sql.listen_setup);
    strbuf_printf(&sb, "-- lease_key\n%d\n", sql.lease_key);
    outbox_sql_destroy(&sql);
    config_destroy(&cfg);
    return sb.buf;
}

static void golden(const char *name, char *got)
{
    const char *dir = getenv("GOLDEN_DIR");
    char path[1024];
    snprintf(path, sizeof(path), "%s/sql-%s.txt", dir ? dir : "test/golden", name);
    if (getenv("UPDATE_GOLDEN")) {
        FILE *f = fopen(path, "wb");
        ok(f && fputs(got, f) >= 0 && fclose(f) == 0, "%s written", path);
        free(got);
        return;
    }
    char err[512];
    char *want = settings_read_secret(path, "the golden file", err, sizeof(err)); /* less its last newline */
    size_t got_len = got ? strlen(got) : 0;
    if (got_len && got[got_len - 1] == '\n')
        got[got_len - 1] = '\0';
    if (!want || !got || strcmp(want, got) != 0) {
        ok(0, "%s: the statements differ from %s (UPDATE_GOLDEN=1 writes it; review the diff)", name, path);
        if (want && got) { /* the first line that differs */
            const char *a = want, *b = got;
            int line = 1;
            while (*a && *a == *b) {
                line += *a == '\n';
                a++, b++;
            }
            printf("#   first difference at line %d: want '%.80s' got '%.80s'\n", line, a, b);
        }
    } else {
        ok(1, "%s: the statements are the golden file's", name);
    }
    free(want);
    free(got);
}

int main(void)
{
    /* the relay's name is fixed: its default, the host name, is part of application_name */
    char *mark[] = {"OUTBOX_TABLE=public.outbox", "OUTBOX_RELAY_NAME=golden", NULL};
    golden("native-mark", statements(mark, 0, 1, 1));
    char *del[] = {"OUTBOX_TABLE=app.events", "OUTBOX_ON_SENT=delete", "OUTBOX_POISON_POLICY=skip",
                   "OUTBOX_TOPIC_TEMPLATE={aggregate_type}.{event_type}", "OUTBOX_NOTIFY_CHANNEL=",
                   "OUTBOX_RELAY_NAME=golden", NULL};
    golden("native-delete", statements(del, 1, 0, 0));
    char *dbz[] = {"OUTBOX_LAYOUT=debezium", "OUTBOX_ADDITIONAL_PLACEMENT=tenant:header,type:header:eventType",
                   "OUTBOX_RELAY_NAME=golden", NULL};
    golden("debezium", statements(dbz, 0, 1, 1));
    return done();
}
