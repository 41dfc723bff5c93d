#!/usr/bin/env bash
# deploy/systemd's units are valid (TAP): `systemd-analyze verify` says nothing about them
# (it warns, exit 0, on an unknown directive: any output fails), their hardening keeps
# `systemd-analyze security` at "OK" (exposure <= 2.0 of 10), and every setting they pass
# is one the program knows.
#   test/systemd.sh RELAY_BIN INBOX_BIN
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/outbox-systemd.XXXXXX)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -z "${2:-}" ] || sed 's/^/# /' <<<"$2"; }
for pair in "outbox-relay:$1" "outbox-inbox:$2"; do
    prog=${pair%%:*} bin=$(cd "$(dirname "${pair#*:}")" && pwd)/$(basename "${pair#*:}")
    unit=$work/$prog.service
    # the unit as installed, but running this build's binary
    sed "s|/usr/local/bin/$prog\$|$bin|" "$src/deploy/systemd/$prog.service" >"$unit"
    out=$(cd "$work" && systemd-analyze verify "$unit" 2>&1)
    rc=$?
    if [ $rc = 0 ] && [ -z "$out" ]; then ok "$prog.service: systemd-analyze verify"; else not_ok "$prog.service: systemd-analyze verify (exit $rc)" "$out"; fi
    out=$(systemd-analyze security --offline=yes "$unit" 2>&1)
    level=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' <<<"$out")
    if [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }'; then
        ok "$prog.service: exposure $level (systemd-analyze security)"
    else
        not_ok "$prog.service: exposure '${level:-?}' above 2.0" "$(tail -5 <<<"$out")"
    fi
    known=$("$bin" --help-markdown | awk -F'|' '/^\| [A-Z_]+ / { gsub(/ /, "", $2); print $2 }')
    bad=""
    for name in $(sed -n 's/^Environment=\([A-Z_]*\)=.*/\1/p' "$unit"); do
        grep -qx "${name%_FILE}" <<<"$known" || bad+="$name "
    done
    if [ -z "$bad" ]; then ok "$prog.service: its settings are $prog's"; else not_ok "$prog.service: unknown settings: $bad"; fi
done
echo "1..$n"
[ "$failed" = 0 ]
