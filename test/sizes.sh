#!/usr/bin/env bash
# Sizes in lib/: no .c file over 600 lines, no function over 80 (signature to closing brace).
# A check, not the goal (issue: split by concern, not by line count): a file or a function
# past them is read as one that holds more than one concern. Functions are found in the
# house style (docs/HACKING.md): a signature starting at column 0, its body's braces alone
# at column 0. TAP.
#   sizes.sh SOURCE_ROOT
set -uo pipefail
root=$1
max_file=600 max_function=80
n=0 failed=0 files=0 functions=0
for f in "$root"/lib/*/*.c; do
    rel=${f#"$root"/}
    files=$((files + 1))
    lines=$(wc -l <"$f")
    if [ "$lines" -gt "$max_file" ]; then
        n=$((n + 1)); failed=1
        echo "not ok $n - $rel has $lines lines, more than $max_file"
    fi
    while read -r len name start; do
        functions=$((functions + 1))
        if [ "$len" -gt "$max_function" ]; then
            n=$((n + 1)); failed=1
            echo "not ok $n - $rel:$start: $name has $len lines, more than $max_function"
        fi
    done < <(awk '
        /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ && !/^(if|for|while|switch|return)\b/ { sig = NR; name = $0 }
        /^\{/ { open = sig }
        /^\}/ && open { n = $0; sub(/\(.*/, "", name); k = split(name, w, /[ *]+/); print NR - open + 1, w[k], open; open = 0 }
    ' "$f")
done
if [ "$functions" -lt 100 ]; then # the reader found the functions, or the check means nothing
    n=$((n + 1)); failed=1
    echo "not ok $n - only $functions functions found in $files files: the reader no longer matches the code's style"
fi
n=$((n + 1))
echo "ok $n - $files files and $functions functions measured"
echo "1..$n"
exit "$failed"
