#!/usr/bin/env bash
# `make run`'s demo, after run-controllers.sh: config/samples in `default` on the real nodes
# (demo/kustomization.yaml), with the RBAC the ShardedPrometheus's ServiceAccount needs, waited for
# until every shard scrapes the StatefulSet's pods of its zone; then the next commands to try.
# Re-running it re-applies the same objects.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$STATE/env"
source "$here/heartbeat.sh"

ns=default
plugin_dir="${CARGO_TARGET_DIR:-$TOP/target}/debug"
[ -x "$plugin_dir/kubectl-zone" ] || die "$plugin_dir/kubectl-zone is missing (make run builds it)"
export PATH="$plugin_dir:$PATH"
# The image a rollout moves the StatefulSet to: the same metrics target under another tag (the
# nodes pull nothing).
next_image="${METRICS_TARGET_IMAGE%:*}:v2"

echo "demo: the samples in namespace $ns, on the real nodes"
kubectl apply --server-side --field-manager make-run -f "$TOP/config/prometheus/cluster-role.yaml" >/dev/null
kubectl apply --server-side --field-manager make-run -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: prometheus-$ns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: zone-aware-prometheus}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: $ns}
YAML
kubectl kustomize "$here/demo" \
    | sed -e "s#image: METRICS_TARGET_IMAGE#image: $METRICS_TARGET_IMAGE#" \
        -e "s#image: PROMETHEUS_IMAGE#image: $PROMETHEUS_IMAGE#" \
    | kubectl apply -n "$ns" --server-side --field-manager make-run -f - >/dev/null \
    || die "applying the samples failed"
bash "$here/images.sh" alias "$METRICS_TARGET_IMAGE" "$next_image"

heartbeat "demo: waiting for the 6 pods of web" \
    kubectl -n "$ns" wait --for=jsonpath='{.status.readyReplicas}'=6 statefulset/web --timeout=180s >/dev/null \
    || die "the StatefulSet web is not ready after 180 s: kubectl -n $ns describe pods -l app=web"
heartbeat "demo: waiting for the 3 shards of prometheus" \
    kubectl -n "$ns" wait --for=jsonpath='{.status.readyShards}'=3 sprom/prometheus --timeout=180s >/dev/null \
    || die "the ShardedPrometheus has not 3 ready shards after 180 s: kubectl -n $ns get sprom prometheus -o yaml"
# Every shard scrapes its zone's two pods of web (and one of them its own Prometheus): wait for
# the first scrapes.
deadline=$((SECONDS + 120))
until shards="$(kubectl zone shards prometheus -n "$ns" -o json 2>/dev/null)" &&
    python3 - "$shards" <<'PY'
import json, sys
shards = json.loads(sys.argv[1]).get("shards", [])
sys.exit(0 if len(shards) == 3 and all((s.get("targets") or 0) >= 2 for s in shards) else 1)
PY
do
    [ $SECONDS -lt $deadline ] || die "the shards do not scrape their zones' pods after 120 s: kubectl zone shards prometheus -n $ns"
    sleep 2
done
kubectl zone shards prometheus -n "$ns"
cat <<EOF

The controllers manage namespace $ns. Next, with
  source e2e/.cluster/env && export PATH="$plugin_dir:\$PATH"
1. What the ZoneAwareUpdate will do with a new image of web, batch by batch, zone by zone:
     kubectl zone rollout plan web -n $ns --image $next_image
2. Start that rollout:
     kubectl -n $ns set image statefulset/web web=$next_image && kubectl -n $ns get zau web -w
3. The shards, their zones and targets, and what a resize would move:
     kubectl zone shards prometheus -n $ns --to 6
EOF
