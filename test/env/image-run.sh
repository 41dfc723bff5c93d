#!/bin/sh
# Runs a program of a container image's root file system the way a runtime would: in a
# private mount namespace, the root bound read-only, /dev and /proc mounted, as the image's
# user 10001; exec'd all the way down, so the caller's $! is the program itself.
#   unshare --mount --propagation private sh test/env/image-run.sh MOUNTPOINT ROOTFS PROGRAM [ARGS...]
# (needs root; the environment is the caller's). IMAGE_RUN_VOLUMES=1 also binds the host's
# /tmp (the tests' work folders: secrets, certificates) and /etc/hosts into it, as a runtime
# binds volumes and writes the container's hosts file; without it nothing of the host's
# file system is visible.
set -e
mnt=$1 root=$2
shift 2
if [ -n "${IMAGE_RUN_VOLUMES:-}" ] && [ ! -e "$root/etc/hosts" ]; then
    : >"$root/etc/hosts" # the mount point (in the container's copy of the image)
fi
mount --bind "$root" "$mnt"
mount -o remount,bind,ro "$mnt"
mount --rbind /dev "$mnt/dev"
mount -t proc proc "$mnt/proc"
if [ -n "${IMAGE_RUN_VOLUMES:-}" ]; then
    mount --bind /tmp "$mnt/tmp"
    mount --bind /etc/hosts "$mnt/etc/hosts"
fi
exec chroot --userspec=10001:10001 "$mnt" "$@"
