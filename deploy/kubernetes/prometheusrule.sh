#!/bin/sh
# Writes deploy/kubernetes/prometheusrule.yaml from deploy/prometheus/alerts.yml (the one
# source of the alert rules); with --check, fails if the committed file differs.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
generate() {
    cat <<'HEAD'
# GENERATED from deploy/prometheus/alerts.yml by deploy/kubernetes/prometheusrule.sh; edit
# that file, then run this script. prometheus-operator loads these rules into Prometheus.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: outbox-relay
  labels: {app: orders}
spec:
HEAD
    grep -v '^#' "$dir/../prometheus/alerts.yml" | sed 's/^/  /; s/^  $//'
}
if [ "${1:-}" = --check ]; then
    generate | cmp -s - "$dir/prometheusrule.yaml" ||
        { echo "deploy/kubernetes/prometheusrule.yaml is not generated from alerts.yml: run $0" >&2; exit 1; }
else
    generate >"$dir/prometheusrule.yaml"
fi
