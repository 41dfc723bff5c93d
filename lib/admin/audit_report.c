/* outbox-relay audit's report (audit_int.h): what was verified, lost, duplicated and out of
 * order, as text or JSON. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin/audit_int.h"
#include "core/log.h"

static void iso_time(int64_t ms, char *buf, size_t len)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03dZ", (int)(ms % 1000));
}


/* Rows marked SENT before the start whose event is in no message read: lost, or
 * unverifiable when created before the verified window of their topic. */
void audit_print_report(struct audit *a, const struct report *r, FILE *out)
{
    const struct config *cfg = a->cfg;
    const struct command *cmd = a->cmd;
    long long duplicates = r->messages - r->delivered;
    if (cmd->json) {
        json_t *topics = json_array();
        for (int t = 0; t < a->n_topics; t++) {
            const struct topic *tp = &a->topics[t];
            char from[40];
            iso_time(tp->verified_from_ms, from, sizeof(from));
            json_array_append_new(topics, json_pack("{s:s,s:i,s:I,s:o}", "topic", tp->name, "partitions",
                                                    tp->n_parts, "messages_read", (json_int_t)tp->read,
                                                    "verified_from", tp->verified_from_ms ? json_string(from)
                                                                                          : json_null()));
        }
        json_t *doc = json_pack(
            "{s:s,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:o,s:o,s:s},s:o,s:O}",
            "table", cfg->table, "since", cmd->since ? json_string(cmd->since) : json_null(),
            "until", cmd->until ? json_string(cmd->until) : json_null(),
            "committed", (json_int_t)r->committed, "sent", (json_int_t)r->sent,
            "pending", (json_int_t)r->pending, "parked", (json_int_t)r->parked,
            "sent_after_start", (json_int_t)r->sent_after_start, "delivered", (json_int_t)r->delivered,
            "lost", (json_int_t)r->lost, "unverifiable", (json_int_t)r->unverifiable,
            "duplicates", (json_int_t)duplicates, "order_violations", (json_int_t)r->order_violations,
            "other_messages", (json_int_t)a->other,
            "completion_ms", "p50", r->p50 >= 0 ? json_real(r->p50) : json_null(),
            "p99", r->p99 >= 0 ? json_real(r->p99) : json_null(), "measured_to", r->measured_to,
            "topics", topics, "lost_rows", r->lost_rows);
        char *text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        fprintf(out, "%s\n", text);
        free(text);
        json_decref(doc);
        return;
    }
    fprintf(out, "audit of %s, rows created %s%s%s%s\n", cfg->table, cmd->since ? "from " : "",
            cmd->since ? cmd->since : "since the start", cmd->until ? " until " : "", cmd->until ? cmd->until : "");
    fprintf(out, "  committed %lld: sent %lld, pending %lld, parked %lld (%lld marked after the audit started: not judged)\n",
            r->committed, r->sent, r->pending, r->parked, r->sent_after_start);
    fprintf(out, "  delivered %lld, lost %lld, duplicates %lld, order violations %lld\n", r->delivered,
            r->lost, duplicates, r->order_violations);
    if (r->p50 >= 0)
        fprintf(out, "  completion, created to %s: p50 %.1f ms, p99 %.1f ms\n",
                strcmp(r->measured_to, "marked_sent") == 0 ? "marked SENT" : "Kafka append time", r->p50, r->p99);
    for (int t = 0; t < a->n_topics; t++) {
        const struct topic *tp = &a->topics[t];
        char from[40];
        iso_time(tp->verified_from_ms, from, sizeof(from));
        fprintf(out, "  topic %s: %d partitions, %lld messages read, verified %s%s\n", tp->name, tp->n_parts,
                tp->read, tp->verified_from_ms ? "for rows created from " : "from its first message",
                tp->verified_from_ms ? from : "");
    }
    if (r->unverifiable)
        fprintf(out, "  unverifiable %lld: not in Kafka, created before what retention kept\n", r->unverifiable);
    fprintf(out, "  %lld messages read belong to no row of this window\n", a->other);
}
