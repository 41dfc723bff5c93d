#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs packages, fetches the Kafka jars,
# starts a throwaway PostgreSQL 15 and Kafka, builds with ASan+UBSan and -Werror (test
# hooks on), runs the unit and integration tests, and prints "N passed, N failed".
#   scripts/test.sh [meson test args...]    e.g. scripts/test.sh --suite unit
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

bash scripts/deps.sh
bash test/env/kafka.sh fetch

build=${RELAYTEST_BUILD:-build-test}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dtest_hooks=true -Dwerror=true -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null
fi
ninja -C "$build"

. scripts/servers.sh
trap servers_stop EXIT
servers_start

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/test/lsan.supp:print_suppressions=0}
export RELAYTEST_SRC=$src

rc=0
meson test -C "$build" --print-errorlogs --num-processes 1 "$@" || rc=$?

log="$build/meson-logs/testlog.json"
passed=$(grep -c '"result": "OK"' "$log" || true)
total=$(grep -c '"result":' "$log" || true)
failed=$((total - passed))
echo "$passed passed, $failed failed"
if [ "$rc" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$total" -eq 0 ]; then
    exit 1
fi
