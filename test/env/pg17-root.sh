#!/usr/bin/env bash
# A Debian 13 (trixie) root file system with PostgreSQL 17, made once by mmdebstrap from the
# configured Debian mirror: PostgreSQL 17's binaries need Debian 13's glibc, so on this
# Debian 12 host they run inside it (test/env/pg.sh with PG_ROOT=DIR, through
# pg-root-run.sh). Its postgres user is given the host's postgres uid and gid, so that the
# clusters' files (under the host's /tmp, bound in) belong to the same user on both sides.
#   pg17-root.sh DIR      makes DIR unless it is complete (a marker file), prints DIR
# Needs root and mmdebstrap (scripts/deps.sh).
set -euo pipefail
dir=${1:?usage: pg17-root.sh DIR}
# Tests running side by side may ask for it at once: one makes it, the others wait.
mkdir -p "$(dirname "$dir")"
exec 9>>"$dir.lock"
flock 9
if [ ! -f "$dir/.outbox-pg17-root" ]; then
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    echo "pg17-root: making a Debian 13 root with postgresql-17 in $dir" >&2
    mmdebstrap --quiet --variant=apt --include=postgresql-17 trixie "$dir" >&2
    uid=$(id -u postgres) gid=$(id -g postgres)
    sed -i '/^postgres:/d' "$dir/etc/passwd" "$dir/etc/group" "$dir/etc/shadow"
    echo "postgres:x:$uid:$gid:PostgreSQL administrator:/var/lib/postgresql:/bin/sh" >>"$dir/etc/passwd"
    echo "postgres:x:$gid:" >>"$dir/etc/group"
    [ -x "$dir/usr/lib/postgresql/17/bin/postgres" ] || { echo "pg17-root: no PostgreSQL 17 in $dir" >&2; exit 1; }
    touch "$dir/.outbox-pg17-root"
fi
echo "$dir"
