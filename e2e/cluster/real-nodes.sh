#!/usr/bin/env bash
# The local zonal cluster's real nodes: one kubelet + containerd (+ runc, CNI bridge) per zone, next
# to the kwok nodes. Needs root. Used by up.sh and down.sh:
#
#   real-nodes.sh prereqs        install what is missing (Debian packages), check root
#   real-nodes.sh claim          take this host's real-node slot, or stop naming who holds it
#   real-nodes.sh up API_PORT    start the nodes, import the test images, wait until Ready
#   real-nodes.sh down           stop them and undo every change they made to the host
#
# What a node is, and what it changes on the host (all undone by `down`):
# - processes: containerd, the kubelet, runc shims and the pods, all in the cgroup
#   /<hierarchy>/zone-aware-e2e/<zone>/ of every hierarchy, which `down` empties and removes;
# - its own mount namespace, where /var/lib, /var/log and /run are the node's directories under
#   e2e/.cluster/nodes/<zone>/: the kubelet and containerd write to fixed paths there
#   (/var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni, /run/containerd), so
#   three of them never meet, and nothing they write lands on the host's own paths. The namespace
#   (and every mount the kubelet makes in it) ends with its last process;
# - a bridge zae-<zone> with the zone's pod subnet 10.245.<n>.0/24 (route_localnet on, so a NAT to
#   127.0.0.1 works), net.ipv4.ip_forward=1 (pods reach pods of other zones), and an nftables
#   table zone_aware_e2e sending the API server's service IP 10.96.0.1:443 to its 127.0.0.1 port
#   (before kube-proxy's rules: the API server's endpoint is its loopback address, which no
#   Service rule may name); pods use the in-cluster config unchanged;
# - kube-proxy (nftables mode, in the cgroup /<hierarchy>/zone-aware-e2e/proxy/): one for the
#   three nodes, which share the host's network namespace. It routes every Service IP, from pods
#   and from the host, through its tables `ip kube-proxy` and `ip6 kube-proxy`, masquerading all
#   of it (pods of one bridge reach each other through a Service that way without br_netfilter).
#   Its conntrack tunables are left as they are (0 in its configuration), NodePorts only on the
#   bridges' addresses. The cluster DNS is CoreDNS, a Deployment on these nodes (up.sh applies
#   manifests/coredns.yaml); the kubelets give pods its Service IP;
# - the kubelet's kernel tunables (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops,
#   kernel.keys.root_max*): their values before are kept and restored;
# - /run/zone-aware-controllers/: which cluster owns the real nodes, and the saved sysctls.
# The kubelet's own iptables chains are off (makeIPTablesUtilChains: false): no iptables at all.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

# The kubelet writes the last five when it starts; net.ipv4.ip_forward is ours, and writing it
# also sets the forwarding and accept_redirects of conf/all and conf/default. Restored in this
# order, ip_forward first.
SYSCTLS=(net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding
    net.ipv4.conf.all.accept_redirects net.ipv4.conf.default.accept_redirects
    vm.overcommit_memory kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# dnsmasq-base: the real DNS server of the federator's e2e tests of DNS-named backends (no
# service of its own: the tests start and stop it).
PACKAGES=(containerd runc containernetworking-plugins nftables dnsmasq-base)

prereqs() {
    mkdir -p "$ZAC_CACHE"
    [ "$(id -u)" = 0 ] || die "real nodes need root (kubelet, containerd, mounts, nftables); run as root or set REAL_NODES=0"
    local missing=()
    command -v containerd >/dev/null || missing+=(containerd)
    command -v runc >/dev/null || missing+=(runc)
    [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
    command -v nft >/dev/null || missing+=(nftables)
    command -v dnsmasq >/dev/null || missing+=(dnsmasq-base)
    if [ ${#missing[@]} -gt 0 ]; then
        echo "cluster-up: installing ${missing[*]} (Debian packages) for the real nodes"
        { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            --no-install-recommends "${PACKAGES[@]}"; } >"$ZAC_CACHE/apt-real-nodes.log" 2>&1 \
            || die "installing ${missing[*]} failed; see $ZAC_CACHE/apt-real-nodes.log"
    fi
    command -v unshare >/dev/null || die "unshare is missing: install util-linux"
    command -v gcc >/dev/null || die "gcc is missing: the pause image is built from C (install gcc)"
}

# Processes in the node cgroup: the ground truth of "real nodes run on this host".
node_tasks() {
    local dir
    for dir in $(cgroup_mounts); do
        if [ -d "$dir/$NODE_CGROUP" ]; then
            find "$dir/$NODE_CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null || true
        fi
    done | sort -u
}

claim() {
    local owner=""
    [ -f "$HOST_OWNER_DIR/owner" ] && owner="$(cat "$HOST_OWNER_DIR/owner")"
    if [ -n "$owner" ] && [ "$owner" != "$STATE" ] && [ -n "$(node_tasks)" ]; then
        die "the real nodes of the cluster in $owner are running on this host (they share fixed host paths); run 'make cluster-down' in $(dirname "$(dirname "$owner")") first"
    fi
    if [ -n "$owner" ] || [ -n "$(node_tasks)" ]; then
        # Ours from an earlier run, or a stale claim whose nodes are gone: clean up after it.
        down >/dev/null
    fi
    mkdir -p "$HOST_OWNER_DIR"
    echo "$STATE" >"$HOST_OWNER_DIR/owner"
}

save_sysctls() {
    [ -f "$HOST_OWNER_DIR/sysctl.saved" ] && return 0
    local name
    for name in "${SYSCTLS[@]}"; do
        [ -e "/proc/sys/${name//.//}" ] && echo "$name=$(cat "/proc/sys/${name//.//}")"
    done >"$HOST_OWNER_DIR/sysctl.saved"
}

make_cgroups() { # zone
    local dir path
    for dir in $(cgroup_mounts); do
        for path in "$NODE_CGROUP" "$NODE_CGROUP/$1" "$NODE_CGROUP/$1/runtime"; do
            mkdir -p "$dir/$path"
            # A new v1 cpuset has no CPUs or memory nodes until given its parent's.
            if [ -f "$dir/$path/cpuset.cpus" ] && [ -z "$(cat "$dir/$path/cpuset.cpus")" ]; then
                cat "$(dirname "$dir/$path")/cpuset.cpus" >"$dir/$path/cpuset.cpus"
                cat "$(dirname "$dir/$path")/cpuset.mems" >"$dir/$path/cpuset.mems"
            fi
        done
    done
}

network() { # api-port
    sysctl -qw net.ipv4.ip_forward=1
    local zone bridge
    for zone in "${REAL_ZONES[@]}"; do
        bridge="$(bridge_of "$zone")"
        ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
        ip addr replace "$(subnet_of "$zone").1/24" dev "$bridge"
        ip link set "$bridge" up
        sysctl -qw "net.ipv4.conf.$bridge.route_localnet=1"
    done
    # A table of our own (nft): deleting it at the end removes every rule and hook it added.
    nft delete table ip "$NAT_TABLE" 2>/dev/null || true
    nft -f - <<NFT
table ip $NAT_TABLE {
    chain prerouting {
        type nat hook prerouting priority dstnat - 10; policy accept;
        iifname "zae-*" ip daddr 10.96.0.1 tcp dport 443 dnat to 127.0.0.1:$1
    }
}
NFT
}

write_node_config() { # zone kubelet-port healthz-port node-ip
    local zone="$1" port="$2" healthz="$3" ip="$4" dir="$NODES/$1"
    local node bridge subnet
    node="$(node_of "$zone")" bridge="$(bridge_of "$zone")" subnet="$(subnet_of "$zone")"
    mkdir -p "$dir/cni" "$dir/root/var/lib" "$dir/root/var/log" "$dir/root/run" "$dir/containerd"
    [ ${#dir} -lt 90 ] || die "state path $dir is too long for containerd's socket (unix sockets: 107 bytes)"
    cat >"$dir/containerd.toml" <<TOML
version = 2
root = "$dir/containerd"
state = "/run/containerd"
# Plugins that would write outside the node's directories, or that are never used here.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$dir/containerd.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # These VMs lack CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
TOML
    cat >"$dir/cni/10-$bridge.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$subnet.0/24", "gateway": "$subnet.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
JSON
    cat >"$dir/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$dir/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$NODE_CGROUP/$zone
cgroupsPerQOS: true
# A cgroup v1 host: allowed, with a warning, until Kubernetes 1.36.
failCgroupV1: false
failSwapOn: false
# No KUBE-FIREWALL / canary chains on the host's iptables.
makeIPTablesUtilChains: false
# Images are imported locally and cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
maxPods: 40
resolvConf: /etc/resolv.conf
clusterDNS: [$CLUSTER_DNS_IP]
clusterDomain: cluster.local
registerWithTaints:
- {key: $REAL_NODE_TAINT, value: "true", effect: NoSchedule}
nodeStatusReportFrequency: 1m
shutdownGracePeriod: 0s
YAML
    write_kubeconfig "$dir/kubeconfig" "node-$zone"
    : "$node"
}

start_node() { # zone node-ip
    local zone="$1" ip="$2" dir="$NODES/$1"
    make_cgroups "$zone"
    setsid unshare --mount --propagation private -- \
        bash "$here/node-ns.sh" "$dir" "$NODE_CGROUP/$zone/runtime" \
        "$K8S_BIN/kubelet" --config "$dir/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
        --hostname-override "$(node_of "$zone")" --node-ip "$ip" \
        --node-labels "topology.kubernetes.io/zone=$zone,type=real" \
        >"$LOGS/node-$zone.log" 2>&1 </dev/null &
    echo $! >"$PIDS/node-$zone.pid"
}

# kube-proxy on the host for all the real nodes (their pods share the host's network namespace
# through the bridges), in a cgroup of the nodes so that `down` stops it with them.
start_proxy() { # healthz-port metrics-port
    local dir="$NODES/proxy"
    mkdir -p "$dir"
    make_cgroups proxy
    write_kubeconfig "$dir/kubeconfig" kube-proxy
    cat >"$dir/config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $dir/kubeconfig}
hostnameOverride: $(node_of "${REAL_ZONES[0]}")
clusterCIDR: $POD_CIDR
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:$1
metricsBindAddress: 127.0.0.1:$2
nftables: {masqueradeAll: true}
nodePortAddresses: [$POD_CIDR]
# 0: leave the host's conntrack tunables alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
    setsid bash -c 'for h in $(awk '"'"'$3 == "cgroup" || $3 == "cgroup2" { print $2 }'"'"' /proc/mounts); do
            echo $$ >"$h/$1/cgroup.procs"; done; shift; exec "$@"' \
        proxy "$NODE_CGROUP/proxy" "$K8S_BIN/kube-proxy" --config "$dir/config.yaml" \
        >"$LOGS/kube-proxy.log" 2>&1 </dev/null &
    echo $! >"$PIDS/kube-proxy.pid"
}

up() { # api-port
    local api_port="$1" ip zone ports
    API_PORT="$api_port"
    export KUBECONFIG="$STATE/kubeconfig" PATH="$K8S_BIN:$PATH"
    case "$STATE/" in /var/lib/* | /var/log/* | /run/*)
        die "the state dir $STATE is under a path each node replaces (/var/lib, /var/log, /run): use a checkout elsewhere" ;;
    esac
    # The kubelets report DiskPressure and admit no pod below 1% free (evictionHard); the suites
    # then import images and write logs, and builds beside them take more. Short of that plus
    # 4 GiB, refuse with the figures instead of pods that never start.
    local size avail need
    read -r size avail < <(df -Pk "$STATE" | awk 'NR == 2 {print $2, $4}')
    need=$((size / 100 + 4 * 1024 * 1024))
    [ "${avail:-0}" -ge "$need" ] || die "only $((${avail:-0} / 1048576)) GiB free on the filesystem of $STATE, the real nodes need $((need / 1048576)) GiB (their kubelets admit no pod below 1% free): free some space (cargo target dirs and the Go build cache are the usual large ones)"
    ip="$(node_ip)"
    [ -n "$ip" ] || die "no global IPv4 address on this host for the real nodes (the kubelet refuses 127.0.0.1)"
    save_sysctls
    network "$api_port"
    bash "$here/images.sh" test-images
    for zone in "${REAL_ZONES[@]}"; do
        read -r -a ports <<<"$(free_ports 2)"
        write_node_config "$zone" "${ports[0]}" "${ports[1]}" "$ip"
        start_node "$zone" "$ip"
    done
    for zone in "${REAL_ZONES[@]}"; do
        wait_until "node-$zone" 60 test -S "$NODES/$zone/containerd.sock"
        # The test images built so far (cluster-up builds only what the cluster needs; make e2e
        # imports the rest).
        local tars=() tar
        for tar in "${TEST_IMAGE_TARS[@]}"; do [ -f "$tar" ] && tars+=("$tar"); done
        bash "$here/images.sh" import "$zone" "${tars[@]}"
    done
    for zone in "${REAL_ZONES[@]}"; do
        wait_until "node-$zone" 120 kubectl wait --for=condition=Ready "node/$(node_of "$zone")" --timeout=2s
    done
    read -r -a ports <<<"$(free_ports 2)"
    start_proxy "${ports[0]}" "${ports[1]}"
    wait_until kube-proxy 60 curl -fsS "http://127.0.0.1:${ports[0]}/healthz"
}

down() {
    local pass pids zone name dir bridge link
    for zone in "${REAL_ZONES[@]}"; do rm -f "$PIDS/node-$zone.pid"; done
    rm -f "$PIDS/kube-proxy.pid"
    # A zone left dark (outage.sh) first: frozen processes cannot die, a blackhole route stays.
    bash "$here/outage.sh" restore-all
    # Everything a node started is in its cgroup: the kubelet and containerd first get TERM, then
    # whatever is left (shims, pods) KILL, until the cgroups are empty.
    for pass in $(seq 1 60); do
        pids="$(node_tasks)"
        [ -z "$pids" ] && break
        if [ "$pass" -le 20 ]; then kill -TERM $pids 2>/dev/null || true; else kill -KILL $pids 2>/dev/null || true; fi
        sleep 0.25
    done
    [ -z "$(node_tasks)" ] || echo "cluster-down: processes left in the $NODE_CGROUP cgroup: $(node_tasks | tr '\n' ' ')" >&2
    for dir in $(cgroup_mounts); do
        if [ -d "$dir/$NODE_CGROUP" ]; then
            find "$dir/$NODE_CGROUP" -depth -type d -exec rmdir {} + 2>/dev/null || true
        fi
    done
    for zone in "${REAL_ZONES[@]}"; do
        bridge="$(bridge_of "$zone")"
        # A pod's veth goes with its network namespace, which the kernel can keep after the pod's
        # last process (a socket still closing holds it): delete the host ends on the bridge.
        for link in $(ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
            ip link del "$link" 2>/dev/null || true
        done
        ip link del "$bridge" 2>/dev/null || true
    done
    nft delete table ip "$NAT_TABLE" 2>/dev/null || true
    # kube-proxy's tables (it leaves them behind when stopped, as it does on a node).
    nft delete table ip kube-proxy 2>/dev/null || true
    nft delete table ip6 kube-proxy 2>/dev/null || true
    if [ -f "$HOST_OWNER_DIR/sysctl.saved" ]; then
        while IFS='=' read -r name value; do
            sysctl -qw "$name=$value" || true
        done <"$HOST_OWNER_DIR/sysctl.saved"
    fi
    rm -rf "$HOST_OWNER_DIR"
    # The nodes' files (images, pod volumes, logs) live in the state dir; start afresh next time.
    # Their mounts were in the nodes' own namespaces, gone with their last process.
    [ -n "$(node_tasks)" ] || rm -rf "$NODES"
    echo "cluster-down: real nodes stopped, host changes undone"
}

case "${1:-}" in
prereqs) prereqs ;;
claim) claim ;;
up) up "${2:?api port}" ;;
down) down ;;
*) echo "usage: $0 prereqs|claim|up API_PORT|down" >&2; exit 2 ;;
esac
