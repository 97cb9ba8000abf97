#!/usr/bin/env bash
# `make run`: starts zau-controller and zdb-controller as local processes against the local zonal
# cluster, managing the `default` namespace only (so they never meet the e2e tests' namespaces),
# with the eviction webhook on 127.0.0.1:9443 (self-signed, its configuration scoped to
# `default`). `make cluster-down` stops them. Reuses running ones.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$STATE/env"

target="${CARGO_TARGET_DIR:-$(cd "$here/../.." && pwd)/target}/debug"
ns=default
webhook_port="${ZDB_WEBHOOK_PORT:-9443}"
webhook_config=zone-aware-eviction-webhook-local

start() { # name command...
    local name="$1"; shift
    setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! >"$PIDS/$name.pid"
}

kubectl apply --server-side --field-manager make-run -f - >/dev/null <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $webhook_config
webhooks:
- name: eviction.zdb.zonecontrol.k8s.aws
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods/eviction], scope: Namespaced}
  clientConfig:
    url: https://127.0.0.1:$webhook_port/validate-eviction
  failurePolicy: Fail
  sideEffects: NoneOnDryRun
  timeoutSeconds: 5
  admissionReviewVersions: [v1]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: $ns}
YAML

common=(--leader-elect=false --watch-namespace "$ns" --lease-namespace "$ns")
if ! alive zau-controller; then
    start zau-controller "$target/zau-controller" "${common[@]}" --listen-address 127.0.0.1:8081
fi
if ! alive zdb-controller; then
    start zdb-controller "$target/zdb-controller" "${common[@]}" --listen-address 127.0.0.1:8082 \
        --webhook-address "127.0.0.1:$webhook_port" --self-signed \
        --tls-secret-name zdb-webhook-tls --tls-secret-namespace "$ns" \
        --service-name zdb-webhook --service-namespace "$ns" --webhook-config-name "$webhook_config"
fi
for name in zau-controller:8081 zdb-controller:8082; do
    deadline=$((SECONDS + 60))
    until curl -fsS "http://127.0.0.1:${name#*:}/readyz" >/dev/null 2>&1; do
        alive "${name%%:*}" || { tail -5 "$LOGS/${name%%:*}.log" >&2; die "${name%%:*} exited (log: $LOGS/${name%%:*}.log)"; }
        [ $SECONDS -lt $deadline ] || die "${name%%:*} not ready after 60 s (log: $LOGS/${name%%:*}.log)"
        sleep 0.5
    done
done
echo "run: zau-controller and zdb-controller manage namespace '$ns' (logs in $LOGS)"
