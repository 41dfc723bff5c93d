/* Unit tests: dsn_redact keeps a DSN's secrets out of messages, in every way a DSN can
 * carry one, and leaves the rest of the message as it was. */
#include <string.h>

#include "core/dsn.h"
#include "tap.h"

static void redacts(const char *dsn, const char *text, const char *want, const char *what)
{
    char buf[512];
    dsn_redact(dsn, text, buf, sizeof(buf));
    const char *out = buf;
    is_str(out, want, "%s", what);
}

int main(void)
{
    redacts("host=db password=s3cret", "bad option near password=s3cret", "bad option near password=***",
            "keyword password");
    redacts("host=db password='s3 cret'", "got 's3 cret' here", "got '***' here", "quoted password with a space");
    redacts("postgresql://app:s3cret@db/app", "could not connect: postgresql://app:s3cret@db/app",
            "could not connect: postgresql://app:***@db/app", "URI userinfo");
    redacts("postgresql://app@db/app?password=s3cret", "?password=s3cret", "?password=***", "URI query password");
    redacts("postgresql://app:s3%40cret@db/app", "s3%40cret and s3@cret", "*** and ***",
            "percent-encoded password: both spellings");
    redacts("host=db sslpassword=k3y", "sslpassword=k3y", "sslpassword=***", "sslpassword");
    redacts("host=db user=app", "connection to db as app failed", "connection to db as app failed",
            "no secret: the text unchanged");
    redacts("", "nothing to hide", "nothing to hide", "empty DSN");
    char small[8];
    dsn_redact("password=s3cret", "password=s3cret", small, sizeof(small));
    ok(strlen(small) < sizeof(small) && strstr(small, "s3c") == NULL, "a short buffer: cut, still no secret (%s)", small);
    return done();
}
