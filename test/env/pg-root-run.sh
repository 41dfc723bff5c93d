#!/bin/sh
# Runs a program of a PostgreSQL root file system (test/env/pg17-root.sh) as the postgres
# user: in a private mount namespace the host's /tmp (where the clusters live), /dev and
# /proc are bound into the root, then chroot. A server started this way stays in that
# namespace; nothing is mounted outside it.
#   unshare --mount --propagation private sh test/env/pg-root-run.sh ROOT PROGRAM [ARGS...]
set -e
root=$1
shift
mount --bind /tmp "$root/tmp"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
exec chroot --userspec="$(id -u postgres):$(id -g postgres)" "$root" "$@"
