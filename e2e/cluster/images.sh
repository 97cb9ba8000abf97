#!/usr/bin/env bash
# Images for the real nodes, built without Docker or a registry: static binaries packed into
# one-layer OCI image tars (images/oci-image.py) and imported into each node's containerd.
#
#   images.sh test-images          the pause (pod sandbox), metrics-target, Prometheus,
#                                  Alertmanager, metrics-server and prometheus-config-reloader
#                                  images
#   images.sh project              the project's image (the Dockerfile's final stage: the static
#                                  controller binaries, non-root) and the test images, imported
#                                  into the running nodes
#   images.sh import ZONE TAR...   import image tars into one node's containerd
#
# Env: BINS (the controller binaries, default: those of bins.txt), CARGO,
# CARGO_TARGET_DIR, STATIC_TARGET.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

cargo="${CARGO:-cargo}"
target="${STATIC_TARGET:-x86_64-unknown-linux-gnu}"
release="${CARGO_TARGET_DIR:-$TOP/target}/$target/release"
oci() { python3 "$here/images/oci-image.py" "$@"; }

static_build() { # packages...
    RUSTFLAGS="-C target-feature=+crt-static" "$cargo" build --quiet --release --locked \
        --target "$target" "${@/#/--package=}" || die "the static build of $* failed"
}

test_images() {
    mkdir -p "$IMAGES"
    gcc -static -Os -Wall -Wextra -o "$IMAGES/pause" "$here/images/pause.c" \
        || die "building the pause binary failed (gcc -static needs libc6-dev)"
    oci --name "$PAUSE_IMAGE" --out "$IMAGES/pause.tar" --user 65535:65535 \
        --entrypoint /pause --file "$IMAGES/pause:/pause:755" >/dev/null
    static_build metrics-target
    oci --name "$METRICS_TARGET_IMAGE" --out "$IMAGES/metrics-target.tar" --user 65532:65532 \
        --entrypoint /metrics-target --file "$release/metrics-target:/metrics-target:755" >/dev/null
    # As the upstream image runs it: user nobody, the binary as the entrypoint. Rebuilt only when
    # the binary changed (it is 100 MB).
    [ -x "$PROMETHEUS_BIN" ] || die "$PROMETHEUS_BIN is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$IMAGES/prometheus.tar" ] || [ "$PROMETHEUS_BIN" -nt "$IMAGES/prometheus.tar" ]; then
        oci --name "$PROMETHEUS_IMAGE" --out "$IMAGES/prometheus.tar" --user 65534:65534 \
            --entrypoint /bin/prometheus --file "$PROMETHEUS_BIN:/bin/prometheus:755" \
            --dir /prometheus:1777 >/dev/null
    fi
    [ -x "$ALERTMANAGER_BIN" ] || die "$ALERTMANAGER_BIN is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$IMAGES/alertmanager.tar" ] || [ "$ALERTMANAGER_BIN" -nt "$IMAGES/alertmanager.tar" ]; then
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
    [ -x "$CONFIG_RELOADER_BIN" ] || die "$CONFIG_RELOADER_BIN is missing (e2e/cluster/build.sh builds it)"
    if [ ! -f "$IMAGES/config-reloader.tar" ] || [ "$CONFIG_RELOADER_BIN" -nt "$IMAGES/config-reloader.tar" ]; then
        # As the upstream image: user nobody, at the path the operator's pods run it from.
        oci --name "$CONFIG_RELOADER_IMAGE" --out "$IMAGES/config-reloader.tar" --user 65534:65534 \
            --entrypoint /bin/prometheus-config-reloader \
            --file "$CONFIG_RELOADER_BIN:/bin/prometheus-config-reloader:755" >/dev/null
    fi
}

project_image() {
    local bins=(${BINS:-${CONTROLLERS[*]}}) files=() bin
    static_build "${bins[@]}"
    for bin in "${bins[@]}"; do files+=(--file "$release/$bin:/$bin:755"); done
    mkdir -p "$IMAGES"
    # As distroless/static:nonroot: users, CA certificates (the AWS SDK's HTTPS), a /tmp.
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$IMAGES/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\n' >"$IMAGES/group"
    oci --name "$PROJECT_IMAGE" --out "$IMAGES/project.tar" --user 65532:65532 \
        --entrypoint "/${bins[0]}" "${files[@]}" \
        --file "$IMAGES/passwd:/etc/passwd" --file "$IMAGES/group:/etc/group" \
        --file /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt \
        --dir /tmp:1777 --dir /home/nonroot:755
    test_images
    local zone imported=0
    for zone in "${REAL_ZONES[@]}"; do
        [ -S "$NODES/$zone/containerd.sock" ] || continue
        import "$zone" "$IMAGES/project.tar" "$IMAGES/pause.tar" "$IMAGES/metrics-target.tar" \
            "$IMAGES/prometheus.tar" "$IMAGES/alertmanager.tar" "$IMAGES/metrics-server.tar" \
            "$IMAGES/config-reloader.tar"
        imported=$((imported + 1))
    done
    if [ "$imported" = 0 ]; then
        echo "image: $PROJECT_IMAGE and the test images written to $IMAGES (no real node running to import them into)"
    else
        echo "image: $PROJECT_IMAGE and the test images ($PAUSE_IMAGE, $METRICS_TARGET_IMAGE, $PROMETHEUS_IMAGE, $ALERTMANAGER_IMAGE, $METRICS_SERVER_IMAGE, $CONFIG_RELOADER_IMAGE) imported into $imported real nodes"
    fi
}

import() { # zone tar...
    local zone="$1" tar
    shift
    for tar in "$@"; do
        ctr --address "$NODES/$zone/containerd.sock" --namespace k8s.io images import "$tar" \
            >"$LOGS/import-$zone.log" 2>&1 || die "importing $tar into $zone failed; see $LOGS/import-$zone.log"
    done
}

case "${1:-}" in
test-images) test_images ;;
project) project_image ;;
import) shift; import "$@" ;;
*) echo "usage: $0 test-images|project|import ZONE TAR..." >&2; exit 2 ;;
esac
