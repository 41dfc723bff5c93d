#!/usr/bin/env bash
# The layers of lib/ (docs/HACKING.md, Layout), each a library of its own in meson.build:
#   core  <-  pg  <-  sink, source  <-  relay, inbox  <-  admin
# A file may include headers of its own layer and of the layers below it, never of a layer
# above or beside it (relay and inbox, sink and source, know nothing of each other). Every
# directory under lib/ must be a known layer. TAP, one line per file.
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
    for f in "$dir"*.[ch]; do
        n=$((n + 1))
        bad=""
        while IFS= read -r inc; do
            to=${inc%%/*}
            [ "$to" = "$layer" ] && continue
            if [ -z "${level[$to]:-}" ] || [ "${level[$to]}" -ge "${level[$layer]}" ]; then
                bad="$bad $inc"
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
        if [ -z "$bad" ]; then
            echo "ok $n - lib/$layer/$(basename "$f")"
        else
            echo "not ok $n - lib/$layer/$(basename "$f") includes a layer above or beside $layer:$bad"
            failed=1
        fi
    done
done
echo "1..$n"
exit "$failed"
