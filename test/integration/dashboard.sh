#!/usr/bin/env bash
# The Grafana dashboard and the alert rules cannot rot: every metric their PromQL names
# (outbox_* and inbox_*) is exported by a running outbox-relay or outbox-inbox — read from
# the # TYPE lines of their live /metrics, since labelled series appear only after their
# first event — and every dashboard expression parses (promtool, as recording rules).
. "$(dirname "$0")/lib.sh"
dash=$RELAYTEST_SRC/deploy/grafana/outbox-relay.json
alerts=$RELAYTEST_SRC/deploy/prometheus/alerts.yml
jq -e '.panels | length > 0' "$dash" >/dev/null || fail "$dash is not a dashboard with panels"
[ "$(jq '[.panels[].id] | length' "$dash")" = "$(jq '[.panels[].id] | unique | length' "$dash")" ] ||
    fail "panel ids are not unique"

setup_db
start_relay main >/dev/null
setup_inbox_db
start_inbox consumer
# (both serve the snapshot their loop refreshes every 0.5 s: the first may still be empty)
scraped() { curl -sf "http://127.0.0.1:$(http_port "$1")/metrics" -o "$WORK/$1.metrics" && grep -q "^# TYPE $2" "$WORK/$1.metrics"; }
wait_until 20 "the relay's /metrics" scraped main outbox_
wait_until 20 "the inbox's /metrics" scraped consumer inbox_
# exported names; a histogram NAME also exports NAME_bucket, NAME_sum, NAME_count
cat "$WORK/main.metrics" "$WORK/consumer.metrics" | awk '/^# TYPE / {
    print $3; if ($4 == "histogram") { print $3 "_bucket"; print $3 "_sum"; print $3 "_count" } }' |
    sort -u >"$WORK/exported.txt"
log "$(wc -l <"$WORK/exported.txt") names exported by a running relay and inbox"

# every expression: the dashboard's targets and variable queries, the alert rules' expr
jq -r '.. | objects | select(has("expr")) | .expr' "$dash" >"$WORK/dash.exprs"
jq -r '.templating.list[] | select(.type == "query") | .definition' "$dash" >>"$WORK/dash.exprs"
sed -n 's/^ *expr: //p' "$alerts" >"$WORK/alert.exprs"
[ "$(wc -l <"$WORK/dash.exprs")" -ge 20 ] || fail "only $(wc -l <"$WORK/dash.exprs") dashboard expressions found"
[ "$(wc -l <"$WORK/alert.exprs")" = "$(grep -c '^ *- alert:' "$alerts")" ] ||
    fail "not one single-line expr per alert rule (the check reads them line by line)"
missing=0 names=0
while IFS=$'\t' read -r src expr; do
    # (Grafana's $variables are not metrics)
    for m in $(sed 's/\$[a-z_]*//g' <<<"$expr" | grep -oE '\b(outbox|inbox)_[a-z0-9_]+' | sort -u); do
        names=$((names + 1))
        if ! grep -qx "$m" "$WORK/exported.txt"; then
            log "$src names $m, which no running relay or inbox exports: $expr"
            missing=$((missing + 1))
        fi
    done
done < <(sed 's/^/dashboard\t/' "$WORK/dash.exprs"; sed 's/^/alerts.yml\t/' "$WORK/alert.exprs")
[ "$missing" = 0 ] || fail "$missing metric names in the dashboard or the alerts are not exported"
log "$(wc -l <"$WORK/dash.exprs") dashboard and $(wc -l <"$WORK/alert.exprs") alert expressions name $names metrics, all exported"

# the dashboard's PromQL parses: Grafana's variables replaced, each as a recording rule
{
    echo "groups:"
    echo "  - name: dashboard"
    echo "    rules:"
    n=0
    grep -v '^label_values(' "$WORK/dash.exprs" | sed 's/\$__rate_interval/5m/g; s/\$inbox_instance/.*/g; s/\$instance/.*/g' |
        while IFS= read -r e; do
            n=$((n + 1))
            printf '      - record: dashboard:expr%d\n        expr: %s\n' "$n" "$(jq -Rn --arg e "$e" '$e')"
        done
} >"$WORK/dash-rules.yml"
promtool check rules "$WORK/dash-rules.yml" >"$WORK/promtool.out" 2>&1 ||
    { cat "$WORK/promtool.out"; fail "promtool rejects an expression of the dashboard"; }
log "ok"
