#!/usr/bin/env bash
# The container image, built by deploy/image.sh (buildah, no registry) and run from its own
# root filesystem mounted read-only, as the image's user, with nothing of the host's
# file system: no shell in it, under 40 MB, Debian 13's libraries (`--version`: librdkafka
# 2.8.0 or later, libpq 17), `--check-config`, `migrate`, the relay publishing 2,000 rows
# (checked in Kafka), its `healthcheck`, outbox-inbox and outbox-tail present, and a clean
# exit on SIGTERM. The image is the one the *_image tests run (one build per source tree).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || fail "building and running the image needs root (buildah, mounts, chroot)"
# (the image tests running beside this one wait for its build, and reuse it)
IMAGE_REUSE=1 flock /tmp/outbox-it-image.lock bash "$RELAYTEST_SRC/deploy/image.sh" --tag "$(image_tag)" \
    >"$WORK/image.out" 2>"$WORK/image.err" ||
    { cat "$WORK/image.err"; fail "deploy/image.sh failed"; }
cat "$WORK/image.out"
tag=$(awk '/^IMAGE / { print $2 }' "$WORK/image.out")
[ -n "$tag" ] || fail "deploy/image.sh printed no IMAGE line"
size=$(sed -n 's/^IMAGE .* size_bytes=\([0-9]*\) .*/\1/p' "$WORK/image.out")
[ -n "$size" ] && [ "$size" -lt $((40 * 1024 * 1024)) ] || fail "the image is not under 40 MB: $(cat "$WORK/image.out")"
bh() { buildah --storage-driver vfs --root "${IMAGE_STORAGE_ROOT:-/var/lib/containers/storage}" "$@"; }

bh inspect --type image "$tag" >"$WORK/inspect.json"
user=$(jq -r '.OCIv1.config.User' "$WORK/inspect.json")
entry=$(jq -r '.OCIv1.config.Entrypoint | join(" ")' "$WORK/inspect.json")
[ "$user" = 10001:10001 ] || fail "the image runs as '$user', not 10001:10001"
[ "$entry" = /usr/local/bin/outbox-relay ] || fail "entry point '$entry'"

ctr=$(bh from --pull=never "$tag")
root=$(bh mount "$ctr")
image_cleanup() { TEST_RC=${TEST_RC:-$?}; bh umount "$ctr" >/dev/null 2>&1 || true; bh rm "$ctr" >/dev/null 2>&1 || true; cleanup; }
trap image_cleanup EXIT
for f in bin/sh bin/bash usr/bin/apt-get usr/bin/curl; do
    [ ! -e "$root/$f" ] || fail "/$f is in the image"
done
for f in outbox-relay outbox-inbox outbox-tail; do
    [ -x "$root/usr/local/bin/$f" ] || fail "/usr/local/bin/$f is not in the image"
done
log "image $tag: user $user, entry point $entry, $(find "$root" -type f | wc -l) files, no shell"

# image_cmd ENV... -- ARGS: sets IMG_CMD to run the entry point (or --entrypoint PATH) as
# the image's user with the image's root read-only (test/env/image-run.sh), exec'd all the
# way down, so `"${IMG_CMD[@]}" &` makes $! the program itself
image_cmd() {
    local envs=() prog=/usr/local/bin/outbox-relay
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    [ "${1:-}" = --entrypoint ] && { prog=$2; shift 2; }
    IMG_CMD=(env -i "${envs[@]}" unshare --mount --propagation private
        sh "$RELAYTEST_SRC/test/env/image-run.sh" "$WORK/mnt" "$root" "$prog" "$@")
}
in_image() { image_cmd "$@"; "${IMG_CMD[@]}"; }
mkdir -p "$WORK/mnt"

in_image -- --version >"$WORK/version.out" 2>&1 || fail "--version in the image: $(cat "$WORK/version.out")"
grep -Eq "^outbox-relay .*\(librdkafka [0-9]+\.[0-9]+\.[0-9]+, librabbitmq [0-9]+\.[0-9]+\.[0-9]+, libpq [0-9]+\.[0-9]+, schema version [0-9]+\)" "$WORK/version.out" ||
    fail "--version said: $(cat "$WORK/version.out")"
in_image -- --entrypoint /usr/local/bin/outbox-inbox --version >"$WORK/iv.out" 2>&1 ||
    fail "outbox-inbox --version in the image: $(cat "$WORK/iv.out")"
grep -Eq "^outbox-inbox .*\(librdkafka [0-9]+\.[0-9]+\.[0-9]+, libpq [0-9]+\.[0-9]+\)" "$WORK/iv.out" ||
    fail "outbox-inbox --version said: $(cat "$WORK/iv.out")"
in_image -- --entrypoint /usr/local/bin/outbox-tail --help >"$WORK/tail.out" 2>&1 ||
    grep -qi "usage" "$WORK/tail.out" || fail "outbox-tail in the image: $(cat "$WORK/tail.out")"
# Debian 13's libraries: librdkafka 2.8.0 or later (SCRAM with Kafka 4.x), libpq 17
for f in version.out iv.out; do
    rdk=$(sed -n 's/.*(librdkafka \([0-9.]*\),.*/\1/p' "$WORK/$f") pq=$(sed -n 's/.*, libpq \([0-9]*\)\..*/\1/p' "$WORK/$f")
    [ "$(printf '%s\n2.8.0\n' "$rdk" | sort -V | head -1)" = 2.8.0 ] || fail "the image links librdkafka '$rdk', not 2.8.0 or later"
    [ "$pq" = 17 ] || fail "the image links libpq '$pq', not 17"
done
log "in the image: $(cat "$WORK/version.out"); $(cat "$WORK/iv.out")"

# migrate from the image, into a fresh database
fresh_db
in_image OUTBOX_PG_DSN="$DSN" -- migrate >"$WORK/migrate.log" 2>&1 || fail "migrate in the image: $(cat "$WORK/migrate.log")"
[ "$(psqlc "SELECT count(*) FROM outbox")" = 0 ] || fail "no outbox table after migrate"
db_fixtures

relay_env
in_image "${RELAY_BASE_ENV[@]}" -- --check-config >"$WORK/check-config.log" 2>&1 ||
    fail "--check-config in the image: $(cat "$WORK/check-config.log")"
grep -q "postgres reachable" "$WORK/check-config.log" || fail "--check-config said: $(cat "$WORK/check-config.log")"

image_cmd "${RELAY_BASE_ENV[@]}" OUTBOX_RELAY_NAME=image --
"${IMG_CMD[@]}" >"$WORK/relay-image.log" 2>&1 &
pid=$!
RELAY_PIDS+=("$pid")
# what the relay itself sees: its root file system read-only, its user 10001
wait_until 10 "the relay exec'd in the image" grep -qx outbox-relay "/proc/$pid/comm"
root_opts=$(awk '$5 == "/" { print $6 }' "/proc/$pid/mountinfo")
case ",$root_opts," in *,ro,*) ;; *) fail "the relay's root is mounted '$root_opts', not read-only" ;; esac
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" = 10001 ] || fail "the relay runs as uid $uid"
writers 4 500 50
wait_until 60 "2000 rows SENT by the relay in the image" all_sent
[ "$(count_status SENT)" = 2000 ] || fail "expected 2000 SENT, got $(count_status SENT)"
in_image OUTBOX_HTTP_ADDR="127.0.0.1:$RELAY_HTTP_PORT" -- healthcheck >"$WORK/hc.log" 2>&1 ||
    fail "healthcheck in the image: $(cat "$WORK/hc.log")"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 0 ] || fail "the relay in the image exited with $rc on SIGTERM"
check "$TOPIC_PREFIX.order" --exact || fail "Kafka content does not match the table"
log "ok: 2000 rows published from the image (read-only root, user 10001), clean exit"
