#!/usr/bin/env bash
# The deployment files are true (TAP):
#  - the Kubernetes manifests validate against the Kubernetes schemas (kubernetes-validate,
#    strict: no unknown field), the native sidecar against 1.29 (its first release) and the
#    newest, the legacy form also against 1.27; every container runs restricted (non-root,
#    read-only root, no privilege escalation, no capabilities, RuntimeDefault seccomp), the
#    sidecar is an init container with restartPolicy Always after migrate, with probes on
#    /healthz and /readyz;
#  - the custom resources (not in those schemas): prometheusrule.yaml is generated from
#    deploy/prometheus/alerts.yml and its rules pass promtool; the PodMonitor uses only
#    fields of prometheus-operator's monitoring.coreos.com/v1 API and names the sidecar's port;
#  - the NetworkPolicy opens the port the relay listens on;
#  - compose.yaml: every service of this project's image is the built image of
#    deploy/Containerfile, runs a program that is in it with a command that program has,
#    with settings it knows; depends_on and secrets resolve;
#  - the version is meson.build's everywhere: --version, every image reference.
#   test/deploy.sh RELAY_BIN INBOX_BIN
set -uo pipefail
relay_bin=$1 inbox_bin=$2
src=$(cd "$(dirname "$0")/.." && pwd)
venv=${OUTBOX_PY_VENV:-$src/.work/venv}
k8s=$src/deploy/kubernetes
work=$(mktemp -d /tmp/outbox-deploy.XXXXXX)
trap 'rm -rf "$work"' EXIT
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -z "${2:-}" ] || sed 's/^/# /' <<<"$2"; }
# check DESCRIPTION COMMAND...: one TAP line, the command's output shown on failure
check() { local what=$1 out; shift; if out=$("$@" 2>&1); then ok "$what"; else not_ok "$what" "$out"; fi; }
yaml2json() { "$venv/bin/python3" -c 'import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))' "$1"; }
[ -x "$venv/bin/kubernetes-validate" ] || { echo "Bail out! no $venv/bin/kubernetes-validate (scripts/deps.sh installs it)"; exit 1; }
version=$(sed -n "s/^  version : '\(.*\)',$/\1/p" "$src/meson.build")

for v in 1.29.0 1.37.0; do
    for f in sidecar.yaml sidecar-legacy.yaml networkpolicy.yaml; do
        check "$f validates against Kubernetes $v (strict)" "$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "$k8s/$f"
    done
done
check "sidecar-legacy.yaml validates against Kubernetes 1.27.0 (strict)" \
    "$venv/bin/kubernetes-validate" --strict --quiet -k 1.27.0 "$k8s/sidecar-legacy.yaml"
if "$venv/bin/kubernetes-validate" --strict --quiet -k 1.27.0 "$k8s/sidecar.yaml" >/dev/null 2>&1; then
    not_ok "the schemas cannot tell a native sidecar from a plain init container (1.27 accepted restartPolicy)"
else
    ok "sidecar.yaml is a native sidecar: 1.27's schema rejects it (alpha in 1.28, on by default from 1.29)"
fi

for f in sidecar.yaml sidecar-legacy.yaml; do
    yaml2json "$k8s/$f" | jq '.[0]' >"$work/$f.json"
    check "$f: pod non-root as 10001, RuntimeDefault seccomp, no service account token" jq -e '.spec.template.spec |
        .securityContext.runAsNonRoot == true and .securityContext.runAsUser == 10001 and
        .securityContext.seccompProfile.type == "RuntimeDefault" and .automountServiceAccountToken == false' "$work/$f.json"
    check "$f: every container read-only root, no privilege escalation, capabilities dropped" jq -e '
        [.spec.template.spec | (.initContainers // [])[], .containers[] | .securityContext |
         .readOnlyRootFilesystem == true and .allowPrivilegeEscalation == false and .capabilities.drop == ["ALL"]] | all' "$work/$f.json"
    check "$f: the relay's image is outbox-relay:$version, migrate runs first" jq -e --arg img "outbox-relay:$version" '
        .spec.template.spec | .initContainers[0].name == "outbox-migrate" and .initContainers[0].args == ["migrate"] and
        ([(.initContainers // [])[], .containers[] | select(.name | startswith("outbox")) | .image == $img] | all)' "$work/$f.json"
    check "$f: the relay has liveness on /healthz, readiness on /readyz, memory limit" jq -e '
        [.spec.template.spec | (.initContainers // [])[], .containers[] | select(.name == "outbox-relay")] | length == 1 and
        (.[0] | .livenessProbe.httpGet.path == "/healthz" and .readinessProbe.httpGet.path == "/readyz" and
         (.resources.limits.memory | length > 0) and .ports[0].name == "outbox-metrics")' "$work/$f.json"
done
check "sidecar.yaml: the relay is a native sidecar (init container, restartPolicy Always) after migrate" jq -e '
    .spec.template.spec.initContainers | .[1].name == "outbox-relay" and .[1].restartPolicy == "Always"' "$work/sidecar.yaml.json"
check "sidecar-legacy.yaml: the relay is an ordinary container" jq -e '
    [.spec.template.spec.containers[].name] | index("outbox-relay") != null' "$work/sidecar-legacy.yaml.json"

check "prometheusrule.yaml is generated from deploy/prometheus/alerts.yml" sh "$k8s/prometheusrule.sh" --check
yaml2json "$k8s/prometheusrule.yaml" | jq '.[0].spec' >"$work/rules.json"
check "prometheusrule.yaml: its rules pass promtool check rules" promtool check rules "$work/rules.json"
check "prometheusrule.yaml: monitoring.coreos.com/v1 PrometheusRule, only documented fields" jq -e '
    .[0] | .apiVersion == "monitoring.coreos.com/v1" and .kind == "PrometheusRule" and (.spec | keys == ["groups"]) and
    ([.spec.groups[] | keys - ["name", "interval", "rules", "limit", "partial_response_strategy"] | length == 0] | all) and
    ([.spec.groups[].rules[] | keys - ["alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"] | length == 0] | all)' \
    < <(yaml2json "$k8s/prometheusrule.yaml")
yaml2json "$k8s/podmonitor.yaml" | jq '.[0]' >"$work/podmonitor.json"
check "podmonitor.yaml: monitoring.coreos.com/v1 PodMonitor, only documented fields" jq -e '
    .apiVersion == "monitoring.coreos.com/v1" and .kind == "PodMonitor" and
    (.spec | keys - ["jobLabel", "podTargetLabels", "podMetricsEndpoints", "selector", "namespaceSelector", "sampleLimit",
        "targetLimit", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit", "attachMetadata"] | length == 0) and
    ([.spec.podMetricsEndpoints[] | keys - ["port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
        "honorLabels", "honorTimestamps", "metricRelabelings", "relabelings", "proxyUrl", "enableHttp2", "filterRunning",
        "followRedirects", "tlsConfig", "bearerTokenSecret", "basicAuth", "oauth2", "authorization"] | length == 0] | all) and
    ([.spec.podMetricsEndpoints[].relabelings // [] | .[] | keys - ["sourceLabels", "separator", "targetLabel", "regex",
        "modulus", "replacement", "action"] | length == 0] | all)' "$work/podmonitor.json"
check "podmonitor.yaml: scrapes the sidecar's named port in the Deployment's pods, as job outbox-relay" jq -e --slurpfile d "$work/sidecar.yaml.json" '
    .spec.podMetricsEndpoints[0].port == ($d[0].spec.template.spec.initContainers[1].ports[0].name) and
    .spec.selector.matchLabels == $d[0].spec.template.metadata.labels and
    (.spec.podMetricsEndpoints[0].relabelings[] | select(.targetLabel == "job") | .replacement) == "outbox-relay"' "$work/podmonitor.json"
yaml2json "$k8s/networkpolicy.yaml" | jq '.[0]' >"$work/netpol.json"
check "networkpolicy.yaml: opens the relay's metrics port to the pods it selects" jq -e --slurpfile d "$work/sidecar.yaml.json" '
    ([.spec.ingress[].ports[].port] | index($d[0].spec.template.spec.initContainers[1].ports[0].containerPort) != null) and
    .spec.podSelector.matchLabels == $d[0].spec.template.metadata.labels' "$work/netpol.json"

# compose: this project's services
yaml2json "$src/deploy/compose.yaml" | jq '.[0]' >"$work/compose.json"
"$relay_bin" --help-markdown | awk -F'|' '/^\| OUTBOX_/ { gsub(/ /, "", $2); print $2 }' >"$work/relay.settings"
"$inbox_bin" --help-markdown | awk -F'|' '/^\| INBOX_/ { gsub(/ /, "", $2); print $2 }' >"$work/inbox.settings"
programs=$(sed -n 's/^for prog in \(.*\); do$/\1/p' "$src/deploy/image/rootfs.sh" | head -1)
check "compose.yaml: the image is built once from deploy/Containerfile and tagged outbox-relay:$version" jq -e --arg img "outbox-relay:$version" '
    [.services[] | select(.build)] | length == 1 and .[0].build.dockerfile == "deploy/Containerfile" and
    .[0].build.context == ".." and .[0].image == $img' "$work/compose.json"
for svc in $(jq -r '.services | to_entries[] | select(.value.image // "" | startswith("outbox-relay")) | .key' "$work/compose.json"); do
    entry=$(jq -r --arg s "$svc" '.services[$s].entrypoint[0] // "/usr/local/bin/outbox-relay"' "$work/compose.json")
    prog=$(basename "$entry")
    bin=$relay_bin settings=$work/relay.settings
    [ "$prog" = outbox-inbox ] && bin=$inbox_bin settings=$work/inbox.settings
    problems=""
    [ "$entry" = "/usr/local/bin/$prog" ] && grep -qw "$prog" <<<"$programs" || problems+="entry point $entry is not in the image ($programs)"$'\n'
    [ "$prog" = outbox-tail ] || {
        cmd=$(jq -r --arg s "$svc" '.services[$s].command[0] // "run"' "$work/compose.json")
        "$bin" "$cmd" --help >/dev/null 2>&1 || problems+="$prog has no command '$cmd'"$'\n'
        hc=$(jq -r --arg s "$svc" '.services[$s].healthcheck.test // [] | .[1:] | join(" ")' "$work/compose.json")
        if [ -n "$hc" ]; then
            [ "${hc%% *}" = "$entry" ] && "$bin" "${hc#* }" --help >/dev/null 2>&1 || problems+="healthcheck '$hc' is not a command of $prog"$'\n'
        fi
        for name in $(jq -r --arg s "$svc" '.services[$s].environment // {} | keys[]' "$work/compose.json"); do
            base=${name%_FILE}
            case $base in OUTBOX_KAFKA_* | INBOX_KAFKA_*) continue ;; esac
            grep -qx "$base" "$settings" || problems+="$prog has no setting $name"$'\n'
        done
        for s in $(jq -r --arg s "$svc" '.services[$s].secrets // [] | .[]' "$work/compose.json"); do
            f=$(jq -r --arg s "$s" '.secrets[$s].file // ""' "$work/compose.json")
            [ -n "$f" ] && [ -f "$src/deploy/$f" ] || problems+="secret $s has no file"$'\n'
        done
    }
    if [ -z "$problems" ]; then ok "compose.yaml: service $svc runs $prog ${cmd:-} with settings it knows"; else not_ok "compose.yaml: service $svc" "$problems"; fi
done
check "compose.yaml: every depends_on names a service" jq -e '
    (.services | keys) as $names | [.services[] | .depends_on // {} | keys[] | IN($names[])] | all' "$work/compose.json"

# The version lives in meson.build alone: --version prints it, deploy/image.sh tags with it, and
# every image reference in the deployment files and the docs names it.
version=$(sed -n "s/^  version : '\(.*\)',$/\1/p" "$src/meson.build")
check "--version prints meson.build's version ($version)" grep -q "^outbox-relay $version " <("$relay_bin" --version)
stale=$(grep -rnoE "outbox-relay:[0-9][0-9.]*" "$src/deploy" "$src/docs" "$src/README.md" |
    awk -F'outbox-relay:' -v v="$version" '$NF != v' || true) # compared as text: a dot is a dot
if [ -z "$stale" ]; then ok "every image reference names version $version"; else not_ok "image references of another version" "$stale"; fi

echo "1..$n"
[ "$failed" = 0 ]
