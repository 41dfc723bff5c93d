#!/usr/bin/env bash
# The README's configuration table must be exactly what `outbox-relay --help-markdown` prints.
set -euo pipefail
relay=$1 readme=$2
want=$("$relay" --help-markdown)
got=$(sed -n '/<!-- config-table/,/<!-- \/config-table -->/p' "$readme" | sed '1d;$d')
if [ "$want" != "$got" ]; then
    echo "not ok 1 - README configuration table differs from --help-markdown:"
    diff <(echo "$want") <(echo "$got") | sed 's/^/# /'
    echo "1..1"
    exit 1
fi
echo "ok 1 - README configuration table matches --help-markdown"
echo "1..1"
