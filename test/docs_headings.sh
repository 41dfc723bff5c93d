#!/usr/bin/env bash
# The README is the front door and the rest lives in docs/: no section of the README as it
# was before the split (test/docs-headings.txt, one heading per line) may be lost — each
# must still be a heading, at any level, in README.md or a file under docs/ — and the
# README's contents must link every file under docs/; the README stays at most 200 lines,
# none over 200 characters.
#   docs_headings.sh SOURCE_ROOT
set -uo pipefail
root=$1
n=0 failed=0
headings() { # the Markdown headings of the files, outside code fences, without their #s
    awk '/^```/ { fence = !fence } !fence && /^#+ / { sub(/^#+ /, ""); print }' "$@"
}
all=$(headings "$root/README.md" "$root"/docs/*.md)
while IFS= read -r h; do
    [ -n "$h" ] || continue
    n=$((n + 1))
    if grep -qxF -- "$h" <<<"$all"; then
        echo "ok $n - heading kept: $h"
    else
        echo "not ok $n - heading lost: $h"
        failed=1
    fi
done <"$root/test/docs-headings.txt"
for f in "$root"/docs/*.md; do
    n=$((n + 1))
    if grep -qF "](docs/$(basename "$f"))" "$root/README.md"; then
        echo "ok $n - the README links docs/$(basename "$f")"
    else
        echo "not ok $n - the README does not link docs/$(basename "$f")"
        failed=1
    fi
done
# links inside docs/ are relative to docs/ (text moved from the README keeps none of its own)
n=$((n + 1))
bad=$(grep -l '](docs/' "$root"/docs/*.md 2>/dev/null | tr '\n' ' ')
if [ -z "$bad" ]; then echo "ok $n - no link inside docs/ starts with docs/"
else echo "not ok $n - links inside docs/ that start with docs/ (they point at docs/docs/): $bad"; failed=1; fi
# the front door stays one: at most 200 lines, none over 200 characters (awk counts bytes:
# stricter than characters)
n=$((n + 1))
lines=$(wc -l <"$root/README.md")
if [ "$lines" -le 200 ]; then echo "ok $n - the README has $lines lines (at most 200)"
else echo "not ok $n - the README has $lines lines, more than 200: move detail to docs/"; failed=1; fi
n=$((n + 1))
long=$(awk 'length($0) > 200 { printf "%s%d", sep, NR; sep = "," }' "$root/README.md")
if [ -z "$long" ]; then echo "ok $n - no README line over 200 characters"
else echo "not ok $n - README lines over 200 characters: $long"; failed=1; fi
echo "1..$n"
exit $failed
