/* Between audit.c (reading Kafka, comparing in PostgreSQL) and audit_report.c (the report):
 * the audit's state and its findings. Private to them. */
#ifndef OUTBOX_AUDIT_INT_H
#define OUTBOX_AUDIT_INT_H

#include <jansson.h>
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>

#include "relay/config.h"
#include "core/util.h"

#define COPY_ROWS 10000      /* messages per COPY into the temporary table */
#define MAX_TOPICS 1000      /* topics named by the window's rows */
#define STALL_S 30           /* no message for this long with partitions unread: give up */
#define PROGRESS_S 5         /* progress line on the log this often */
#define SHOW_LOST 10         /* lost rows named on the log */
#define LIST_LOST 100        /* lost rows listed in the JSON report */

/* The window on created_at: $1 since, $2 until, either NULL for open. */
#define WINDOW "($1::timestamptz IS NULL OR created_at >= $1::timestamptz) AND " \
               "($2::timestamptz IS NULL OR created_at < $2::timestamptz)"

struct part {
    int64_t low, start, high; /* watermarks taken at the start; where reading starts */
    int truncated;            /* retention deleted messages the window may have had */
    int64_t bound_ts;         /* latest timestamp among the first messages read (truncated only) */
    int read_any, done;
};

struct topic {
    char *name;
    int n_parts;
    struct part *parts;
    long long read;
    int64_t verified_from_ms; /* rows created at or before this cannot be judged; 0: all can */
};

struct audit {
    PGconn *conn;
    const struct config *cfg;
    const struct command *cmd;
    char *err;
    size_t errlen;
    struct topic topics[MAX_TOPICS];
    int n_topics;
    rd_kafka_t *rk;
    struct strbuf copy; /* COPY text of the messages not yet sent to PostgreSQL */
    int copy_rows;
    long long to_read, read, other;
};

struct report {
    long long committed, sent, pending, parked, sent_after_start;
    long long delivered, messages, order_violations, lost, unverifiable;
    double p50, p99; /* ms; negative when nothing was measured */
    const char *measured_to;
    json_t *lost_rows;
};

/* Prints the report on out: text, or JSON with the configuration's --json. */
void audit_print_report(struct audit *a, const struct report *r, FILE *out);

#endif
