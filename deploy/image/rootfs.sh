#!/bin/sh
# Runs in the Containerfile's build stage: assembles the runtime image's whole root
# filesystem in DEST — the three programs, exactly the shared libraries they load (their
# ldd closure, so no shell, package manager or other tool is in the image), the CA
# certificates for TLS, and passwd/group entries for the unprivileged user 10001.
#   deploy/image/rootfs.sh BUILD_DIR DEST
set -eu
build=$1 dest=$2
mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/tmp" "$dest/dev" "$dest/proc" "$dest/sys"
chmod 1777 "$dest/tmp"
for prog in outbox-relay outbox-inbox outbox-tail; do
    install -m 0755 -s "$build/$prog" "$dest/usr/local/bin/$prog"
done
# every library the programs load, at the path the dynamic linker finds it (symlinks
# followed, so each is one regular file), and the dynamic linker itself
for prog in outbox-relay outbox-inbox outbox-tail; do
    ldd "$build/$prog" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
done | sort -u | while read -r lib; do
    mkdir -p "$dest$(dirname "$lib")"
    cp -L "$lib" "$dest$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/nonexistent\nrelay:x:10001:10001:outbox-relay:/nonexistent:/nonexistent\n' >"$dest/etc/passwd"
printf 'root:x:0:\nrelay:x:10001:\n' >"$dest/etc/group"
printf 'hosts: files dns\n' >"$dest/etc/nsswitch.conf"
