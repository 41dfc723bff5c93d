#!/usr/bin/env bash
# The alert rules are valid (promtool check rules) and fire as intended (promtool test rules).
set -euo pipefail
dir=$1
if promtool check rules "$dir/alerts.yml" >/dev/null; then echo "ok 1 - promtool check rules"; else echo "not ok 1 - promtool check rules"; fail=1; fi
if (cd "$dir" && promtool test rules alerts_test.yml) >/tmp/promtool-test.$$ 2>&1; then
    echo "ok 2 - promtool test rules"
else
    echo "not ok 2 - promtool test rules"; sed 's/^/# /' /tmp/promtool-test.$$; fail=1
fi
rm -f /tmp/promtool-test.$$
echo "1..2"
exit ${fail:-0}
