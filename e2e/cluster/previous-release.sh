#!/usr/bin/env bash
# The previous release, which the upgrade e2e suite installs and then upgrades to the tree:
#
#   previous-release.sh build    its artifacts, built once per machine and cached by version in
#                                $ZAC_CACHE/release-<version> (the last line printed is that
#                                directory)
#   previous-release.sh image    build, then import its image into the running real nodes
#
# The artifacts, as the release gave them to its users:
#   src/           the release's tree (`git archive` of its commit, PREVIOUS_RELEASE_COMMIT in
#                  versions.sh: in main's history, so any clone but a shallow one has it)
#   target/debug/  its controllers (`images.sh previous` packs them as PREVIOUS_IMAGE, lib.sh)
#   crds.yaml      its CRDs (config/crd)
#   manifests.yaml what its `make deploy` applied into zone-aware-system for that image
#   deploy.sh      its `make deploy`: the CRDs, then the manifests, server-side with its field
#                  manager (0.1.0 shipped no install.yaml and no chart: `make deploy` was the way)
#
# The controllers are built as the test build of `make e2e` is (cargo's dev profile, dynamically
# linked, the host's C runtime beside them in the image): its code, not its release profile, is
# what an upgrade exercises. Their compiled dependencies are the workspace's test build's: cargo's
# build-dir is the workspace's target dir (only the final binaries go to the cache dir, so the
# workspace's own are never overwritten), and same-features.py gives the release's dependencies
# the features that build gives them (cargo reuses a compiled crate only when its features are
# equal), at the versions the release's Cargo.lock pinned (checked after the build). A cold machine
# therefore compiles only the release's own crates: 1 minute, against 14 when tokio's and
# serde_json's features differed and nearly every dependency was compiled a second time.
#
# Env: CARGO, CARGO_TARGET_DIR (the workspace's), KUBECTL (default: the cluster's).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/heartbeat.sh"
die() { echo "previous-release: $*" >&2; exit 1; }

cargo="${CARGO:-cargo}"
kubectl="${KUBECTL:-$K8S_BIN/kubectl}"
dir="$PREVIOUS_RELEASE_DIR"
shared_target="${CARGO_TARGET_DIR:-$TOP/target}"

# The release's tree, from the repository this script is in, by its commit (tags are not needed).
source_tree() {
    local commit="$PREVIOUS_RELEASE_COMMIT"
    git -C "$TOP" cat-file -e "$commit^{commit}" 2>/dev/null \
        || die "commit $commit ($PREVIOUS_RELEASE) is not in $TOP (a shallow clone? git fetch --unshallow): the upgrade starts from it"
    rm -rf "$dir/src" && mkdir -p "$dir/src"
    git -C "$TOP" archive "$commit" | tar -x -C "$dir/src"
    echo "$commit" >"$dir/commit"
}

controllers() {
    local bins=()
    mapfile -t bins <"$dir/src/bins.txt"
    python3 "$here/same-features.py" "$TOP" "$dir/src" \
        || die "giving the $PREVIOUS_RELEASE dependencies the workspace's features failed"
    # Its binaries report its commit as the release's build did.
    ( cd "$dir/src" && ZONE_AWARE_REVISION="$(cat "$dir/commit")" \
        CARGO_BUILD_BUILD_DIR="$shared_target" CARGO_TARGET_DIR="$dir/target" \
        heartbeat "the $PREVIOUS_RELEASE controllers" \
        "$cargo" build --quiet --package=zac-same-features "${bins[@]/#/--package=}" ) \
        || die "building the $PREVIOUS_RELEASE controllers failed"
    python3 "$here/same-features.py" --check "$dir/src" "${bins[@]}" \
        || die "the $PREVIOUS_RELEASE controllers were not built from its Cargo.lock's versions"
}

# What its `make deploy IMG=$PREVIOUS_IMAGE` applied, rendered by its own scripts, and that
# command itself (its mk/deploy.mk: CRDs then manifests, server-side, its field manager).
manifests() {
    [ -x "$kubectl" ] || die "$kubectl is missing (e2e/cluster/build.sh builds it)"
    "$kubectl" kustomize "$dir/src/config/crd" >"$dir/crds.yaml"
    ( cd "$dir/src" && NAMESPACE=zone-aware-system IMG="$PREVIOUS_IMAGE" DEPLOY_BASE=config/default \
        DEPLOY_COMPONENTS="" KUBECTL="$kubectl" bash mk/render-deploy.sh ) >"$dir/manifests.yaml" \
        || die "rendering the $PREVIOUS_RELEASE manifests failed"
    local manager
    manager="$(sed -n 's/^DEPLOY_FIELD_MANAGER := //p' "$dir/src/mk/deploy.mk")"
    [ -n "$manager" ] || die "no DEPLOY_FIELD_MANAGER in the $PREVIOUS_RELEASE mk/deploy.mk"
    cat >"$dir/deploy.sh" <<EOF
#!/usr/bin/env bash
# make deploy of $PREVIOUS_RELEASE (its mk/deploy.mk), with KUBECTL from the environment.
set -euo pipefail
k="\${KUBECTL:-kubectl}"
"\$k" apply --server-side --field-manager=$manager --force-conflicts -f "$dir/crds.yaml"
"\$k" wait --for=condition=Established --timeout=60s -f "$dir/crds.yaml"
"\$k" apply --server-side --field-manager=$manager --force-conflicts -f "$dir/manifests.yaml"
EOF
    chmod +x "$dir/deploy.sh"
}

build() {
    local stamp="$dir/built"
    if [ -f "$stamp" ]; then
        echo "$dir"
        return
    fi
    mkdir -p "$dir"
    rm -f "$stamp"
    source_tree
    controllers
    manifests
    date -u +%FT%TZ >"$stamp"
    echo "previous-release: $PREVIOUS_RELEASE built ($PREVIOUS_IMAGE)" >&2
    echo "$dir"
}

case "${1:-}" in
build) build ;;
image) bash "$here/images.sh" previous "$(build | tail -n 1)" ;;
*) echo "usage: $0 build|image" >&2; exit 2 ;;
esac
