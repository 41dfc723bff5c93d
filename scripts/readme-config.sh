#!/usr/bin/env bash
# Rewrites the generated configuration tables: docs/CONFIGURATION.md's from
# `outbox-relay --help-markdown`, docs/INBOX.md's from `outbox-inbox --help-markdown`
# (test/docs_config.sh checks both).
#   scripts/readme-config.sh [BUILD_DIR]    (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# table FILE MARKER PROGRAM: the lines between <!-- MARKER ...--> and <!-- /MARKER --> anew
table() {
    local file=$1 marker=$2 text
    text=$("$3" --help-markdown)
    awk -v table="$text" -v op="<!-- $marker" -v cl="<!-- /$marker -->" '
        index($0, op) == 1 { print; print table; skip = 1; next }
        index($0, cl) == 1 { skip = 0 }
        !skip { print }
    ' "$file" >"$file.new"
    mv "$file.new" "$file"
}
table docs/CONFIGURATION.md config-table "$build/outbox-relay"
table docs/INBOX.md inbox-config-table "$build/outbox-inbox"
