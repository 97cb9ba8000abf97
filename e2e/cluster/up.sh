#!/usr/bin/env bash
# Starts the local zonal cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
# (real binaries built from their Go modules), kwok running 3 zones x 2 fake nodes, and LocalStack
# for CloudWatch. Everything listens on 127.0.0.1 only. Writes e2e/.cluster/kubeconfig and
# e2e/.cluster/env. A second run while the cluster is healthy reuses it.
#
# With REAL_NODES=1 (the default) it also runs one real node per zone (kubelet + containerd, see
# real-nodes.sh), which needs root.
#
# Env: KWOK_READY_DELAY_MS (default 1000) — how long a scheduled pod takes to become Ready;
# REAL_NODES (default 1) — 0 runs the kwok nodes only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
READY_DELAY_MS="${KWOK_READY_DELAY_MS:-1000}"
REAL_NODES="${REAL_NODES:-1}"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok localstack)
if [ "$REAL_NODES" = 1 ]; then
    for zone in "${REAL_ZONES[@]}"; do COMPONENTS+=("node-$zone"); done
    COMPONENTS+=(kube-proxy)
fi
started=$SECONDS

all_alive() {
    for name in "${COMPONENTS[@]}"; do alive "$name" || return 1; done
}

if [ -f "$STATE/env" ] && all_alive; then
    source "$STATE/env"
    if kubectl get --raw /readyz >/dev/null 2>&1; then
        echo "cluster-up: reusing the running cluster ($E2E_APISERVER)"
        exit 0
    fi
fi
# A partly running cluster is stopped and started afresh.
bash "$here/down.sh" >/dev/null

check_prerequisites() {
    command -v go >/dev/null || die "Go is missing: install a Go toolchain >= 1.25 and put it on PATH"
    command -v python3 >/dev/null || die "python3 is missing: LocalStack needs Python 3.11"
    python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
        || die "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); LocalStack needs Python >= 3.11"
    python3 -c 'import venv, ensurepip' 2>/dev/null \
        || die "python3 cannot create virtual environments: install the python3-venv package"
    command -v openssl >/dev/null || die "openssl is missing: install the openssl package"
    command -v curl >/dev/null || die "curl is missing: install the curl package"
    local need_build=0
    for bin in "$K8S_BIN/kube-apiserver" "$K8S_BIN/kube-controller-manager" \
        "$K8S_BIN/kube-scheduler" "$K8S_BIN/kubectl" "$K8S_BIN/kubelet" "$K8S_BIN/kube-proxy" \
        "$ETCD_BIN" "$KWOK_BIN" "$COREDNS_BIN"; do
        [ -x "$bin" ] || need_build=1
    done
    if [ "$need_build" = 1 ]; then
        local proxy
        proxy="$(go env GOPROXY | cut -d, -f1 | cut -d'|' -f1)"
        case "$proxy" in off | direct | "") ;; *)
            curl -fsS -m 30 -o /dev/null "$proxy/sigs.k8s.io/kwok/@v/list" \
                || die "the Go module proxy $proxy is unreachable; the cluster binaries are built from Go modules" ;;
        esac
    fi
}

# --- PKI: one CA; a serving cert for the API server; client certs per component. ---
sign() { # name subject [san]
    local name="$1" subject="$2" san="${3:-}"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subject" 2>/dev/null
    local ext="$PKI/$name.ext"
    if [ -n "$san" ]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$ext"
    else
        printf 'extendedKeyUsage=clientAuth\n' >"$ext"
    fi
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
        -CAcreateserial -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
}

generate_pki() {
    [ -f "$PKI/done-4" ] && return 0
    rm -rf "$PKI" && mkdir -p "$PKI"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -subj "/CN=zone-aware-e2e-ca" 2>/dev/null
    sign apiserver "/CN=kube-apiserver" \
        "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    sign admin "/O=system:masters/CN=kubernetes-admin"
    sign controller-manager "/CN=system:kube-controller-manager"
    sign scheduler "/CN=system:kube-scheduler"
    # The API server's client certificate for kubelets (logs, exec, port-forward).
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
    # kube-proxy of the real nodes: bound to system:node-proxier by the API server's own policy.
    sign kube-proxy "/CN=system:kube-proxy"
    local zone
    for zone in "${REAL_ZONES[@]}"; do
        sign "node-$zone" "/O=system:nodes/CN=system:node:$(node_of "$zone")"
    done
    # The aggregation layer: a CA of its own for the request-header proxy client.
    client_of_own_ca front-proxy-ca front-proxy-client front-proxy-client
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    # The API server's client certificate for admission webhooks, under a CA of its own: the
    # eviction webhook (--webhook-client-ca-file) judges only callers holding one.
    client_of_own_ca webhook-client-ca webhook-client kube-apiserver-webhook-client
    touch "$PKI/done-4"
}

# A CA of its own, `ca`, and a client certificate `name` (common name `cn`) it signed.
client_of_own_ca() { # ca name cn
    local ca="$1" name="$2" cn="$3"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -keyout "$PKI/$ca.key" -out "$PKI/$ca.crt" -subj "/CN=zone-aware-e2e-$ca" 2>/dev/null
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "/CN=$cn" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >"$PKI/$name.ext"
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" \
        -CAcreateserial -days 3650 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
}

# What the API server presents to admission webhooks: its client certificate, to every webhook
# (the kubeconfig's user "*"). Webhooks that do not ask for one ignore it.
write_admission_config() {
    cat >"$STATE/webhook-client.kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: $PKI/webhook-client.crt
    client-key: $PKI/webhook-client.key
KUBECONFIG
    cat >"$STATE/admission-config.yaml" <<ADMISSION
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $STATE/webhook-client.kubeconfig
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: $STATE/webhook-client.kubeconfig
ADMISSION
}



start() { # name command...
    local name="$1"; shift
    setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
    echo $! >"$PIDS/$name.pid"
}


check_prerequisites
if [ "$REAL_NODES" = 1 ]; then
    bash "$here/real-nodes.sh" prereqs
    bash "$here/real-nodes.sh" claim
fi
bash "$here/build.sh" cluster
mkdir -p "$PIDS" "$LOGS"
generate_pki
write_admission_config
read -r ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT LS_PORT <<<"$(free_ports 7)"
write_kubeconfig "$STATE/kubeconfig" admin
write_kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
write_kubeconfig "$STATE/scheduler.kubeconfig" scheduler
export KUBECONFIG="$STATE/kubeconfig" PATH="$K8S_BIN:$PATH"

rm -rf "$STATE/etcd"
start etcd "$ETCD_BIN" --name zonal --data-dir "$STATE/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "zonal=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls ""
wait_until etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
    --secure-port "$API_PORT" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC --allow-privileged \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --audit-policy-file "$here/audit-policy.yaml" --audit-log-path "$LOGS/audit.log" \
    --audit-log-format json --audit-log-maxsize 200 --audit-log-mode blocking \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --enable-aggregator-routing=true \
    --admission-control-config-file "$STATE/admission-config.yaml" \
    --profiling=false
wait_until kube-apiserver 90 curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"

start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --use-service-account-credentials --service-cluster-ip-range 10.96.0.0/16 \
    --controllers '*,-nodeipam,-cloud-node-lifecycle,-route,-service' \
    --kube-api-qps 200 --kube-api-burst 400 --profiling=false
wait_until kube-controller-manager 60 curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"

start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false \
    --kube-api-qps 200 --kube-api-burst 400 --profiling=false
wait_until kube-scheduler 60 curl -fsSk "https://127.0.0.1:$SCHED_PORT/healthz"

sed "s/@READY_DELAY_MS@/$READY_DELAY_MS/" "$here/kwok/pod-stages.yaml.in" >"$STATE/kwok-pod-stages.yaml"
echo "$KWOK_PORT" >"$STATE/kwok.port"
start_kwok "$KWOK_PORT"

# 3 zones x 2 nodes.
for zone in a b c; do
    for n in 1 2; do
        cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: zone-$zone-node-$n
  annotations: {kwok.x-k8s.io/node: fake}
  labels:
    kubernetes.io/hostname: zone-$zone-node-$n
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: zone-$zone
    type: kwok
---
NODE
    done
done | kubectl apply -f - >/dev/null || die "creating the kwok nodes failed; see $LOGS/kwok.log"
kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null \
    || die "kwok nodes did not become Ready; see $LOGS/kwok.log"

if [ "$REAL_NODES" = 1 ]; then
    API_PORT="$API_PORT" bash "$here/real-nodes.sh" up "$API_PORT"
    # The metrics API (kubectl top, HPAs on CPU). Not waited for: its first metrics take two
    # scrapes; the tests that need them wait.
    sed "s#image: METRICS_SERVER_IMAGE#image: $METRICS_SERVER_IMAGE#" "$here/manifests/metrics-server.yaml" \
        | kubectl apply -f - >/dev/null || die "deploying metrics-server failed"
    # The cluster DNS: waited for, the Thanos Querier's dnssrv+ lookups and the tests' Service
    # names need it.
    sed -e "s#image: COREDNS_IMAGE#image: $COREDNS_IMAGE#" -e "s#CLUSTER_DNS_IP#$CLUSTER_DNS_IP#" \
        "$here/manifests/coredns.yaml" | kubectl apply -f - >/dev/null || die "deploying CoreDNS failed"
    kubectl -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null \
        || die "CoreDNS did not become ready; kubectl -n kube-system describe pods -l k8s-app=kube-dns"
fi

# Host mode with every directory under the state dir: left to itself, LocalStack takes this host
# for a container and writes /etc/localstack, /var/lib/localstack and /tmp/localstack. CloudWatch
# for the controllers on this host; S3, the object store of the shards' Thanos sidecars, also on
# the host's address, which the pods of the real nodes reach.
LS_LISTEN="127.0.0.1:$LS_PORT" LS_POD_ENDPOINT=""
if [ "$REAL_NODES" = 1 ]; then
    LS_POD_ENDPOINT="$(node_ip):$LS_PORT"
    LS_LISTEN+=",$LS_POD_ENDPOINT"
fi
[ -e "$LOCALSTACK_S3_DIR" ] || [ -e "$STATE/localstack-s3-made" ] || touch "$STATE/localstack-s3-made"
RUNTIME_COMPONENTS=aws GATEWAY_LISTEN="$LS_LISTEN" SERVICES=cloudwatch,s3 \
    OVERRIDE_IN_DOCKER=0 FILESYSTEM_ROOT="$STATE/localstack-fs" \
    LOCALSTACK_VOLUME_DIR="$STATE/localstack" DISABLE_EVENTS=1 SKIP_SSL_CERT_DOWNLOAD=1 \
    start localstack "$LOCALSTACK_VENV/bin/python" -m localstack.runtime.main
localstack_ready() {
    python3 - "$LS_PORT" <<'PY'
import json, sys, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/_localstack/health"
state = json.load(urllib.request.urlopen(url, timeout=2)).get("services", {}).get("cloudwatch")
sys.exit(0 if state in ("available", "running") else 1)
PY
}
wait_until localstack 180 localstack_ready

cat >"$STATE/env" <<ENV
# Source this file to use the local zonal cluster.
export KUBECONFIG="$STATE/kubeconfig"
export PATH="$K8S_BIN:\$PATH"
export E2E_APISERVER="https://127.0.0.1:$API_PORT"
export E2E_AUDIT_LOG="$LOGS/audit.log"
export E2E_LOGS="$LOGS"
export E2E_KWOK_READY_DELAY_MS="$READY_DELAY_MS"
export AWS_ENDPOINT_URL="http://127.0.0.1:$LS_PORT"
# LocalStack as the pods of the real nodes reach it (host:port; empty without real nodes).
export E2E_POD_S3_ENDPOINT="$LS_POD_ENDPOINT"
# Tests that stop and restart CloudWatch run their own LocalStack with this interpreter.
export E2E_LOCALSTACK_PYTHON="$LOCALSTACK_VENV/bin/python"
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
# Real nodes (kubelet + containerd), one per zone: label type=real, taint below; local images.
export E2E_REAL_NODES="$REAL_NODES"
export E2E_REAL_NODE_TAINT="$REAL_NODE_TAINT"
export E2E_METRICS_TARGET_IMAGE="$METRICS_TARGET_IMAGE"
export E2E_PROMETHEUS_IMAGE="$PROMETHEUS_IMAGE"
export E2E_PROMETHEUS2_IMAGE="$PROMETHEUS2_IMAGE"
export E2E_CONFIG_RELOADER_IMAGE="$CONFIG_RELOADER_IMAGE"
export E2E_ALERTMANAGER_IMAGE="$ALERTMANAGER_IMAGE"
export E2E_THANOS_IMAGE="$THANOS_IMAGE"
export E2E_PROJECT_IMAGE="$PROJECT_IMAGE"
# The CA of the API server's client certificate for admission webhooks.
export E2E_WEBHOOK_CLIENT_CA="$PKI/webhook-client-ca.crt"
ENV
echo "cluster-up: ready in $((SECONDS - started))s — source e2e/.cluster/env (KUBECONFIG, AWS_ENDPOINT_URL)"
