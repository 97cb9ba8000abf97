#!/usr/bin/env bash
# A whole zone of the local cluster going dark, and coming back: what a zone outage looks like to
# the control plane and to every pod outside the zone. Needs the cluster from up.sh (root, real
# nodes).
#
#   outage.sh down ZONE     every node of ZONE stops at once
#   outage.sh up ZONE       they come back
#   outage.sh status        the zones that are down now, one per line
#
# Down, for the zone's real node: every process in its cgroup (the kubelet, containerd, the shims
# and the pods) is frozen (cgroup v1 freezer), its bridge is set down and its pod subnet routed to
# a blackhole, so nothing reaches its pods and nothing leaves them: connections time out, as they
# do across a partition. For its kwok nodes: kwok stops managing them (their annotation no longer
# matches kwok's selector, and kwok restarts to forget them, a second's pause for the other
# zones' fake kubelets), so their Leases and statuses go stale like a stopped kubelet's. The node
# lifecycle controller then does what it does on any cluster: after its grace period (50 s) the
# nodes are NotReady, tainted unreachable, their pods not Ready; after the pods' toleration (300 s
# by default) it evicts them.
#
# Up: the real node thaws (the kubelet renews its Lease and reports its pods again) and its
# network returns; the kwok nodes are managed again, and the pods on them that are still there
# and not being deleted report Ready again, as a reconnected kubelet's running pods do (kwok's
# own stages only make Pending pods Ready).
#
# `make cluster-down` thaws and reconnects every zone before it stops the nodes (real-nodes.sh
# down), so an outage left behind by a failed test is undone like the rest.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export KUBECONFIG="$STATE/kubeconfig" PATH="$K8S_BIN:$PATH"
DOWN_DIR="$STATE/outage"

say() { echo "outage: $*"; }

freezer_of() { # zone: the v1 freezer cgroup of the zone's real node, if the host has one
    local dir
    dir="$(awk '$3 == "cgroup" && $4 ~ /(^|,)freezer(,|$)/ { print $2; exit }' /proc/mounts)"
    [ -n "$dir" ] || die "no cgroup v1 freezer on this host: a zone outage needs it"
    echo "$dir/$NODE_CGROUP/$1"
}

kwok_nodes() { # zone
    kubectl get nodes -l "topology.kubernetes.io/zone=$1,type=kwok" -o name
}

restart_kwok() {
    if alive kwok; then
        local pid
        pid="$(cat "$PIDS/kwok.pid")"
        kill -TERM "$pid"
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    start_kwok "$(cat "$STATE/kwok.port")"
}

real_down() { # zone
    local zone="$1" freezer bridge subnet
    freezer="$(freezer_of "$zone")" bridge="$(bridge_of "$zone")" subnet="$(subnet_of "$zone")"
    [ -d "$freezer" ] || die "$zone has no real node running (no $freezer)"
    echo FROZEN >"$freezer/freezer.state"
    for _ in $(seq 1 100); do
        [ "$(cat "$freezer/freezer.state")" = FROZEN ] && break
        sleep 0.1
    done
    [ "$(cat "$freezer/freezer.state")" = FROZEN ] || die "$zone's processes did not freeze"
    ip link set "$bridge" down
    ip route replace blackhole "$subnet.0/24"
}

real_up() { # zone
    local zone="$1" freezer bridge subnet
    freezer="$(freezer_of "$zone")" bridge="$(bridge_of "$zone")" subnet="$(subnet_of "$zone")"
    ip route del blackhole "$subnet.0/24" 2>/dev/null || true
    if ip link show "$bridge" >/dev/null 2>&1; then
        ip link set "$bridge" up
        ip addr replace "$subnet.1/24" dev "$bridge"
    fi
    [ -f "$freezer/freezer.state" ] && echo THAWED >"$freezer/freezer.state"
    return 0
}

# The pods of the zone's kwok nodes that are running and not Ready: Ready again.
kwok_pods_ready() { # zone
    local node pod
    for node in $(kwok_nodes "$1"); do
        kubectl get pods -A --field-selector "spec.nodeName=${node#node/},status.phase=Running" \
            -o jsonpath='{range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}' |
            while read -r pod deleting; do
                [ -z "$deleting" ] || continue
                kubectl -n "${pod%%/*}" patch pod "${pod#*/}" --subresource=status --type=strategic \
                    -p '{"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"ContainersReady","status":"True"}]}}' \
                    >/dev/null 2>&1 || true
            done
    done
}

down() { # zone
    local zone="$1"
    mkdir -p "$DOWN_DIR"
    [ -f "$DOWN_DIR/$zone" ] && { say "$zone is already down"; return 0; }
    date -u +%FT%TZ >"$DOWN_DIR/$zone"
    # Both halves at once: the kwok nodes first (a restart of kwok), then the real node.
    kwok_nodes "$zone" | xargs -r -I{} kubectl annotate --overwrite {} kwok.x-k8s.io/node=dark >/dev/null
    restart_kwok
    [ "$REAL_NODES" = 1 ] && real_down "$zone"
    say "$zone is dark: its real node frozen and cut off, its kwok nodes unmanaged"
}

up() { # zone
    local zone="$1"
    [ "$REAL_NODES" = 1 ] && real_up "$zone"
    kwok_nodes "$zone" | xargs -r -I{} kubectl annotate --overwrite {} kwok.x-k8s.io/node=fake >/dev/null
    restart_kwok
    kwok_pods_ready "$zone"
    rm -f "$DOWN_DIR/$zone"
    say "$zone is back"
}

# Every zone up again, for cluster-down (no kubectl: the API server may be gone already).
restore_all() {
    local zone
    for zone in "${REAL_ZONES[@]}"; do real_up "$zone" 2>/dev/null || true; done
    rm -rf "$DOWN_DIR"
}

REAL_NODES=0
[ -f "$HOST_OWNER_DIR/owner" ] && [ "$(cat "$HOST_OWNER_DIR/owner")" = "$STATE" ] && REAL_NODES=1
case "${1:-}" in
down) down "${2:?zone}" ;;
up) up "${2:?zone}" ;;
status) [ -d "$DOWN_DIR" ] && ls "$DOWN_DIR" ;;
restore-all) restore_all ;;
*) echo "usage: $0 down ZONE | up ZONE | status | restore-all" >&2; exit 2 ;;
esac
