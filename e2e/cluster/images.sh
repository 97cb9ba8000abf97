#!/usr/bin/env bash
# Images for the real nodes, built without Docker or a registry: static binaries packed into
# one-layer OCI image tars (images/oci-image.py) and imported into each node's containerd.
#
#   images.sh test-images          the pause (pod sandbox), metrics-target, Prometheus,
#                                  Alertmanager, metrics-server, prometheus-config-reloader
#                                  and CoreDNS images (their tars in lib.sh's TEST_IMAGE_TARS; nothing
#                                  imported)
#   images.sh test-images-import   every test image (their binaries must be built: build.sh all),
#                                  imported into the running nodes (make e2e)
#   images.sh thanos               Thanos's image (build.sh thanos built its binary), imported
#                                  into the running nodes (make e2e, before the Thanos suites)
#   images.sh project              the project's image (the Dockerfile's final stage: the static
#                                  controller binaries, non-root) and the test images, imported
#                                  into the running nodes
#   images.sh project-only         the project's image alone, imported into the running nodes
#   images.sh e2e-image            the project's image alone, of the workspace's test build
#                                  (make e2e: cluster-up imported the test images)
#   images.sh previous DIR         the previous release's image (previous-release.sh), imported
#                                  into the running nodes
#   images.sh import ZONE TAR...   import image tars into one node's containerd
#   images.sh import-pinned TAR REF
#                                  a release's image tar into every real node, also under the
#                                  NAME@DIGEST of REF (NAME:TAG@DIGEST, as install.yaml pins it)
#   images.sh alias REF NEW        an image of every real node also under the name NEW (a
#                                  release's other tag of the same image, to the tests)
#   images.sh multiarch OUT NAME   the project's image for linux/amd64 and linux/arm64: one
#                                  OCI image index in an image-layout tar OUT, named NAME
#                                  (nothing imported); the last line printed is the index's
#                                  digest (docs/release.md)
#   images.sh static ARCH          the static controller binaries for ARCH (amd64, arm64); the
#                                  last line printed is their directory
#
# Env: BINS (the controller binaries, default: those of bins.txt), CARGO,
# CARGO_TARGET_DIR, STATIC_TARGET and IMAGE_PROFILE (the single-platform image's Rust target and
# cargo profile; the multi-arch image is always a release build).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/heartbeat.sh"
die() { echo "image: $*" >&2; exit 1; }

cargo="${CARGO:-cargo}"
target="${STATIC_TARGET:-x86_64-unknown-linux-gnu}"
profile="${IMAGE_PROFILE:-release}"
# cargo's output directory of the profile: dev's is debug, every other's its name.
bin_dir="${CARGO_TARGET_DIR:-$TOP/target}/$target/$([ "$profile" = dev ] && echo debug || echo "$profile")"
oci() { python3 "$here/images/oci-image.py" "$@"; }

# The image's binaries: the controllers (BINS, default bins.txt), then the kubectl plugins of
# plugins.txt (the chart's `helm test` runs `kubectl-zone check` from the image).
image_bins() {
    local plugins=()
    [ -f "$TOP/plugins.txt" ] && mapfile -t plugins <"$TOP/plugins.txt"
    echo ${BINS:-${CONTROLLERS[*]}} "${plugins[@]}"
}

static_build() { # packages...
    static_build_for "$target" "$profile" "$@"
}

static_build_for() { # rust-target profile packages...
    local rust_target="$1" cargo_profile="$2"
    shift 2
    # A fixed SOURCE_DATE_EPOCH: the C inside some crates (mimalloc's __DATE__) comes out the
    # same whenever it is built, and the cc crate's build scripts, which rerun when the variable
    # changes, see one value whoever builds the tree (make release exports the commit's time for
    # its own files; make check-arm64 and make image do not).
    heartbeat "the static build ($rust_target, profile $cargo_profile) of $*" \
        env SOURCE_DATE_EPOCH=0 RUSTFLAGS="-C target-feature=+crt-static" \
        "$cargo" build --quiet --profile "$cargo_profile" --locked \
        --target "$rust_target" "${@/#/--package=}" \
        || die "the static build ($rust_target, profile $cargo_profile) of $* failed"
}

# The Rust target of each platform of the multi-arch image (its OCI architecture name).
rust_target_of() { # arch
    case "$1" in
    amd64) echo x86_64-unknown-linux-gnu ;;
    arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "no Rust target for the architecture $1 (amd64 or arm64)" ;;
    esac
}

# arm64 from this x86_64 host: Debian's cross gcc is the linker and the C compiler of the crates
# with C inside (aws-lc-sys, ring, libmimalloc-sys), and its libc6-dev-arm64-cross holds the
# static glibc that +crt-static links (zig's glibc targets cannot link glibc statically).
arm64_toolchain() {
    local log="$ZAC_CACHE/arm64-toolchain.log"
    mkdir -p "$ZAC_CACHE"
    if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
        echo "image: adding the Rust target aarch64-unknown-linux-gnu" >&2
        rustup target add aarch64-unknown-linux-gnu >"$log" 2>&1 \
            || die "rustup target add aarch64-unknown-linux-gnu failed; see $log"
    fi
    if ! command -v aarch64-linux-gnu-gcc >/dev/null || [ ! -f /usr/aarch64-linux-gnu/lib/libc.a ]; then
        echo "image: installing gcc-aarch64-linux-gnu libc6-dev-arm64-cross (Debian packages) for arm64" >&2
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross; } >"$log" 2>&1 \
            || die "installing the arm64 cross toolchain failed; see $log"
    fi
    # Only the aarch64 target's: the host build (build scripts, proc macros) is untouched.
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
}

# The image's static binaries for one architecture (image_bins); prints their directory.
static_arch() { # arch
    local rust_target
    rust_target="$(rust_target_of "$1")"
    [ "$1" = arm64 ] && arm64_toolchain
    static_build_for "$rust_target" release $(image_bins)
    echo "${CARGO_TARGET_DIR:-$TOP/target}/$rust_target/release"
}

# As distroless/static:nonroot: users, CA certificates (the AWS SDK's HTTPS), a /tmp. Writes the
# passwd and group files into DIR; sets BASE_LAYER to the oci-image.py arguments of the lot.
base_layer() { # dir
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$1/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$1/group"
    BASE_LAYER=(--user 65532:65532
        --file "$1/passwd:/etc/passwd" --file "$1/group:/etc/group"
        --file /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt
        --dir /tmp:1777 --dir /home/nonroot:755)
}

# A Prometheus image (binary, name, tar) as the upstream image runs it: user nobody, the binary
# as the entrypoint. Rebuilt only when the binary changed (it is 100 MB).
prometheus_image() {
    [ -x "$1" ] || die "$1 is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$3" ] || [ "$1" -nt "$3" ]; then
        oci --name "$2" --out "$3" --user 65534:65534 --entrypoint /bin/prometheus \
            --file "$1:/bin/prometheus:755" --dir /prometheus:1777 >/dev/null
    fi
}

# Whether the binary of an image the cluster can start without is there: with `strict` (make
# e2e's `test-images-import`, after `build.sh all`) it must be, else its image waits (cluster-up
# builds only what the cluster needs, `build.sh cluster`).
optional_binary() { # binary strict
    [ -x "$1" ] && return 0
    [ "$2" = strict ] && die "$1 is missing (e2e/cluster/build.sh builds it)"
    return 1
}

test_images() { # [strict]
    local strict="${1:-}"
    mkdir -p "$IMAGES"
    gcc -static -Os -Wall -Wextra -o "$IMAGES/pause" "$here/images/pause.c" \
        || die "building the pause binary failed (gcc -static needs libc6-dev)"
    oci --name "$PAUSE_IMAGE" --out "$IMAGES/pause.tar" --user 65535:65535 \
        --entrypoint /pause --file "$IMAGES/pause:/pause:755" >/dev/null
    static_build metrics-target
    oci --name "$METRICS_TARGET_IMAGE" --out "$IMAGES/metrics-target.tar" --user 65532:65532 \
        --entrypoint /metrics-target --file "$bin_dir/metrics-target:/metrics-target:755" >/dev/null
    prometheus_image "$PROMETHEUS_BIN" "$PROMETHEUS_IMAGE" "$IMAGES/prometheus.tar"
    if optional_binary "$PROMETHEUS2_BIN" "$strict"; then
        prometheus_image "$PROMETHEUS2_BIN" "$PROMETHEUS2_IMAGE" "$IMAGES/prometheus2.tar"
    fi
    if optional_binary "$ALERTMANAGER_BIN" "$strict" &&
        { [ ! -f "$IMAGES/alertmanager.tar" ] || [ "$ALERTMANAGER_BIN" -nt "$IMAGES/alertmanager.tar" ]; }; then
        # As the upstream image: user nobody, the binary as the entrypoint, a writable data dir.
        oci --name "$ALERTMANAGER_IMAGE" --out "$IMAGES/alertmanager.tar" --user 65534:65534 \
            --entrypoint /bin/alertmanager --file "$ALERTMANAGER_BIN:/bin/alertmanager:755" \
            --dir /alertmanager:1777 >/dev/null
    fi
    [ -x "$METRICS_SERVER_BIN" ] || die "$METRICS_SERVER_BIN is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$IMAGES/metrics-server.tar" ] || [ "$METRICS_SERVER_BIN" -nt "$IMAGES/metrics-server.tar" ]; then
        # Its self-signed serving certificate goes to /tmp (--cert-dir).
        oci --name "$METRICS_SERVER_IMAGE" --out "$IMAGES/metrics-server.tar" --user 65534:65534 \
            --entrypoint /metrics-server --file "$METRICS_SERVER_BIN:/metrics-server:755" \
            --dir /tmp:1777 >/dev/null
    fi
    [ -x "$COREDNS_BIN" ] || die "$COREDNS_BIN is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$IMAGES/coredns.tar" ] || [ "$COREDNS_BIN" -nt "$IMAGES/coredns.tar" ]; then
        # Non-root as upstream's image; it listens on 1053 (no file capability to bind 53 here:
        # the Service maps 53 to it).
        oci --name "$COREDNS_IMAGE" --out "$IMAGES/coredns.tar" --user 65532:65532 \
            --entrypoint /coredns --file "$COREDNS_BIN:/coredns:755" >/dev/null
    fi
    if optional_binary "$CONFIG_RELOADER_BIN" "$strict" &&
        { [ ! -f "$IMAGES/config-reloader.tar" ] || [ "$CONFIG_RELOADER_BIN" -nt "$IMAGES/config-reloader.tar" ]; }; then
        # As the upstream image: user nobody, at the path the operator's pods run it from.
        oci --name "$CONFIG_RELOADER_IMAGE" --out "$IMAGES/config-reloader.tar" --user 65534:65534 \
            --entrypoint /bin/prometheus-config-reloader \
            --file "$CONFIG_RELOADER_BIN:/bin/prometheus-config-reloader:755" >/dev/null
    fi
}

# The test images, every one (after `build.sh all`), into every running real node: `make e2e`
# before its suites, on a cluster that `make run` may have started with only some of them.
test_images_import() {
    test_images strict
    local zone imported=0
    for zone in "${REAL_ZONES[@]}"; do
        [ -S "$NODES/$zone/containerd.sock" ] || continue
        import "$zone" "${TEST_IMAGE_TARS[@]}"
        imported=$((imported + 1))
    done
    echo "image: the test images imported into $imported real nodes"
}

# Thanos's image, apart from the test images: its binary is the one cold Go build the cluster can
# start without (build.sh thanos), so `make e2e` imports it before the suites that run it.
thanos_image() {
    [ -x "$THANOS_BIN" ] || die "$THANOS_BIN is missing (e2e/cluster/build.sh thanos builds it)"
    mkdir -p "$IMAGES"
    if [ ! -f "$THANOS_IMAGE_TAR" ] || [ "$THANOS_BIN" -nt "$THANOS_IMAGE_TAR" ]; then
        # As the upstream image: the binary at /bin/thanos as the entrypoint (the subcommand is
        # the first argument), here as user nobody; pods mount their data directories.
        oci --name "$THANOS_IMAGE" --out "$THANOS_IMAGE_TAR" --user 65534:65534 \
            --entrypoint /bin/thanos --file "$THANOS_BIN:/bin/thanos:755" >/dev/null
    fi
    local zone imported=0
    for zone in "${REAL_ZONES[@]}"; do
        [ -S "$NODES/$zone/containerd.sock" ] || continue
        import "$zone" "$THANOS_IMAGE_TAR"
        imported=$((imported + 1))
    done
    echo "image: $THANOS_IMAGE imported into $imported real nodes"
}

# The files of the e2e image, appended to FILES: the controller binaries of the workspace's test
# build (cargo's debug output, which `make e2e` has just built with the features and lints of
# `make test`), not a static build of their own, which compiles every dependency a second time
# (about ten CPU-minutes cold on these 2 cores, on the cold run's critical path). They are linked
# dynamically: the C runtime they load (ldd's list: the host's glibc, libgcc_s, the loader) goes in
# beside them at the paths ldd names, and their debug info is stripped. The release image stays
# the static release build of `make image` and `make release`, which E2E_INSTALL_YAML and
# E2E_HELM_CHART check on this cluster (docs/release.md).
test_build_files() { # dir out bins...: the binaries of cargo's output dir, stripped into out
    local dir="$1" out="$2" bin lib
    local -A libs=()
    shift 2
    rm -rf "$out" && mkdir -p "$out"
    for bin in "$@"; do
        [ -x "$dir/$bin" ] || die "$dir/$bin is missing: the e2e image takes the test build's binaries (cargo build --workspace --all-targets)"
        objcopy --strip-debug "$dir/$bin" "$out/$bin" || die "stripping $dir/$bin failed"
        FILES+=(--file "$out/$bin:/$bin:755")
        # `name => /path (address)` and the loader's `/path (address)`; linux-vdso has no file.
        while read -r lib; do libs["$lib"]=1; done < <(ldd "$dir/$bin" |
            awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
    done
    [ "${#libs[@]}" -gt 0 ] || die "ldd found no shared library in the test build's binaries"
    for lib in $(printf '%s\n' "${!libs[@]}" | sort); do
        FILES+=(--file "$(readlink -f "$lib"):$lib:755")
    done
}

project_image() { # [only | test-build]: without the test images; test-build: from the test build
    local bins=($(image_bins)) bin tars=("$IMAGES/project.tar")
    FILES=()
    mkdir -p "$IMAGES"
    if [ "${1:-}" = test-build ]; then
        test_build_files "${CARGO_TARGET_DIR:-$TOP/target}/debug" "$IMAGES/test-build" "${bins[@]}"
    else
        static_build "${bins[@]}"
        for bin in "${bins[@]}"; do FILES+=(--file "$bin_dir/$bin:/$bin:755"); done
    fi
    base_layer "$IMAGES"
    oci --name "$PROJECT_IMAGE" --out "$IMAGES/project.tar" "${BASE_LAYER[@]}" \
        --entrypoint "/${bins[0]}" "${FILES[@]}"
    local what="$PROJECT_IMAGE"
    if [ -z "${1:-}" ]; then
        test_images
        local tar
        for tar in "${TEST_IMAGE_TARS[@]}"; do [ -f "$tar" ] && tars+=("$tar"); done
        what+=" and the test images ($PAUSE_IMAGE, $METRICS_TARGET_IMAGE, $PROMETHEUS_IMAGE, $PROMETHEUS2_IMAGE, $ALERTMANAGER_IMAGE, $METRICS_SERVER_IMAGE, $CONFIG_RELOADER_IMAGE, $COREDNS_IMAGE)"
    fi
    local zone imported=0
    for zone in "${REAL_ZONES[@]}"; do
        [ -S "$NODES/$zone/containerd.sock" ] || continue
        import "$zone" "${tars[@]}"
        imported=$((imported + 1))
    done
    if [ "$imported" = 0 ]; then
        echo "image: $what written to $IMAGES (no real node running to import them into)"
    else
        echo "image: $what imported into $imported real nodes"
    fi
}

# The previous release's image (previous-release.sh built its controllers into DIR/target from its
# tree, with its bins.txt), packed as the e2e image is, written to DIR/image.tar and imported into
# the running real nodes.
previous_image() { # dir
    local dir="${1:-}" bins=() zone
    [ -f "$dir/src/bins.txt" ] || { echo "usage: $0 previous DIR (previous-release.sh's)" >&2; exit 2; }
    mapfile -t bins <"$dir/src/bins.txt"
    FILES=()
    test_build_files "$dir/target/debug" "$dir/bin" "${bins[@]}"
    base_layer "$dir"
    oci --name "$PREVIOUS_IMAGE" --out "$dir/image.tar" "${BASE_LAYER[@]}" \
        --entrypoint "/${bins[0]}" "${FILES[@]}" >/dev/null
    for zone in "${REAL_ZONES[@]}"; do
        [ -S "$NODES/$zone/containerd.sock" ] || die "the real node of $zone is not running"
        import "$zone" "$dir/image.tar"
    done
    echo "image: $PREVIOUS_IMAGE imported into ${#REAL_ZONES[@]} real nodes"
}

# The release image: the project's image for both platforms under one image index, layers
# gzipped (it is pushed to a registry, not imported here). The local cluster keeps the amd64
# image of project_image.
multiarch_image() { # out name
    local out="${1:-}" name="${2:-}" bins=($(image_bins)) args=() arch dir bin work
    [ -n "$out" ] && [ -n "$name" ] || { echo "usage: $0 multiarch OUT.tar NAME" >&2; exit 2; }
    work="$(mktemp -d)"
    # Expanded now: $work is local, gone when the EXIT trap runs.
    trap "rm -rf '$work'" EXIT
    base_layer "$work"
    for arch in amd64 arm64; do
        dir="$(static_arch "$arch" | tail -n 1)"
        args+=(--platform "$arch")
        for bin in "${bins[@]}"; do args+=(--arch-file "$arch:$dir/$bin:/$bin:755"); done
    done
    mkdir -p "$(dirname "$out")"
    oci --name "$name" --out "$out" --gzip "${BASE_LAYER[@]}" --entrypoint "/${bins[0]}" "${args[@]}"
    # Refuses a blob that does not match its digest or a binary of the other architecture.
    oci --inspect "$out" >/dev/null || die "the image index $out does not check out"
}

import() { # zone tar...
    local zone="$1" tar
    shift
    for tar in "$@"; do
        ctr --address "$NODES/$zone/containerd.sock" --namespace k8s.io images import "$tar" \
            >"$LOGS/import-$zone.log" 2>&1 || die "importing $tar into $zone failed; see $LOGS/import-$zone.log"
    done
}

# A released image (`make release`'s OCI tar, named NAME:TAG) into every real node, also under
# NAME@DIGEST: the reference install.yaml and the release chart pin, which the kubelet asks the
# node's containerd for as is (the nodes pull nothing).
import_pinned() { # tar name:tag@digest
    local tar="${1:-}" pinned="${2:-}" named repository digest zone
    [ -f "$tar" ] && [[ "$pinned" == *@sha256:* ]] \
        || { echo "usage: $0 import-pinned TAR NAME:TAG@sha256:DIGEST" >&2; exit 2; }
    named="${pinned%@*}" digest="${pinned#*@}"
    repository="${named%:*}"
    for zone in "${REAL_ZONES[@]}"; do
        import "$zone" "$tar"
        ctr --address "$NODES/$zone/containerd.sock" --namespace k8s.io images tag --force \
            "$named" "$repository@$digest" >>"$LOGS/import-$zone.log" 2>&1 \
            || die "tagging $named as $repository@$digest in $zone failed; see $LOGS/import-$zone.log"
    done
    echo "image: $pinned imported into ${#REAL_ZONES[@]} real nodes"
}

# An image already in every real node (REF) also under the name NEW.
alias_image() { # ref new
    local ref="${1:-}" new="${2:-}" zone
    [ -n "$ref" ] && [ -n "$new" ] || { echo "usage: $0 alias REF NEW" >&2; exit 2; }
    for zone in "${REAL_ZONES[@]}"; do
        ctr --address "$NODES/$zone/containerd.sock" --namespace k8s.io images tag --force \
            "$ref" "$new" >>"$LOGS/import-$zone.log" 2>&1 \
            || die "tagging $ref as $new in $zone failed; see $LOGS/import-$zone.log"
    done
}

case "${1:-}" in
test-images) test_images ;;
test-images-import) test_images_import ;;
project) project_image ;;
project-only) project_image only ;;
e2e-image) project_image test-build ;;
thanos) thanos_image ;;
previous) previous_image "${2:-}" ;;
import) shift; import "$@" ;;
import-pinned) shift; import_pinned "$@" ;;
alias) shift; alias_image "$@" ;;
multiarch) shift; multiarch_image "$@" ;;
static) static_arch "${2:-}" ;;
*) echo "usage: $0 test-images|test-images-import|project|project-only|e2e-image|thanos|previous DIR|import ZONE TAR...|import-pinned TAR NAME:TAG@DIGEST|alias REF NEW|multiarch OUT.tar NAME|static ARCH" >&2; exit 2 ;;
esac
