#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs packages, fetches the Kafka jars,
# starts a throwaway PostgreSQL 15 and Kafka, then
#   1. builds with ASan+UBSan and -Werror (test hooks on) and runs every unit and
#      integration test;
#   2. runs the C unit tests and a small integration subset under valgrind memcheck;
#   3. runs cppcheck, and checks that every mutant patch still applies (mutants.sh --check);
#   4. replays the fuzz regression seeds and fuzzes each libFuzzer target briefly;
#   5. runs the benchmark's smoke mode (every stage once, small; figures printed, not asserted);
# and prints "N passed, N failed". Exits non-zero on any failure.
#   scripts/test.sh                      everything
#   scripts/test.sh [meson test args]    only stage 1, e.g. --suite unit, or a test name
# Stage 1 runs TEST_JOBS tests at a time (default 3; test/meson.build names those that run
# alone).
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

bash scripts/deps.sh || exit 1
bash test/env/kafka.sh fetch || exit 1
bash test/env/kafka.sh fetch-tools || exit 1 # Kafka's AclCommand (exactly_once_acl)
KAFKA_VERSION=3.9.1 bash test/env/kafka.sh fetch || exit 1 # the SCRAM broker of the tls test
bash test/env/connect.sh fetch || exit 1 # Kafka Connect and Debezium, for the side-by-side test

build=${OUTBOX_TEST_BUILD:-build-test}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" -Dtest_hooks=true -Dwerror=true -Db_sanitize=address,undefined \
        -Db_lundef=false >/dev/null || exit 1
fi
ninja -C "$build" || exit 1

. scripts/servers.sh
trap servers_stop EXIT
servers_start || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/test/lsan.supp:print_suppressions=0}
export RELAYTEST_SRC=$src

passed=0 failed=0
summary=$(mktemp)
count() { # adds meson test's summary (in $summary) to the totals; skipped counts as failed
    local ok bad
    ok=$(awk '/^Ok:/ { print $2 }' "$summary")
    bad=$(awk '/^(Fail|Timeout|Skipped|Unexpected Pass|Expected Fail):/ { n += $NF } END { print n + 0 }' "$summary")
    passed=$((passed + ${ok:-0}))
    failed=$((failed + bad))
    [ -n "$ok" ] || failed=$((failed + 1)) # meson did not even report
}

# recap LOG: for each test of meson's LOG that did not pass, its result, the 15 lines before
# its first "FAIL: " (lib.sh's fail) and its last 10 log lines (at the very end of the
# output, which is what a CI report keeps when it keeps only the end)
recap() {
    awk 'function show(   i, f, from) {
             print "-- " name; print "   " res
             f = -1
             for (i = 0; i < n; i++) if (buf[i] ~ /FAIL: /) { f = i; break }
             if (f >= 0) { from = f - 15 < 0 ? 0 : f - 15; for (i = from; i <= f; i++) print "   " substr(buf[i], 1, 240) }
             print "   ..."
             from = n - 10 < 0 ? 0 : n - 10
             for (i = from; i < n; i++) print "   " substr(buf[i], 1, 240)
         }
         function done() { if (bad) show(); bad = 0; n = 0; name = ""; res = "" }
         /^=+ [0-9]+\/[0-9]+ =+$/ { done(); inside = 1; next }
         /^=+$/ || /^Summary of Failures:/ { done(); inside = 0; next }
         !inside { next }
         /^test: / { name = $0; next }
         /^result: / { res = $0; bad = ($0 !~ /exit status 0$/); next }
         /^(command|start time): / { next }
         { buf[n++] = $0 }
         END { done() }' "$1"
}
trap 'rm -f "$summary"; servers_stop' EXIT

echo "== stage 1: ASan+UBSan build, unit and integration tests"
meson test -C "$build" --print-errorlogs --num-processes "${TEST_JOBS:-3}" "$@" | tee "$summary"
failed_before=$failed
count
stage1_failed=$((failed - failed_before))

if [ $# -eq 0 ]; then
    echo "== stage 2: valgrind memcheck (unit tests, flow and sigterm)"
    if [ ! -f build-vg/build.ninja ]; then
        meson setup build-vg -Dtest_hooks=true >/dev/null || exit 1
    fi
    ninja -C build-vg >/dev/null || exit 1
    (unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
     meson test -C build-vg --setup valgrind --print-errorlogs --suite unit_c) | tee "$summary"
    count
    vg="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
    vg="$vg --show-leak-kinds=definite --suppressions=$src/test/valgrind.supp"
    (unset ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
     RELAY_WRAPPER=$vg meson test -C build-vg --print-errorlogs --num-processes 1 flow sigterm) | tee "$summary"
    count

    echo "== stage 3: cppcheck"
    if cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability --std=c11 \
        --inline-suppr -I lib lib cmd test/tools fuzz; then
        echo "cppcheck: ok"
        passed=$((passed + 1))
    else
        echo "cppcheck: FAILED"
        failed=$((failed + 1))
    fi

    echo "== stage 3b: the mutants still apply (scripts/mutants.sh --check; the suite itself: scripts/mutants.sh)"
    if bash scripts/mutants.sh --check; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi

    echo "== stage 4: fuzzing (regression seeds + ${FUZZ_SECONDS:-10} s per target)"
    fuzz_out=$(bash scripts/fuzz.sh "${FUZZ_SECONDS:-10}" 2>&1)
    echo "$fuzz_out"
    passed=$((passed + $(grep -c ': ok' <<<"$fuzz_out" || true)))
    failed=$((failed + $(grep -c 'FAILED\|crashes' <<<"$fuzz_out" || true)))
    [ "$(grep -c ': ok' <<<"$fuzz_out" || true)" = 2 ] || failed=$((failed + 1))
fi

if [ $# -eq 0 ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
    echo "== stage 5: benchmark, smoke mode (figures printed, not asserted)"
    if bash bench/bench.sh --smoke 2>&1 | tee /tmp/outbox-bench-quick.$$ | grep -E '^(RESULT|RELAYS|CEILING|LATENCY|commit)|bench\]'; then
        grep -q '^RESULT ' /tmp/outbox-bench-quick.$$ && passed=$((passed + 1)) || failed=$((failed + 1))
    else
        echo "benchmark: FAILED"; tail -20 /tmp/outbox-bench-quick.$$
        failed=$((failed + 1))
    fi
    rm -f /tmp/outbox-bench-quick.$$
fi

# (stage 1's log is still there: stages 2-5 run no test in $build)
if [ "$stage1_failed" -gt 0 ]; then
    echo "== stage 1's failures again (the whole logs are above)"
    recap "$build/meson-logs/testlog.txt"
fi
rm -f "$summary"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
