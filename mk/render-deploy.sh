#!/usr/bin/env bash
# Prints the manifests `make deploy` applies: DEPLOY_BASE (default config/default) rendered with
# kustomize through a generated overlay that sets NAMESPACE and IMG, then the optional components
# (cert-manager, pod deletion) applied on top, so their replacements see the final namespace.
# Needs only kubectl (its built-in kustomize).
#
# Env: NAMESPACE, IMG, DEPLOY_BASE, DEPLOY_COMPONENTS (space-separated component directories),
# KUBECTL.
set -euo pipefail
: "${NAMESPACE:?NAMESPACE is required}" "${IMG:?IMG is required}"
base="${DEPLOY_BASE:-config/default}"
kubectl="${KUBECTL:-kubectl}"

# `make undeploy` deletes the namespace it deployed into: refuse the cluster's own namespaces.
case "$NAMESPACE" in
default | kube-system | kube-public | kube-node-lease)
    echo "deploy: NAMESPACE=$NAMESPACE is not allowed (undeploy deletes the namespace)" >&2
    exit 2
    ;;
esac
[ -f "$base/kustomization.yaml" ] || { echo "deploy: $base has no kustomization.yaml" >&2; exit 2; }

# IMG = name[:tag] or name@digest (a registry port such as host:5000/name is not a tag).
name="$IMG" tag="" digest=""
if [[ "$IMG" == *@* ]]; then
    name="${IMG%%@*}" digest="${IMG#*@}"
elif [[ "${IMG##*/}" == *:* ]]; then
    name="${IMG%:*}" tag="${IMG##*:}"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/namespaced"
{
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "namespace: \"$NAMESPACE\""
    # kustomize accepts only relative paths to other kustomizations.
    echo "resources:"
    echo "- $(realpath --relative-to="$work/namespaced" "$base")"
    echo "images:"
    echo "- name: zone-aware-controllers"
    echo "  newName: \"$name\""
    [ -z "$tag" ] || echo "  newTag: \"$tag\""
    [ -z "$digest" ] || echo "  digest: \"$digest\""
} >"$work/namespaced/kustomization.yaml"

top="$work/namespaced"
if [ -n "${DEPLOY_COMPONENTS:-}" ]; then
    top="$work/components"
    mkdir "$top"
    {
        echo "apiVersion: kustomize.config.k8s.io/v1beta1"
        echo "kind: Kustomization"
        echo "resources:"
        echo "- ../namespaced"
        echo "components:"
        for component in $DEPLOY_COMPONENTS; do
            echo "- $(realpath --relative-to="$top" "$component")"
        done
    } >"$top/kustomization.yaml"
fi
"$kubectl" kustomize "$top"
