#!/usr/bin/env bash
# `make run`: starts every controller of bins.txt (zau-controller, zdb-controller, ...) as a local
# process against the local zonal cluster, managing the `default` namespace only (so they never
# meet the e2e tests' namespaces), each with its /healthz, /readyz and /metrics on 127.0.0.1:8081,
# :8082, ... in the order of bins.txt (the rules-federator serves its API there too); zdb-controller's eviction webhook on 127.0.0.1:9443
# (self-signed, its configuration scoped to `default`). `make cluster-down` stops them. Reuses
# running ones.
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

# Ignore, as shipped: zdb-controller moves it to Fail once it serves (and the forced apply puts
# it back to Ignore for a restarted one).
kubectl apply --server-side --field-manager make-run --force-conflicts -f - >/dev/null <<YAML
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
  failurePolicy: Ignore
  sideEffects: NoneOnDryRun
  timeoutSeconds: 5
  admissionReviewVersions: [v1]
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: $ns}
YAML

# The flags of a binary besides its listen address: the controllers' common ones (one namespace,
# no leader election) and their own; the rules-federator serves the rules of the sample
# ShardedPrometheus of the namespace.
flags_of() { # name
    local common=(--leader-elect=false --watch-namespace "$ns" --lease-namespace "$ns")
    case "$1" in
    zdb-controller)
        flags=("${common[@]}" --webhook-address "127.0.0.1:$webhook_port" --self-signed
            --tls-secret-name zdb-webhook-tls --tls-secret-namespace "$ns"
            --service-name zdb-webhook --service-namespace "$ns" --webhook-config-name "$webhook_config"
            --webhook-client-ca-file "$PKI/webhook-client-ca.crt") ;;
    rules-federator)
        flags=(--discover-sprom prometheus --discover-namespace "$ns") ;;
    *) flags=("${common[@]}") ;;
    esac
}

port=8081
ports=()
for name in "${CONTROLLERS[@]}"; do
    [ -x "$target/$name" ] || die "$target/$name is missing (make run builds it)"
    ports+=("$port")
    if ! alive "$name"; then
        flags_of "$name"
        start "$name" "$target/$name" --listen-address "127.0.0.1:$port" "${flags[@]}"
    fi
    port=$((port + 1))
done
for i in "${!CONTROLLERS[@]}"; do
    name="${CONTROLLERS[$i]}"
    deadline=$((SECONDS + 60))
    until curl -fsS "http://127.0.0.1:${ports[$i]}/readyz" >/dev/null 2>&1; do
        alive "$name" || { tail -5 "$LOGS/$name.log" >&2; die "$name exited (log: $LOGS/$name.log)"; }
        [ $SECONDS -lt $deadline ] || die "$name not ready after 60 s (log: $LOGS/$name.log)"
        sleep 0.5
    done
done
echo "run: ${CONTROLLERS[*]} manage namespace '$ns' (logs in $LOGS)"
