#!/usr/bin/env bash
# The layers of lib/ (docs/HACKING.md, Layout), each a library of its own in meson.build:
#   core  <-  pg  <-  sink, source  <-  relay, inbox  <-  admin
# A file may include headers of its own layer and of the layers below it, never of a layer
# above or beside it (relay and inbox, sink and source, know nothing of each other). Every
# directory under lib/ must be a known layer, and docs/HACKING.md's layout must name every
# .c file of lib/. TAP, one line per file and check.
#   layers.sh SOURCE_ROOT
set -uo pipefail
root=$1
declare -A level=([core]=0 [pg]=1 [sink]=2 [source]=2 [relay]=3 [inbox]=3 [admin]=4)
n=0 failed=0
for dir in "$root"/lib/*/; do
    layer=$(basename "$dir")
    if [ -z "${level[$layer]:-}" ]; then
        n=$((n + 1))
        echo "not ok $n - lib/$layer is not a layer this test knows (add it to test/layers.sh and docs/HACKING.md)"
        failed=1
        continue
    fi
    while IFS= read -r f; do # (files in sub-folders of a layer too)
        n=$((n + 1))
        bad=""
        while IFS= read -r inc; do
            # <...> names a system header unless its first folder is one of lib/'s layers
            if [ "${inc#<}" != "$inc" ]; then
                inc=${inc#<}
                [ -n "${level[${inc%%/*}]:-}" ] || continue
            fi
            to=${inc%%/*}
            [ "$to" = "$layer" ] && continue
            if [ -z "${level[$to]:-}" ] || [ "${level[$to]}" -ge "${level[$layer]}" ]; then
                bad="$bad $inc"
            fi
        done < <(sed -n -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' \
                        -e 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*\(<[^>]*\)>.*/\1/p' "$f")
        if [ -z "$bad" ]; then
            echo "ok $n - ${f#"$root"/}"
        else
            echo "not ok $n - ${f#"$root"/} includes a layer above or beside $layer:$bad"
            failed=1
        fi
    done < <(find "$dir" -name '*.[ch]' | sort)
done
# docs/HACKING.md's layout names every source file of lib/ (a file added or renamed shows up)
while IFS= read -r f; do
    n=$((n + 1))
    rel=${f#"$root"/lib/}
    if grep -qE "(^|[[:space:]/])$(basename "$f" | sed 's/\./\\./g')([[:space:]]|,|$)" "$root/docs/HACKING.md"; then
        echo "ok $n - docs/HACKING.md's layout names lib/$rel"
    else
        echo "not ok $n - docs/HACKING.md's layout does not name lib/$rel"
        failed=1
    fi
done < <(find "$root/lib" -name '*.c' | sort)
echo "1..$n"
exit "$failed"
