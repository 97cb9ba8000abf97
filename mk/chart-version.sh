#!/usr/bin/env bash
# Sets version and appVersion of charts/zone-aware-controllers/Chart.yaml to VERSION (x.y.z, or
# x.y.z-pre): one version covers the binaries, the image, install.yaml and the chart
# (docs/versioning.md). `make release VERSION=x.y.z` and `make chart-version VERSION=x.y.z` run it.
set -euo pipefail
version="${1:?usage: chart-version.sh x.y.z}"
if ! [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
    echo "chart-version: $version is not a semantic version x.y.z" >&2
    exit 2
fi
chart="$(dirname "$0")/../charts/zone-aware-controllers/Chart.yaml"
sed -i -E "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: $version/" "$chart"
grep -qx "version: $version" "$chart" && grep -qx "appVersion: $version" "$chart" \
    || { echo "chart-version: $chart has no version/appVersion line to set" >&2; exit 1; }
