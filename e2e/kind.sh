#!/usr/bin/env bash
# `make e2e-kind`: the e2e crate against a kind cluster (1 control plane + 3 workers labelled with
# the three zones, e2e/kind-config.yaml). Needs a Docker engine, kind and kubectl on PATH; it
# cannot run where no Docker engine exists (use `make e2e` and the local zonal cluster there).
#
# Differences from the local zonal cluster, which the tests handle:
# - Webhook servers run by the tests listen on this machine; the API server runs in a container
#   and reaches the host at the kind network's gateway, exported as E2E_WEBHOOK_HOST.
# - There is no audit log: tests that verify removals from it say so and skip those assertions.
# - CloudWatch: set AWS_ENDPOINT_URL to a LocalStack you run (e.g. `localstack start`).
#
# Usage: e2e/kind.sh [test-name-substring]. KEEP_CLUSTER=1 leaves the cluster running.
set -euo pipefail
cd "$(dirname "$0")/.."
filter="${1:-}"
name=zone-aware-e2e

for tool in docker kind kubectl cargo; do
    command -v "$tool" >/dev/null || { echo "e2e-kind: $tool is missing (a Docker engine and kind are required)" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine is reachable" >&2; exit 1; }

if ! kind get clusters 2>/dev/null | grep -qx "$name"; then
    kind create cluster --config e2e/kind-config.yaml --wait 120s
fi
kubeconfig="$(mktemp)"
trap 'rm -f "$kubeconfig"; [ "${KEEP_CLUSTER:-0}" = 1 ] || kind delete cluster --name "$name"' EXIT
kind get kubeconfig --name "$name" >"$kubeconfig"
gateway="$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' | tr ' ' '\n' | grep -E '^[0-9.]+$' | head -1)"

kubectl --kubeconfig "$kubeconfig" apply --server-side -k config/crd
cargo build --workspace --bins
E2E_KUBECONFIG="$kubeconfig" E2E_WEBHOOK_HOST="$gateway" \
    cargo test -p e2e -- --ignored --test-threads=2 $filter
