/* Keeping a DSN's secrets out of messages: libpq's parse and connect errors quote parts of
 * the connection string, and a URI's userinfo, a password= value (quoted or not, in key
 * words or in a URI query) or a mistyped percent-encoding of one would end up in logs. */
#ifndef OUTBOX_DSN_H
#define OUTBOX_DSN_H

#include <stddef.h>

/* Copies text into out (always NUL-terminated), with every secret of dsn, as written and
 * percent-decoded, replaced by "***". */
void dsn_redact(const char *dsn, const char *text, char *out, size_t outlen);

#endif
