#!/usr/bin/env bash
# Prints install.yaml for image IMG: the CRDs, then everything `make deploy` applies
# (config/default into namespace zone-aware-system, mk/render-deploy.sh), so that
# `kubectl apply --server-side --field-manager=zone-aware-deploy --force-conflicts -f install.yaml`
# on a cluster does what `make deploy` does (the same field manager: installs and upgrades by
# either way apply over each other).
# `make release` writes it with the released image pinned by digest; the `install` e2e suite
# renders it for the local image.
#
# Env: IMG (required), KUBECTL.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${IMG:?IMG is required}"
kubectl="${KUBECTL:-kubectl}"

"$kubectl" kustomize config/crd
echo "---"
NAMESPACE=zone-aware-system DEPLOY_BASE=config/default DEPLOY_COMPONENTS="" KUBECTL="$kubectl" \
    bash mk/render-deploy.sh
