#!/usr/bin/env bash
# Installs what building, testing and the demo need, from Debian packages, when missing.
# Runs apt-get (update first) only if something is missing; uses sudo when not root.
set -euo pipefail

packages=(
    gcc pkg-config meson ninja-build
    libpq-dev librdkafka-dev librabbitmq-dev libev-dev libjansson-dev libmicrohttpd-dev
    postgresql-15 postgresql-client-15
    openjdk-17-jre-headless maven
    valgrind curl jq prometheus clang libclang-rt-14-dev cppcheck
    buildah mmdebstrap python3-venv pgbouncer rabbitmq-server
)
[ -n "${RELAYTEST_EXTRA_PACKAGES:-}" ] && read -r -a extra <<<"$RELAYTEST_EXTRA_PACKAGES" && packages+=("${extra[@]}")

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q >&2
    # No service is started by the packages (rabbitmq-server's would hold port 5672 and an
    # epmd): the tests and the demo start their own throwaway servers.
    policy_made=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${sudo[@]}" chmod +x /usr/sbin/policy-rc.d
        policy_made=1
    fi
    rc=0
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || rc=$?
    [ -z "$policy_made" ] || "${sudo[@]}" rm -f /usr/sbin/policy-rc.d
    [ "$rc" = 0 ] || exit "$rc"
fi

# The tests' Python tools, from PyPI into the project's own virtualenv: kubernetes-validate
# (the deployment checks, test/deploy.sh), which brings the Kubernetes schemas and PyYAML;
# the CloudEvents SDK (the conformance test, test/integration/cloudevents.sh).
venv=$(cd "$(dirname "$0")/.." && pwd)/.work/venv
if [ ! -x "$venv/bin/kubernetes-validate" ] || ! "$venv/bin/python3" -c 'import cloudevents.core.bindings.kafka' 2>/dev/null; then
    echo "deps: kubernetes-validate and cloudevents into $venv" >&2
    /usr/bin/python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0 cloudevents==2.2.0 >&2
fi
