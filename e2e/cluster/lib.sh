# Shared by up.sh and down.sh: paths of the running cluster's state.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/versions.sh"
STATE="$(cd "$here/.." && pwd)/.cluster"
PIDS="$STATE/pids"
LOGS="$STATE/logs"
PKI="$STATE/pki"
K8S_BIN="$ZAC_CACHE/k8s-$K8S_VERSION"
ETCD_BIN="$ZAC_CACHE/etcd-$ETCD_VERSION/etcd"
KWOK_BIN="$ZAC_CACHE/kwok-$KWOK_VERSION/kwok"
LOCALSTACK_VENV="$ZAC_CACHE/localstack-$LOCALSTACK_VERSION"

die() { echo "cluster-up: $*" >&2; exit 1; }

# Whether the process recorded in pids/<name>.pid is alive.
alive() {
    local pid_file="$PIDS/$1.pid"
    [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}
