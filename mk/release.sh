#!/usr/bin/env bash
# `make release VERSION=x.y.z`: writes dist/ (docs/release.md):
#   zone-aware-controllers-<v>.oci.tar  the image, an OCI image layout with one index for
#                                        linux/amd64 and linux/arm64
#   install.yaml                         the CRDs and everything `make deploy` applies, the image
#                                        pinned by the index's digest
#   crds.yaml                            the CRDs alone (the upgrade step, docs/versioning.md)
#   zone-aware-controllers-<v>.tgz       the Helm chart, version and appVersion <v>, the image
#                                        pinned by the same digest
#   kubectl-zone-<v>-linux-<arch>.tar.gz the kubectl plugin (static, amd64 and arm64) with its
#                                        completion helper and the license
#   kubectl-zone.krew.yaml               the plugin's krew manifest (mk/krew.py)
#   sbom.cdx.json                        CycloneDX SBOM of every crate of Cargo.lock
#   SHA256SUMS                           the checksums of all of the above
#
# With CHART_REGISTRY=oci://HOST/PATH, the chart is then pushed there as an OCI artifact
# (mk/chart-push.sh; CHART_PLAIN_HTTP=1 for a plain-HTTP registry).
#
# Env: VERSION (required), RELEASE_IMAGE (the image's repository), KUBECTL, HELM, DIST,
# CHART_REGISTRY, CHART_PLAIN_HTTP.
# Exits non-zero with one line on stderr when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${VERSION:-}"
die() { echo "release: $*" >&2; exit 1; }
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] \
    || die "VERSION=$version is not a semantic version x.y.z (make release VERSION=1.2.3)"
repository="${RELEASE_IMAGE:-ghcr.io/zone-aware-controllers/zone-aware-controllers}"
kubectl="${KUBECTL:?KUBECTL is required}"
helm="${HELM:?HELM is required}"
dist="${DIST:-dist}"
[ -x "$kubectl" ] || die "$kubectl is missing (bash e2e/cluster/build.sh chart builds it)"
[ -x "$helm" ] || die "$helm is missing (bash e2e/cluster/build.sh chart builds it)"

rm -rf "$dist"
mkdir -p "$dist"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export ZONE_AWARE_REVISION
ZONE_AWARE_REVISION="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
# Reproducible timestamps of the release's own files: the commit's time (the binaries are built
# with a fixed one, see e2e/cluster/images.sh).
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct 2>/dev/null || echo 0)"

# The kubectl plugin is one of the image's binaries (images.sh's image_bins), built in the same
# cargo runs; dist/ ships it on its own too.
echo "release $version: image (linux/amd64, linux/arm64)"
image_tar="$dist/zone-aware-controllers-$version.oci.tar"
digest="$(bash e2e/cluster/images.sh multiarch "$image_tar" "$repository:v$version" | tail -n 1)"
[[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "the image build printed no index digest (got: $digest)"
pinned="$repository:v$version@$digest"

echo "release $version: install.yaml (image $pinned)"
"$kubectl" kustomize config/crd >"$dist/crds.yaml"
IMG="$pinned" KUBECTL="$kubectl" bash mk/install-yaml.sh >"$dist/install.yaml"
grep -q "image: $pinned" "$dist/install.yaml" || die "install.yaml does not pin $pinned"

echo "release $version: Helm chart"
cp -r charts/zone-aware-controllers "$work/"
chart="$work/zone-aware-controllers"
sed -i -E "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: $version/" "$chart/Chart.yaml"
# The packaged chart's defaults pull the released image by its digest.
python3 - "$chart/values.yaml" "$repository" "v$version" "$digest" <<'EOF'
import re, sys
path, repository, tag, digest = sys.argv[1:]
text = open(path).read()
image = re.search(r"^image:\n(?:  .*\n|\s*\n)*", text, re.M)
if not image:
    sys.exit("release: values.yaml has no image block")
block = image.group(0)
for key, value in (("repository", repository), ("tag", f'"{tag}"'), ("digest", f'"{digest}"')):
    block, n = re.subn(rf"^(  {key}:).*$", rf"\1 {value}", block, count=1, flags=re.M)
    if n != 1:
        sys.exit(f"release: values.yaml's image block has no {key}")
open(path, "w").write(text[: image.start()] + block + text[image.end():])
EOF
"$helm" lint --strict "$chart" >/dev/null || die "helm lint of the release chart failed"
"$helm" package "$chart" --destination "$dist" >/dev/null
[ -f "$dist/zone-aware-controllers-$version.tgz" ] || die "helm package wrote no zone-aware-controllers-$version.tgz"
# With a digest in its values the chart names the image repository@digest (the tag is ignored).
"$helm" template zone-aware-controllers "$dist/zone-aware-controllers-$version.tgz" \
    -n zone-aware-system | grep -q "image: $repository@$digest" \
    || die "the packaged chart does not pin $repository@$digest"

for arch in amd64 arm64; do
    echo "release $version: kubectl-zone plugin (linux/$arch)"
    bin_dir="$(bash e2e/cluster/images.sh static "$arch" | tail -n 1)"
    [ -x "$bin_dir/kubectl-zone" ] || die "the static build of kubectl-zone for $arch wrote nothing"
    plugin="$work/kubectl-zone-$arch"
    mkdir -p "$plugin"
    cp "$bin_dir/kubectl-zone" bins/kubectl-zone/kubectl_complete-zone LICENSE "$plugin/"
    # Reproducible: sorted names, the commit's time, no owner, gzip without a name or time.
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
        -C "$plugin" -cf - kubectl-zone kubectl_complete-zone LICENSE \
        | gzip -n -9 >"$dist/kubectl-zone-$version-linux-$arch.tar.gz"
done
python3 mk/krew.py --version "$version" --dist "$dist" >"$dist/kubectl-zone.krew.yaml"
python3 mk/krew.py --check "$dist/kubectl-zone.krew.yaml"

echo "release $version: SBOM"
python3 mk/sbom.py --version "$version" --bins "$(cat bins.txt plugins.txt | tr '\n' ' ')" >"$dist/sbom.cdx.json"
python3 mk/sbom.py --check "$dist/sbom.cdx.json"

(cd "$dist" && sha256sum -- * >SHA256SUMS)
echo "release $version: dist/"
(cd "$dist" && ls -l)
echo "image index: $pinned"
if [ -n "${CHART_REGISTRY:-}" ]; then
    echo "release $version: the chart to $CHART_REGISTRY"
    HELM="$helm" bash mk/chart-push.sh "$dist/zone-aware-controllers-$version.tgz" "$CHART_REGISTRY"
fi
