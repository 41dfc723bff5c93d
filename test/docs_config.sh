#!/usr/bin/env bash
# The configuration tables (docs/CONFIGURATION.md, docs/INBOX.md) must be exactly what
# `outbox-relay --help-markdown` (and outbox-inbox's) prints.
set -euo pipefail
# docs_config.sh BINARY FILE [MARKER]: the table between <!-- MARKER --> and
# <!-- /MARKER --> (default config-table) must be what BINARY --help-markdown prints.
relay=$1 readme=$2 marker=${3:-config-table}
want=$("$relay" --help-markdown)
got=$(sed -n "/<!-- $marker/,/<!-- \/$marker -->/p" "$readme" | sed '1d;$d')
if [ "$want" != "$got" ]; then
    echo "not ok 1 - $(basename "$readme") table $marker differs from --help-markdown:"
    diff <(echo "$want") <(echo "$got") | sed 's/^/# /'
    echo "1..1"
    exit 1
fi
echo "ok 1 - $(basename "$readme") table $marker matches --help-markdown"
echo "1..1"
