#!/usr/bin/env bash
# No circles between lib/'s files: drawn from the built libraries' own symbols (nm), file A
# depends on file B when A uses a function or object B defines. Every file must reach the
# others one way only (as the layers do, test/layers.sh, one level down): two files that
# call each other, directly or round a longer ring, are one concern split wrongly or two
# concerns calling back and forth (issue: "each loop concern owns its state"). Prints each
# ring it finds. TAP.
#   circles.sh LIBRARY.a...
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: circles.sh LIBRARY.a..." >&2; exit 2; }
n_files=0
edges=$(
    for lib in "$@"; do
        nm -A "$lib" 2>/dev/null || { echo "circles.sh: nm failed on $lib" >&2; exit 2; }
    done | awk '
        {
            # "lib.a:path/lib_relay_keep.c.o:0000 T keep_check_send" or "...o:  U name"
            split($1, p, ":"); f = p[2]; sub(/.*\//, "", f); sub(/\.c\.o$/, "", f); sub(/^lib_/, "", f)
            if (NF == 3 && $2 ~ /^[TDBRC]$/) def[$3] = f
            else if (NF == 3 && $2 == "U") { n++; uf[n] = f; us[n] = $3 }
        }
        END {
            for (i = 1; i <= n; i++)
                if ((us[i] in def) && def[us[i]] != uf[i]) print uf[i], def[us[i]]
        }' | sort -u
) || exit 2
[ -n "$edges" ] || { echo "not ok 1 - no dependencies between files found (nm gave nothing?)"; exit 1; }
n_files=$(printf '%s\n' "$edges" | tr ' ' '\n' | sort -u | wc -l)
rings=$(printf '%s\n' "$edges" | awk '
    { out[$1] = out[$1] " " $2; node[$1]; node[$2] }
    function reach(from,    queue, head, tail, v, k, w, seen, ws) {
        delete seen; head = 1; tail = 1; queue[1] = from
        while (head <= tail) {
            v = queue[head++]; k = split(out[v], ws, " ")
            for (w = 1; w <= k; w++) if (!(ws[w] in seen)) { seen[ws[w]]; queue[++tail] = ws[w] }
        }
        for (v in seen) r[from, v] = 1
    }
    END {
        for (a in node) reach(a)
        for (a in node) {
            if (a in done) continue
            ring = ""
            for (b in node) if (a != b && r[a, b] && r[b, a]) { ring = ring " " b; done[b] }
            if (ring != "") print a ring
        }
    }')
if [ -n "$rings" ]; then
    i=0
    while IFS= read -r ring; do
        i=$((i + 1))
        echo "not ok $i - files that depend on each other: $ring (see which calls which: nm -A the libraries)"
    done <<<"$rings"
    echo "1..$i"
    exit 1
fi
echo "ok 1 - no circles among $n_files files of lib/"
echo "1..1"
