#!/bin/sh
# Runs a program of a container image's root file system the way a runtime would: in a
# private mount namespace, the root bound read-only, /dev and /proc mounted, as the image's
# user 10001; exec'd all the way down, so the caller's $! is the program itself.
#   unshare --mount --propagation private sh test/env/image-run.sh MOUNTPOINT ROOTFS PROGRAM [ARGS...]
# (needs root; the environment is the caller's)
set -e
mnt=$1 root=$2
shift 2
mount --bind "$root" "$mnt"
mount -o remount,bind,ro "$mnt"
mount --rbind /dev "$mnt/dev"
mount -t proc proc "$mnt/proc"
exec chroot --userspec=10001:10001 "$mnt" "$@"
