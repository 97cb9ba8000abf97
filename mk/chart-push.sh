#!/usr/bin/env bash
# Publishes a packaged chart as an OCI artifact: `helm push CHART.tgz oci://HOST/PATH`, then reads
# it back by its version (`helm show chart`) to check the registry serves what was pushed. Users
# install it with `helm install zone-aware-controllers oci://HOST/PATH/zone-aware-controllers
# --version X.Y.Z` (docs/helm.md). `make release CHART_REGISTRY=oci://...` and `make chart-push`
# run it; the helm e2e suite runs it against its own registry.
#
#   chart-push.sh CHART.tgz oci://HOST[:PORT]/PATH
#
# Env: HELM (the helm binary); CHART_PLAIN_HTTP=1 for a registry served over plain HTTP (a local
# one). Credentials: `helm registry login` beforehand. Exits non-zero with one line on stderr when
# a step fails.
set -euo pipefail

die() { echo "chart-push: $*" >&2; exit 1; }
chart="${1:-}"
registry="${2:-}"
helm="${HELM:?HELM is required}"
[ -f "$chart" ] || die "usage: chart-push.sh CHART.tgz oci://HOST/PATH (no chart file ${chart:-given})"
[[ "$registry" == oci://* ]] || die "the registry must be oci://HOST/PATH, not ${registry:-nothing}"
plain=()
[ "${CHART_PLAIN_HTTP:-}" = 1 ] && plain=(--plain-http)

# The chart's name and version, as helm reads them from the package.
meta="$("$helm" show chart "$chart")" || die "helm cannot read $chart"
name="$(sed -n 's/^name: //p' <<<"$meta")"
version="$(sed -n 's/^version: //p' <<<"$meta")"
[ -n "$name" ] && [ -n "$version" ] || die "$chart has no name or version"

pushed="$("$helm" push "$chart" "$registry" "${plain[@]}" 2>&1)" || die "helm push to $registry failed: $pushed"
digest="$(sed -n 's/^Digest: //p' <<<"$pushed")"
served="$("$helm" show chart "$registry/$name" --version "$version" "${plain[@]}" 2>/dev/null)" \
    || die "$registry/$name:$version cannot be read back"
[ "$(sed -n 's/^version: //p' <<<"$served")" = "$version" ] \
    || die "$registry/$name:$version reads back as another version"
echo "chart-push: $registry/$name:$version ($digest)"
