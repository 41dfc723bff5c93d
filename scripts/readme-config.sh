#!/usr/bin/env bash
# Rewrites the README's configuration table from `outbox-relay --help-markdown`.
#   scripts/readme-config.sh [path/to/outbox-relay]
set -euo pipefail
cd "$(dirname "$0")/.."
relay=${1:-build/outbox-relay}
table=$("$relay" --help-markdown)
awk -v table="$table" '
    /<!-- config-table/ { print; print table; skip = 1; next }
    /<!-- \/config-table -->/ { skip = 0 }
    !skip { print }
' README.md >README.md.new
mv README.md.new README.md
