/* A multi-host DSN's host list (host=a,b port=p1,p2 hostaddr=...), kept to rotate where a
 * connection attempt starts. libpq walks the list itself, but ignores connect_timeout in
 * asynchronous mode: pgconn.c gives each host its own timeout by starting the next attempt
 * at the host after the one that did not answer. Pure (libpq's DSN parser only). */
#ifndef OUTBOX_HOSTLIST_H
#define OUTBOX_HOSTLIST_H

#define HOSTLIST_CONNECT_TIMEOUT_S 10 /* per host, unless the DSN sets connect_timeout */

/* The DSN's host list, kept to rotate where an attempt starts. */
struct hostlist {
    int n;          /* hosts in the DSN (0 or 1: nothing to rotate) */
    char **host;    /* n entries, or NULL when the DSN has no host list */
    char **hostaddr;
    char **port;    /* n entries, or NULL when one port (or none) serves every host */
    int timeout_s;  /* per-host connect timeout */
};

/* From the DSN's host (or hostaddr alone), hostaddr and port settings: a list of n > 1 hosts,
 * or n = 0 (one host or none: nothing to rotate); hostaddr and port are kept when they have
 * n entries. timeout_s is the DSN's connect_timeout (libpq's minimum of 2 s) or
 * HOSTLIST_CONNECT_TIMEOUT_S. A DSN libpq cannot parse gives n = 0 (the connect reports it). */
void hostlist_init(struct hostlist *hl, const char *dsn);
void hostlist_destroy(struct hostlist *hl);
/* items (n of them) joined with commas, starting at index first; caller frees. */
char *hostlist_rotated(char **items, int n, int first);

#endif
