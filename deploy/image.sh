#!/usr/bin/env bash
# Builds the OCI image outbox-relay:<version> from deploy/Containerfile with buildah, with
# no registry: the base image the Containerfile's build stage names (debian:13) is made
# here by mmdebstrap from the configured apt sources — with the build packages already in
# it, so the build stage's apt-get install finds them — and tagged with that name; the
# Containerfile is then built with --pull=never. Prints the image's size.
#   deploy/image.sh [--tag NAME:VERSION]
# IMAGE_REUSE=1 keeps an image that already has the tag (the tests build one per source
# tree and share it).
# Needs root, buildah and mmdebstrap (scripts/deps.sh installs them with
# RELAYTEST_EXTRA_PACKAGES="buildah mmdebstrap"). Storage: vfs under
# ${IMAGE_STORAGE_ROOT:-/var/lib/containers/storage}; isolation: chroot.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n "s/^  version : '\(.*\)',$/\1/p" "$src/meson.build")
tag=outbox-relay:$version
[ "${1:-}" = --tag ] && tag=$2
say() { printf '# [%s image] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
export BUILDAH_ISOLATION=chroot STORAGE_DRIVER=vfs
bh() { buildah --storage-driver vfs --root "${IMAGE_STORAGE_ROOT:-/var/lib/containers/storage}" "$@"; }

base=docker.io/library/debian:13
if ! bh inspect --type image "$base" >/dev/null 2>&1; then
    say "making the base image $base with mmdebstrap"
    work=$(mktemp -d /tmp/outbox-image.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    build_packages=$(sed -n '/apt-get install/,/rm -rf/p' "$src/deploy/Containerfile" |
        tr ' \\&' '\n\n\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vE '^(apt-get|install|rm|rf|update)$' | paste -sd,)
    mmdebstrap --quiet --variant=apt --include="$build_packages" trixie "$work/base.tar"
    ctr=$(bh from scratch)
    bh add --quiet "$ctr" "$work/base.tar" / >/dev/null
    bh config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
    bh commit --quiet --rm "$ctr" "$base" >/dev/null
fi
if [ -n "${IMAGE_REUSE:-}" ] && bh inspect --type image "$tag" >/dev/null 2>&1; then
    say "$tag exists: kept (IMAGE_REUSE)"
else
    say "building $tag from deploy/Containerfile"
    log=$(mktemp /tmp/outbox-image-build.XXXXXX)
    bh build --pull=never --isolation chroot --layers=false -f "$src/deploy/Containerfile" -t "$tag" "$src" \
        >"$log" 2>&1 || { cat "$log" >&2; rm -f "$log"; say "the build failed"; exit 1; }
    rm -f "$log"
fi
# the image's size: its layers, uncompressed (what it takes on a node's disk)
size=$(bh inspect --type image "$tag" | jq -r '.Manifest' | jq '[.layers[].size] | add')
say "built $tag"
echo "IMAGE $tag size_bytes=$size size_mb=$(awk -v s="$size" 'BEGIN { printf "%.1f", s / 1048576 }')"
