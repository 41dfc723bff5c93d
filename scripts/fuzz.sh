#!/usr/bin/env bash
# Fuzz smoke run: builds the libFuzzer targets with clang (ASan+UBSan), replays every
# regression seed, then fuzzes each target for SECONDS (default 30) from its corpus.
# Exits non-zero on any crash; new crashes are saved in fuzz/artifacts/ — add them to
# fuzz/regressions/<target>/ once fixed.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" -Dfuzzing=true -Db_sanitize=address,undefined -Db_lundef=false \
        --buildtype=debugoptimized >/dev/null
fi
ninja -C "$build" fuzz_config fuzz_message >/dev/null
mkdir -p fuzz/artifacts
rc=0
for target in config message; do
    exe=$build/fuzz_$target
    if [ -d "fuzz/regressions/$target" ] && ls "fuzz/regressions/$target"/* >/dev/null 2>&1; then
        "$exe" "fuzz/regressions/$target"/* >/dev/null 2>&1 || { echo "fuzz $target: a regression seed crashes"; rc=1; }
    fi
    work=$(mktemp -d)
    if "$exe" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix=fuzz/artifacts/ \
        "$work" "fuzz/corpus/$target" >"$work.log" 2>&1; then
        echo "fuzz $target: ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$') runs in ${secs}s, corpus $(ls "$work" | wc -l) new units"
    else
        echo "fuzz $target: FAILED"
        grep -E "ERROR|SUMMARY|artifact" "$work.log" | head -10
        rc=1
    fi
    rm -rf "$work" "$work.log"
done
exit $rc
