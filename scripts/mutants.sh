#!/usr/bin/env bash
# The mutant suite: every deliberate breakage that once made a check fail is kept as a patch
# under test/mutants/ (a header names the tests that must catch it and the text their failure
# must show). This applies each patch in turn to a scratch copy of the tree, builds, runs
# each of those tests against throwaway servers, and expects every one to fail with that
# text; then takes the patch back out. A check that stops failing on its mutant no longer
# bites. (A header's `test:` may name several tests, space-separated: the variants of one
# scenario - keep mode, RabbitMQ - that must each catch the same breakage.)
#   scripts/mutants.sh                 every mutant (about 70 minutes here, alone on 2 cores)
#   scripts/mutants.sh PATTERN...      the mutants whose file name contains a PATTERN
# Prints one line per mutant (caught / MISSED / BROKEN) and "N caught, N missed, N broken";
# exits non-zero unless every mutant was caught.
#   scripts/mutants.sh --check         no build, no test: every patch still applies to the tree
#                                      and names a test, an expected text and a reason (seconds;
#                                      run in CI, so that a mutant that no longer applies is seen)
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

if [ "${1:-}" = --check ]; then
    bad=0 n=0
    for patch in test/mutants/*.patch; do
        n=$((n + 1))
        name=$(basename "$patch" .patch)
        test_names=$(sed -n 's/^test: //p' "$patch" | head -1)
        unknown=
        for test_name in $test_names; do
            # a variant (NAME_keep, NAME_rabbitmq_delete, ...) is made in test/meson.build from
            # its scenario's name and a list of variants: the scenario's name must be there
            base=${test_name%_pg17}
            for v in _delete _keep _debezium _image _strict _rabbitmq _exactly_once; do base=${base%$v}; done
            grep -q "'$base'\|'$test_name'" test/meson.build || unknown="$unknown $test_name"
        done
        if [ -z "$test_names" ] || [ -z "$(sed -n 's/^expect: //p' "$patch")" ] || [ -z "$(sed -n 's/^why: //p' "$patch")" ]; then
            echo "BROKEN  $name: its header lacks test:, expect: or why:"; bad=$((bad + 1))
        elif [ -n "$unknown" ]; then
            echo "BROKEN  $name: test$unknown not in test/meson.build"; bad=$((bad + 1))
        elif ! patch -p1 --dry-run --quiet --forward <"$patch" >/dev/null 2>&1; then
            echo "BROKEN  $name: the patch no longer applies"; bad=$((bad + 1))
        fi
    done
    echo "mutants: $n patches, $bad broken"
    [ "$bad" -eq 0 ]
    exit
fi

bash scripts/deps.sh || exit 1
bash test/env/kafka.sh fetch || exit 1

scratch=$(mktemp -d /tmp/outbox-mutants.XXXXXX)
chmod 755 "$scratch"
# the tree as it is now, tracked and new files alike, without build folders
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$scratch" 2>/dev/null
# and its history (migrate_online builds the previous schema version's relay from git)
# (and an index of it: the image tests name their image by a hash of the tracked files)
git clone -q --no-checkout "$src" "$scratch/.history" && mv "$scratch/.history/.git" "$scratch/.git" &&
    rmdir "$scratch/.history" && git -C "$scratch" reset -q || exit 1
cd "$scratch" || exit 1
meson setup build -Dtest_hooks=true -Db_sanitize=address,undefined -Db_lundef=false >/dev/null || exit 1
ninja -C build >/dev/null || exit 1

. scripts/servers.sh
cleanup() { servers_stop; cd /; rm -rf "$scratch"; }
trap cleanup EXIT
servers_start || exit 1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$scratch/test/lsan.supp:print_suppressions=0 RELAYTEST_SRC=$scratch
export OUTBOX_PY_VENV=$src/.work/venv # the tests' Python tools (scripts/deps.sh), not copied

caught=0 missed=0 broken=0
# the patches of the copy: editing test/mutants/ while a run goes on changes nothing in it
for patch in "$scratch"/test/mutants/*.patch; do
    name=$(basename "$patch" .patch)
    if [ $# -gt 0 ]; then
        wanted=0
        for p in "$@"; do [[ $name == *"$p"* ]] && wanted=1; done
        [ $wanted = 1 ] || continue
    fi
    test_names=$(sed -n 's/^test: //p' "$patch" | head -1)
    expect=$(sed -n 's/^expect: //p' "$patch" | head -1)
    if ! patch -p1 --quiet --forward <"$patch" >/dev/null; then
        echo "BROKEN  $name: the patch no longer applies"
        broken=$((broken + 1))
        continue
    fi
    if ! ninja -C build >"build/mutant-build.log" 2>&1; then
        echo "BROKEN  $name: does not build"
        tail -5 build/mutant-build.log | sed 's/^/        /'
        broken=$((broken + 1))
    else
        all=1
        for test_name in $test_names; do # every test named must catch it
            start=$SECONDS
            if meson test -C build --num-processes 1 --print-errorlogs "$test_name" >"build/mutant-test.log" 2>&1; then
                echo "MISSED  $name: $test_name passed ($((SECONDS - start)) s)"
                all=0
            elif grep -Eq -- "$expect" build/meson-logs/testlog.txt; then
                echo "caught  $name: $test_name failed with: $(grep -Eo -m1 -- ".{0,40}($expect).{0,40}" build/meson-logs/testlog.txt | head -1) ($((SECONDS - start)) s)"
            else
                echo "MISSED  $name: $test_name failed, but not with /$expect/:"
                grep -m3 'FAIL' build/meson-logs/testlog.txt | sed 's/^/        /'
                all=0
            fi
        done
        if [ "$all" = 1 ]; then caught=$((caught + 1)); else missed=$((missed + 1)); fi
    fi
    patch -p1 --quiet --reverse <"$patch" >/dev/null || { echo "cannot take $name back out"; exit 1; }
done
ninja -C build >/dev/null 2>&1
echo "$caught caught, $missed missed, $broken broken"
[ "$missed" -eq 0 ] && [ "$broken" -eq 0 ]
