# Shared by up.sh and down.sh: paths of the running cluster's state.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/versions.sh"
TOP="$(cd "$here/../.." && pwd)"
STATE="$TOP/e2e/.cluster"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
PKI="$STATE/pki"
K8S_BIN="$ZAC_CACHE/k8s-$K8S_VERSION"
ETCD_BIN="$ZAC_CACHE/etcd-$ETCD_VERSION/etcd"
KWOK_BIN="$ZAC_CACHE/kwok-$KWOK_VERSION/kwok"
LOCALSTACK_VENV="$ZAC_CACHE/localstack-$LOCALSTACK_VERSION"
# The controller binaries (bins/<name>/), one a line of bins.txt: the list the Makefile and the
# Dockerfile read too. None in a copy of e2e/cluster alone (the second-checkout e2e test).
CONTROLLERS=()
if [ -f "$TOP/bins.txt" ]; then
    mapfile -t CONTROLLERS <"$TOP/bins.txt"
fi

die() { echo "cluster-up: $*" >&2; exit 1; }

# Whether the process recorded in pids/<name>.pid is alive.
alive() {
    local pid_file="$PIDS/$1.pid"
    [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

# --- Real nodes (kubelet + containerd), one per zone. They share fixed host paths and names, so
# one cluster per host runs them: HOST_OWNER records which one (see real-nodes.sh).
REAL_ZONES=(zone-a zone-b zone-c)
NODES="$STATE/nodes"
IMAGES="$STATE/images"
# Images of the real nodes, imported locally (imagePullPolicy: Never; nothing can be pulled).
PAUSE_IMAGE=localhost/zone-aware-e2e/pause:e2e
METRICS_TARGET_IMAGE=localhost/zone-aware-e2e/metrics-target:e2e
# Prometheus from build.sh's static binary, for the shard controller's pods on the real nodes.
PROMETHEUS_IMAGE="localhost/zone-aware-e2e/prometheus:v$PROMETHEUS_VERSION"
PROMETHEUS_BIN="$ZAC_CACHE/prometheus-$PROMETHEUS_VERSION/prometheus"
# The same of Prometheus 2, for the shards of a ShardedPrometheus with version 2.
PROMETHEUS2_IMAGE="localhost/zone-aware-e2e/prometheus:v$PROMETHEUS2_VERSION"
PROMETHEUS2_BIN="$ZAC_CACHE/prometheus-$PROMETHEUS2_VERSION/prometheus"
# Alertmanager from build.sh's static binary: the alerting tests' receiver of the shards' alerts.
ALERTMANAGER_IMAGE="localhost/zone-aware-e2e/alertmanager:$ALERTMANAGER_VERSION"
ALERTMANAGER_BIN="$ZAC_CACHE/alertmanager-$ALERTMANAGER_VERSION/alertmanager"
# metrics-server from build.sh's static binary: the metrics API a HorizontalPodAutoscaler reads.
METRICS_SERVER_IMAGE="localhost/zone-aware-e2e/metrics-server:$METRICS_SERVER_VERSION"
METRICS_SERVER_BIN="$ZAC_CACHE/metrics-server-$METRICS_SERVER_VERSION/metrics-server"
# prometheus-operator (run on the host by the comparison tests, with its CRDs from the same tag)
# and its config reloader, the sidecar of the operator's Prometheus pods, from build.sh.
PROMETHEUS_OPERATOR_DIR="$ZAC_CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
CONFIG_RELOADER_IMAGE="localhost/zone-aware-e2e/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION"
CONFIG_RELOADER_BIN="$PROMETHEUS_OPERATOR_DIR/prometheus-config-reloader"
# Thanos from build.sh's static binary (one binary: sidecar, query, store, rule), for the shards'
# sidecars and what joins the shards again.
THANOS_IMAGE="localhost/zone-aware-e2e/thanos:$THANOS_VERSION"
THANOS_BIN="$ZAC_CACHE/thanos-$THANOS_VERSION/thanos"
THANOS_IMAGE_TAR="$IMAGES/thanos.tar"
# CoreDNS from build.sh's static binary: the cluster DNS of the real nodes.
COREDNS_IMAGE="localhost/zone-aware-e2e/coredns:$COREDNS_VERSION"
COREDNS_BIN="$ZAC_CACHE/coredns-$COREDNS_VERSION/coredns"
# cert-manager from build.sh (controller, cainjector, crds.yaml), run on the host by the e2e
# tests of the certManager modes.
CERT_MANAGER_DIR="$ZAC_CACHE/cert-manager-$CERT_MANAGER_VERSION"
# The tars of the test images (images.sh test-images writes them), imported into every real node
# as it starts. Thanos's is not one of them: `images.sh thanos` imports it (make e2e).
TEST_IMAGE_TARS=("$IMAGES/pause.tar" "$IMAGES/metrics-target.tar" "$IMAGES/prometheus.tar"
    "$IMAGES/prometheus2.tar" "$IMAGES/alertmanager.tar" "$IMAGES/metrics-server.tar" "$IMAGES/config-reloader.tar"
    "$IMAGES/coredns.tar")
PROJECT_IMAGE="${LOCAL_IMG:-localhost/zone-aware-controllers:dev}"
# The previous release (versions.sh), built by previous-release.sh, and the image of its controllers.
PREVIOUS_RELEASE_DIR="$ZAC_CACHE/release-$PREVIOUS_RELEASE"
PREVIOUS_IMAGE="localhost/zone-aware-controllers:$PREVIOUS_RELEASE"
# Only pods that tolerate this taint (and select type=real) run on the real nodes.
REAL_NODE_TAINT=zonecontrol.k8s.aws/real-node
HOST_OWNER_DIR=/run/zone-aware-controllers
# The cgroup (in every hierarchy) holding each real node's runtime and pods, the nodes' bridges
# and the nftables table: names the teardown removes whatever state directory made them.
NODE_CGROUP=zone-aware-e2e
NAT_TABLE=zone_aware_e2e
# The real nodes' pods (one /24 per zone) and the cluster DNS's Service IP (CoreDNS, up.sh).
POD_CIDR=10.245.0.0/16
CLUSTER_DNS_IP=10.96.0.10
bridge_of() { echo "zae-$1"; }          # zone-a -> zae-zone-a (at most 15 characters)
node_of() { echo "$1-real"; }           # zone-a -> zone-a-real
subnet_of() { # zone-a -> 10.245.1 (the /24 of the zone's pods)
    local i=0 zone
    for zone in "${REAL_ZONES[@]}"; do i=$((i + 1)); [ "$zone" = "$1" ] && { echo "10.245.$i"; return; }; done
}
# Every cgroup hierarchy mounted on this host (v1 controllers and the v2 tree).
cgroup_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts; }

# --- Shared by up.sh and real-nodes.sh ---
write_kubeconfig() { # file user-cert-name
    cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: zonal
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: zonal
  context: {cluster: zonal, user: $2}
current-context: zonal
KUBECONFIG
}

free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

wait_until() { # name timeout-seconds command...
    local name="$1" timeout="$2"; shift 2
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        alive "$name" || die "$name exited during start-up; see $LOGS/$name.log"
        [ $SECONDS -lt $deadline ] || die "$name not healthy after ${timeout}s; see $LOGS/$name.log"
        sleep 0.2
    done
}

node_ip() { # the host's first global IPv4 address: the kubelet refuses a loopback one
    ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1]; exit }'
}

# LocalStack's S3 keeps its objects under this fixed path (not under the state dir): up.sh
# records whether it made it, and down.sh removes it then.
# kwok, the fake kubelets of the nodes annotated kwok.x-k8s.io/node=fake (up.sh; outage.sh
# restarts it to stop or resume managing a zone's nodes).
start_kwok() { # port
    setsid "$KWOK_BIN" --kubeconfig "$STATE/kubeconfig" \
        --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --node-lease-duration-seconds 40 --cidr 10.244.0.0/16 --node-ip 10.255.0.1 \
        --server-address "127.0.0.1:$1" \
        --config "$here/kwok/node-stages.yaml" --config "$STATE/kwok-pod-stages.yaml" \
        >>"$LOGS/kwok.log" 2>&1 </dev/null &
    echo $! >"$PIDS/kwok.pid"
    wait_until kwok 30 curl -fsS "http://127.0.0.1:$1/healthz"
}

LOCALSTACK_S3_DIR=/tmp/localstack-s3-storage
