/* Unit tests: exactly-once's progress record (sink/progress.h): rows committed and not
 * recorded, by id and event id; the record's value, read back; malformed values refused. */
#include <stdlib.h>
#include <string.h>

#include "sink/progress.h"
#include "tap.h"

static void free_rows(int64_t *ids, char **eids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(eids[i]);
    free(ids);
    free(eids);
}

int main(void)
{
    struct progress_rows c = {0};
    for (int64_t id = 1; id <= 1000; id++) {
        char eid[32];
        snprintf(eid, sizeof(eid), "e-%lld", (long long)id);
        progress_put(&c, id, eid);
    }
    is_int(c.n, 1000, "1000 rows");
    ok(progress_has(&c, 500, "e-500"), "a row by id and event id");
    ok(!progress_has(&c, 500, "e-other"), "the same id with another event id is not that row");
    ok(!progress_has(&c, 1001, "e-1001"), "an id never put");
    for (int64_t id = 1; id <= 1000; id += 2)
        progress_del(&c, id);
    is_int(c.n, 500, "recorded rows leave (500 left)");
    ok(!progress_has(&c, 1, "e-1") && progress_has(&c, 2, "e-2"), "the right ones left");
    progress_del(&c, 5000);
    is_int(c.n, 500, "deleting an id not there changes nothing");
    progress_put(&c, 2, "e-2b");
    is_int(c.n, 500, "an id put again is not counted twice");
    ok(progress_has(&c, 2, "e-2b") && !progress_has(&c, 2, "e-2"), "it takes the newest event id");
    uint64_t v2 = progress_version(&c, 2);
    ok(v2 != 0 && progress_version(&c, 1) == 0, "an entry has a version, a removed one none");
    uint64_t v4 = progress_version(&c, 4);
    progress_put(&c, 4, "e-4b"); /* the same id given to another row (a rewound sequence) */
    progress_del_version(&c, 4, v4); /* a delete meant for the row it replaced */
    ok(progress_has(&c, 4, "e-4b"), "a delete for an older version leaves the newer row");
    progress_del_version(&c, 2, v2);
    ok(!progress_has(&c, 2, "e-2b"), "a delete for its own version removes it");
    progress_put(&c, 2, "e-2b");
    ok(progress_version(&c, 2) > v2, "a put again gets a newer version");
    for (int64_t id = 2000; id < 3000; id++) /* grows over removed slots */
        progress_put(&c, id, "x");
    is_int(c.n, 1500, "1500 after more");
    ok(progress_version(&c, 2) > v2 && progress_has(&c, 4, "e-4b"), "versions kept when the table grows");

    struct progress_rows held = {0};
    progress_put(&held, 7000, "quote\"and\\slash");
    struct strbuf sb;
    strbuf_init(&sb);
    progress_value(&c, &held, &sb);
    int64_t *ids;
    char **eids;
    size_t n;
    char err[256];
    is_int(progress_parse(sb.buf, sb.len, &ids, &eids, &n, err, sizeof(err)), 0, "the value reads back");
    is_int(n, 1501, "every row of both sets");
    struct progress_rows back = {0};
    for (size_t i = 0; i < n; i++)
        progress_put(&back, ids[i], eids[i]);
    ok(progress_has(&back, 2, "e-2b") && progress_has(&back, 2999, "x") && progress_has(&back, 7000, "quote\"and\\slash"),
       "ids and event ids as written (escaped strings too)");
    ok(!progress_has(&back, 1, "e-1"), "no recorded row");
    free_rows(ids, eids, n);

    strbuf_reset(&sb);
    progress_value(NULL, NULL, &sb);
    is_str(sb.buf, "{\"v\":1,\"rows\":[]}", "an empty record");
    is_int(progress_parse(sb.buf, sb.len, &ids, &eids, &n, err, sizeof(err)), 0, "reads as empty");
    is_int(n, 0, "no row");
    free_rows(ids, eids, n);

    const char *bad[] = {"not json", "{\"rows\":[]}", "{\"v\":2,\"rows\":[]}", "{\"v\":1,\"rows\":[[1]]}",
                         "{\"v\":1,\"rows\":[[\"1\",\"e\"]]}", "{\"v\":1,\"rows\":[[0,\"e\"]]}", "{\"v\":1}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ids = (int64_t *)1;
        is_int(progress_parse(bad[i], strlen(bad[i]), &ids, &eids, &n, err, sizeof(err)), -1,
               "refused: %s (%s)", bad[i], err);
        ok(ids == NULL && n == 0, "nothing returned for it");
    }
    strbuf_destroy(&sb);
    progress_clear(&c);
    progress_clear(&held);
    progress_clear(&back);
    is_int(c.n, 0, "cleared");
    return done();
}
