#!/usr/bin/env bash
# Builds the local zonal cluster's binaries from their Go modules, once, into a cache keyed by
# version, and installs LocalStack into a virtualenv beside them. A warm run only checks that the
# binaries exist.
#
# Each tool is built under an exclusive lock on its cache entry (flock), so two runs at once (CI
# builds everything in the background while `make test` asks for promtool, helm and kubectl) never
# build one tool twice: the second waits for the first and finds the tool built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/versions.sh"
source "$here/heartbeat.sh"

build_k8s() { # [binary...] (default: all six)
    local dir="$ZAC_CACHE/k8s-$K8S_VERSION"
    local missing=() wanted=("$@")
    [ ${#wanted[@]} -gt 0 ] || wanted=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
    for bin in "${wanted[@]}"; do
        [ -x "$dir/$bin" ] || missing+=("$bin")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    mkdir -p "$dir"
    local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
    local ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    # One go build for all of them: their common packages are compiled once and one binary's
    # link overlaps the others' compiles.
    echo "building ${missing[*]} $K8S_VERSION (cold builds take several minutes)"
    rm -rf "$dir/.tmp" && mkdir -p "$dir/.tmp"
    (cd "$here/tools/kubernetes" && go build -trimpath -ldflags "$ldflags" \
        -o "$dir/.tmp/" "${missing[@]/#/k8s.io/kubernetes/cmd/}") >"$dir/build.log" 2>&1 \
        || fail "${missing[*]}" "$dir/build.log"
    for bin in "${missing[@]}"; do mv "$dir/.tmp/$bin" "$dir/$bin"; done
    rmdir "$dir/.tmp"
}

# The -ldflags of a static build whose `--version` (prometheus/common/version) reports the tag
# `tag` (v1.2.3: version 1.2.3, revision v1.2.3) and a fixed build date, the same on every machine.
version_ldflags() { # tag
    local pkg=github.com/prometheus/common/version
    printf '%s' "-s -w -X $pkg.Version=${1#v} -X $pkg.Revision=$1 -X $pkg.Branch=HEAD" \
        " -X $pkg.BuildUser=zone-aware-e2e -X $pkg.BuildDate=19700101-00:00:00"
}

# e2e/cluster/tools/shared: one module, so one version of every dependency its tools share (the
# Kubernetes client libraries, gRPC, protobuf...). Its tools, and etcd's, are built static
# (CGO_ENABLED=0: the same binary runs on the host and in a FROM-scratch image) with trimmed
# paths, so the Go build cache compiles each shared package once for all of them. A cache entry's
# .stamp holds what its binaries were built from besides their version: its module's go.sum (and
# Prometheus's build tags); an entry whose stamp differs is rebuilt.
SHARED="$here/tools/shared"
module_stamp() { # module-dir [extra]
    printf 'go.sum %s%s\n' "$(sha256sum "$1/go.sum" | cut -c1-16)" "${2:+ $2}"
}
module_build() { # module-dir go-build-argument...
    local module="$1"
    shift
    if [ "$module" = "$SHARED" ]; then shared_versions || return 1; fi
    (cd "$module" && CGO_ENABLED=0 go build -trimpath "$@")
}
# The shared module's versions of its tools are versions.sh's (a dependency's requirement could
# raise one without a word from go mod tidy). Prometheus 3.16.0 is the module's v0.316.0.
shared_versions() {
    local want module got major minor patch
    IFS=. read -r major minor patch <<<"$PROMETHEUS_VERSION"
    for want in "github.com/prometheus/prometheus $(printf 'v0.%d%02d.%d' "$major" "$minor" "$patch")" \
        "helm.sh/helm/v3 $HELM_VERSION" "github.com/google/go-jsonnet $JSONNET_VERSION" \
        "sigs.k8s.io/kwok $KWOK_VERSION" "sigs.k8s.io/metrics-server $METRICS_SERVER_VERSION" \
        "github.com/coredns/coredns $COREDNS_VERSION" \
        "github.com/cert-manager/cert-manager $CERT_MANAGER_VERSION"; do
        module="${want% *}"
        got="$(cd "$SHARED" && go list -m -f '{{.Version}}' "$module")" || return 1
        [ "$module $got" = "$want" ] || {
            echo "build.sh: tools/shared/go.mod has $module $got, versions.sh says ${want#* }" >&2
            return 1
        }
    done
}
# Whether the entry dir holds binaries built from stamp (and each of its binaries).
fresh() { # dir stamp binary...
    local dir="$1" stamp="$2"
    shift 2
    [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] || return 1
    for bin in "$@"; do [ -x "$dir/$bin" ] || return 1; done
}

build_simple() { # name version module-dir package
    local name="$1" version="$2" module="$3" pkg="$4" stamp
    local dir="$ZAC_CACHE/$name-$version"
    stamp="$(module_stamp "$module")"
    fresh "$dir" "$stamp" "$name" && return 0
    mkdir -p "$dir"
    echo "building $name $version"
    module_build "$module" -ldflags "-s -w" -o "$dir/$name.tmp" "$pkg" >"$dir/$name.build.log" 2>&1 \
        || fail "$name" "$dir/$name.build.log"
    mv "$dir/$name.tmp" "$dir/$name"
    echo "$stamp" >"$dir/.stamp"
}

# Prometheus and promtool 3: static, for the host and a FROM-scratch image on the real nodes.
# Service discovery: Kubernetes only, besides the static, file and HTTP discovery every build has
# (Prometheus's remove_all_sd / enable_<name>_sd build tags): the configs the shard controller and
# prometheus-operator render use nothing else, and the cloud providers' SDKs the other mechanisms
# pull in were half of a cold build. The tags are part of the entry's stamp.
PROMETHEUS_TAGS="remove_all_sd,enable_kubernetes_sd"
prometheus_ldflags() { # version
    local pkg=github.com/prometheus/common/version
    printf '%s' "-s -w -X $pkg.Version=$1 -X $pkg.Branch=HEAD -X $pkg.BuildDate=19700101-00:00:00"
}
build_prometheus() {
    local version="$PROMETHEUS_VERSION" dir stamp
    dir="$ZAC_CACHE/prometheus-$version"
    stamp="$(module_stamp "$SHARED" "tags $PROMETHEUS_TAGS")"
    fresh "$dir" "$stamp" prometheus promtool && return 0
    # Both in one go build (their common packages compiled once, the links overlapping).
    echo "building prometheus and promtool $version (tags $PROMETHEUS_TAGS; a cold build takes about 4 minutes)"
    rm -rf "$dir/.tmp" && mkdir -p "$dir/.tmp"
    module_build "$SHARED" -tags "$PROMETHEUS_TAGS" -ldflags "$(prometheus_ldflags "$version")" \
        -o "$dir/.tmp/" github.com/prometheus/prometheus/cmd/prometheus \
        github.com/prometheus/prometheus/cmd/promtool >"$dir/build.log" 2>&1 \
        || fail "prometheus and promtool $version" "$dir/build.log"
    mv "$dir/.tmp/prometheus" "$dir/.tmp/promtool" "$dir/"
    rmdir "$dir/.tmp"
    echo "$stamp" >"$dir/.stamp"
}

# Prometheus and promtool 2 (tools/prometheus2), static too. Prometheus 2 has no discovery build
# tags: its service discovery mechanisms are those its plugins/plugins.go imports, a file
# upstream generates from plugins.yml (`make plugins`) for its users to trim. The module as the
# proxy serves it imports all 23 (the AWS, Azure, GCE, OpenStack... SDKs: a third of its compile),
# so it is built from a copy of the module (a `replace` in a copy of our go.mod, as Alertmanager)
# whose plugins.go imports Kubernetes only, as the 3.x build's tags do (file and HTTP are
# plugins/minimum.go's). The plugin list is the entry's stamp.
PROMETHEUS2_PLUGINS="kubernetes"
build_prometheus2() {
    local version="$PROMETHEUS2_VERSION" dir src plugin
    local module=github.com/prometheus/prometheus tools="$here/tools/prometheus2"
    dir="$ZAC_CACHE/prometheus-$version"
    fresh "$dir" "plugins $PROMETHEUS2_PLUGINS" prometheus promtool && return 0
    echo "building prometheus and promtool $version (plugins: $PROMETHEUS2_PLUGINS; a cold build takes about 4 minutes)"
    mkdir -p "$dir"
    {
        src="$(cd "$tools" && go mod download -json "$module" >/dev/null &&
            go list -m -f '{{.Dir}}' "$module")" &&
        rm -rf "$dir/src" "$dir/mod" "$dir/.tmp" && mkdir -p "$dir/mod" "$dir/.tmp" &&
        cp -R "$src" "$dir/src" && chmod -R u+w "$dir/src" &&
        {
            printf '// The service discovery mechanisms of this build (e2e/cluster/build.sh).\npackage plugins\n\nimport (\n'
            for plugin in $PROMETHEUS2_PLUGINS; do
                printf '\t_ "%s/discovery/%s"\n' "$module" "$plugin"
            done
            printf ')\n'
        } >"$dir/src/plugins/plugins.go" &&
        cp "$tools/go.mod" "$tools/go.sum" "$dir/mod/" &&
        printf '\nreplace %s => %s\n' "$module" "$dir/src" >>"$dir/mod/go.mod" &&
        (cd "$tools" && CGO_ENABLED=0 go build -modfile "$dir/mod/go.mod" -trimpath \
            -ldflags "$(prometheus_ldflags "$version")" -o "$dir/.tmp/" \
            "$module/cmd/prometheus" "$module/cmd/promtool")
    } >"$dir/build.log" 2>&1 || fail "prometheus and promtool $version" "$dir/build.log"
    mv "$dir/.tmp/prometheus" "$dir/.tmp/promtool" "$dir/"
    rm -rf "$dir/src" "$dir/mod" "$dir/.tmp"
    echo "plugins $PROMETHEUS2_PLUGINS" >"$dir/.stamp"
}

# metrics-server: static too, for a FROM-scratch image on the real nodes. The metrics API it
# serves (through the aggregation layer) is what a HorizontalPodAutoscaler on CPU reads.
build_metrics_server() {
    local dir="$ZAC_CACHE/metrics-server-$METRICS_SERVER_VERSION" stamp
    stamp="$(module_stamp "$SHARED")"
    fresh "$dir" "$stamp" metrics-server && return 0
    mkdir -p "$dir"
    echo "building metrics-server $METRICS_SERVER_VERSION (a cold build takes several minutes)"
    module_build "$SHARED" -ldflags "-s -w -X k8s.io/client-go/pkg/version.gitVersion=$METRICS_SERVER_VERSION" \
        -o "$dir/metrics-server.tmp" sigs.k8s.io/metrics-server/cmd/metrics-server \
        >"$dir/metrics-server.build.log" 2>&1 || fail metrics-server "$dir/metrics-server.build.log"
    mv "$dir/metrics-server.tmp" "$dir/metrics-server"
    echo "$stamp" >"$dir/.stamp"
}

# prometheus-operator and prometheus-config-reloader: static, the operator to run on the host (the
# oracle of the comparison tests), the reloader for a FROM-scratch image on the real nodes; and the
# CRDs of the same tag. The version ldflags are the operator's own, so it reports its version and
# defaults its reloader image tag from it. About 4 minutes cold on 2 busy cores (an empty Go build
# cache), then cached.
build_prometheus_operator() {
    local dir="$ZAC_CACHE/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION" bin src
    local module=github.com/prometheus-operator/prometheus-operator
    local ldflags
    ldflags="$(version_ldflags "$PROMETHEUS_OPERATOR_VERSION")"
    mkdir -p "$dir"
    if [ ! -x "$dir/prometheus-operator" ] || [ ! -x "$dir/prometheus-config-reloader" ]; then
        # Both in one go build (cmd/operator's binary is named operator).
        echo "building prometheus-operator and prometheus-config-reloader $PROMETHEUS_OPERATOR_VERSION (a cold build of both takes about 4 minutes)"
        rm -rf "$dir/.tmp" && mkdir -p "$dir/.tmp"
        (cd "$here/tools/prometheus-operator" && CGO_ENABLED=0 go build -trimpath \
            -ldflags "$ldflags" -o "$dir/.tmp/" "$module/cmd/operator" \
            "$module/cmd/prometheus-config-reloader") >"$dir/build.log" 2>&1 \
            || fail "prometheus-operator and prometheus-config-reloader" "$dir/build.log"
        mv "$dir/.tmp/operator" "$dir/prometheus-operator"
        mv "$dir/.tmp/prometheus-config-reloader" "$dir/"
        rmdir "$dir/.tmp"
    fi
    [ -f "$dir/crds/.complete" ] && return 0
    src="$(cd "$here/tools/prometheus-operator" && go list -m -f '{{.Dir}}' "$module" 2>"$dir/crds.log")" \
        || fail "the prometheus-operator CRDs" "$dir/crds.log"
    rm -rf "$dir/crds" && mkdir -p "$dir/crds"
    cp "$src"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$dir/crds/" 2>>"$dir/crds.log" \
        || fail "the prometheus-operator CRDs" "$dir/crds.log"
    chmod 644 "$dir"/crds/*.yaml
    touch "$dir/crds/.complete"
}

# Alertmanager: static, for a FROM-scratch image on the real nodes (the alerting tests' receiver
# of the shards' alerts); amtool is not needed. The module as the proxy serves it lacks the web UI's
# built assets (ui/app/dist, made by npm for upstream's releases) that ui/web.go embeds, and the go
# command refuses an -overlay into the module cache: so it is built from a copy of the module (a
# `replace` in a copy of our go.mod) with a one-page placeholder as the UI. The API (/api/v2) is
# whole. 155 s cold on 2 busy cores (an empty Go build cache), then cached.
build_alertmanager() {
    local dir="$ZAC_CACHE/alertmanager-$ALERTMANAGER_VERSION" src
    local module=github.com/prometheus/alertmanager tools="$here/tools/alertmanager"
    [ -x "$dir/alertmanager" ] && return 0
    local ldflags
    ldflags="$(version_ldflags "$ALERTMANAGER_VERSION")"
    mkdir -p "$dir"
    echo "building alertmanager $ALERTMANAGER_VERSION (a cold build takes about 3 minutes)"
    {
        src="$(cd "$tools" && go mod download -json "$module" >/dev/null \
            && go list -m -f '{{.Dir}}' "$module")" &&
        rm -rf "$dir/src" "$dir/mod" && mkdir -p "$dir/mod" && cp -R "$src" "$dir/src" &&
        chmod -R u+w "$dir/src" &&
        mkdir -p "$dir/src/ui/app/dist/elm" "$dir/src/ui/app/dist/mantine" &&
        for ui in elm mantine; do
            printf '%s\n' '<!doctype html><title>Alertmanager</title>' \
                '<p>This build has no web UI; its API is at <a href="api/v2/status">/api/v2</a>.</p>' \
                >"$dir/src/ui/app/dist/$ui/index.html"
        done &&
        cp "$tools/go.mod" "$tools/go.sum" "$dir/mod/" &&
        printf '\nreplace %s => %s\n' "$module" "$dir/src" >>"$dir/mod/go.mod" &&
        (cd "$tools" && CGO_ENABLED=0 go build -modfile "$dir/mod/go.mod" -trimpath \
            -ldflags "$ldflags" -o "$dir/alertmanager.tmp" "$module/cmd/alertmanager")
    } >"$dir/alertmanager.build.log" 2>&1 || fail alertmanager "$dir/alertmanager.build.log"
    mv "$dir/alertmanager.tmp" "$dir/alertmanager"
    rm -rf "$dir/src" "$dir/mod"
}

# CoreDNS: static, for a FROM-scratch image on the real nodes (the cluster DNS Services and the
# Thanos Querier's dnssrv+ lookups resolve through). tools/shared/coredns links only the plugins the
# local cluster's Corefile uses.
build_coredns() {
    local dir="$ZAC_CACHE/coredns-$COREDNS_VERSION" stamp
    stamp="$(module_stamp "$SHARED")"
    fresh "$dir" "$stamp" coredns && return 0
    mkdir -p "$dir"
    echo "building coredns $COREDNS_VERSION (a cold build takes a few minutes)"
    module_build "$SHARED" -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
        -o "$dir/coredns.tmp" ./coredns >"$dir/coredns.build.log" 2>&1 \
        || fail coredns "$dir/coredns.build.log"
    mv "$dir/coredns.tmp" "$dir/coredns"
    echo "$stamp" >"$dir/.stamp"
}

# Thanos: one static binary for the sidecar, query, store and rule (the shards' sidecars and what
# joins the shards again). Built in the module of tools/thanos, which repeats thanos's `replace`
# directives, with the go toolchain of its go line (GOTOOLCHAIN: the proxy serves it) and the
# build tags of thanos's own Makefile (netgo, slicelabels). About 10 minutes cold on 2 busy
# cores, then cached.
build_thanos() {
    local dir="$ZAC_CACHE/thanos-$THANOS_VERSION" toolchain
    [ -x "$dir/thanos" ] && return 0
    toolchain="go$(sed -n 's/^go //p' "$here/tools/thanos/go.mod")"
    local ldflags
    ldflags="$(version_ldflags "$THANOS_VERSION")"
    mkdir -p "$dir"
    echo "building thanos $THANOS_VERSION with $toolchain (a cold build takes about 10 minutes)"
    (cd "$here/tools/thanos" && GOTOOLCHAIN="$toolchain" CGO_ENABLED=0 go build -trimpath \
        -tags netgo,slicelabels -ldflags "$ldflags" -o "$dir/thanos.tmp" \
        github.com/thanos-io/thanos/cmd/thanos) >"$dir/thanos.build.log" 2>&1 \
        || fail thanos "$dir/thanos.build.log"
    mv "$dir/thanos.tmp" "$dir/thanos"
}

# cert-manager's controller and cainjector (the certManager modes' e2e tests run them on the host)
# and its CRDs, rendered by our helm from the chart of the same tag (crds.enabled; the chart's
# placeholder version v0.0.0 replaced by the tag, as cert-manager's release does). The proxy does
# not serve cert-manager's own mains (nested modules): tools/shared/cert-manager holds mains of
# ours over its packages, with the self-signed and CA issuers only. Needs helm (`build.sh cert-manager`
# builds it first). Not in `all`: only the cert_manager suite needs it, and `make e2e` builds it in
# the background while the other suites run (off a cold run's critical path).
build_cert_manager() {
    local dir="$ZAC_CACHE/cert-manager-$CERT_MANAGER_VERSION" src crd stamp
    local module=github.com/cert-manager/cert-manager
    local ldflags="-s -w -X $module/pkg/util.AppVersion=$CERT_MANAGER_VERSION"
    ldflags+=" -X $module/pkg/util.AppGitCommit=$CERT_MANAGER_VERSION"
    mkdir -p "$dir"
    stamp="$(module_stamp "$SHARED")"
    if ! fresh "$dir" "$stamp" controller cainjector; then
        echo "building cert-manager $CERT_MANAGER_VERSION (controller and cainjector; a cold build takes several minutes)"
        rm -rf "$dir/.tmp" && mkdir -p "$dir/.tmp"
        module_build "$SHARED" -ldflags "$ldflags" -o "$dir/.tmp/" ./cert-manager/controller \
            ./cert-manager/cainjector >"$dir/build.log" 2>&1 || fail cert-manager "$dir/build.log"
        mv "$dir/.tmp/controller" "$dir/.tmp/cainjector" "$dir/"
        rmdir "$dir/.tmp"
        echo "$stamp" >"$dir/.stamp"
    fi
    [ -f "$dir/crds.yaml" ] && return 0
    (
        src="$(cd "$SHARED" && go list -m -f '{{.Dir}}' "$module")" &&
        for crd in "$src"/deploy/charts/cert-manager/templates/crd-*.yaml; do
            "$ZAC_CACHE/helm-$HELM_VERSION/helm" template cert-manager \
                "$src/deploy/charts/cert-manager" --set crds.enabled=true \
                --show-only "templates/${crd##*/}" || exit 1
        done | sed "s/v0\.0\.0/$CERT_MANAGER_VERSION/g" >"$dir/crds.yaml.tmp"
    ) 2>"$dir/crds.log" || fail "the cert-manager CRDs" "$dir/crds.log"
    mv "$dir/crds.yaml.tmp" "$dir/crds.yaml"
}

# helm: static (CGO_ENABLED=0), with the version ldflags of helm's own Makefile: `helm version`
# reports the tag (a tagged build: no "unreleased" metadata), and the Kubernetes version `helm
# template` and `helm lint` assume without a cluster is that of the client-go it was built with
# (its Makefile derives it the same way), not the source's fallback v1.20.
build_helm() {
    local dir="$ZAC_CACHE/helm-$HELM_VERSION" client_go version major minor stamp
    stamp="$(module_stamp "$SHARED")"
    fresh "$dir" "$stamp" helm && return 0
    mkdir -p "$dir"
    echo "building helm $HELM_VERSION (a few minutes cold)"
    {
        client_go="$(cd "$SHARED" && go list -m -f '{{.Version}}' k8s.io/client-go)" &&
        version="${client_go#v}" && major=$(( ${version%%.*} + 1 )) &&
        minor="${version#*.}" && minor="${minor%%.*}" &&
        local ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" &&
        ldflags+=" -X helm.sh/helm/v3/internal/version.metadata=" &&
        ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean" &&
        for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
            ldflags+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
        done &&
        module_build "$SHARED" -ldflags "$ldflags" -o "$dir/helm.tmp" helm.sh/helm/v3/cmd/helm
    } >"$dir/helm.build.log" 2>&1 || fail helm "$dir/helm.build.log"
    mv "$dir/helm.tmp" "$dir/helm"
    echo "$stamp" >"$dir/.stamp"
}

# LocalStack (CloudWatch for the ZoneAwareUpdate alarms) in a virtualenv of its own. Pins: newer
# localstack-core needs Python 3.12; the others keep its dependencies compatible.
install_localstack() {
    local venv="$ZAC_CACHE/localstack-$LOCALSTACK_VERSION"
    [ -f "$venv/.installed" ] && return 0
    echo "installing LocalStack $LOCALSTACK_VERSION into $venv"
    rm -rf "$venv"
    { python3 -m venv "$venv" &&
        "$venv/bin/pip" install -q "localstack-core[runtime]==$LOCALSTACK_VERSION" \
            'cbor2<5.7' 'cryptography<44' 'pyopenssl==24.2.1' 'joserfc<1.1' 'service_identity<24.3'
    } >"$ZAC_CACHE/localstack-install.log" 2>&1 \
        || fail "LocalStack $LOCALSTACK_VERSION" "$ZAC_CACHE/localstack-install.log"
    touch "$venv/.installed"
}

fail() {
    echo "cluster build: $1 failed to build; see $2" >&2
    tail -n 5 "$2" >&2 || true
    exit 1
}

locked() { # name command...: runs a build holding the lock of its cache entry
    local name="$1"
    shift
    mkdir -p "$ZAC_CACHE"
    (
        flock 9
        heartbeat "build.sh: $name" "$@"
    ) 9>"$ZAC_CACHE/.$name.lock"
}

# `build.sh` builds everything; `build.sh monitoring` only what `make test` needs to check the
# monitoring mixin (promtool and jsonnet); `build.sh chart` what it needs to check the Helm chart
# against config/ (helm, and kubectl for its kustomize; the helm suite's OCI registry, seconds to
# build) and the cluster's other Kubernetes binaries with kubectl: one go build compiles their
# common packages once (6.1 min cold for the five, against 2.5 min for kubectl alone and 6.2 for
# the other four). `all` builds make test's
# tools first, so a background `build.sh all` has them ready early, and installs LocalStack
# beside the other builds. Thanos is not in `all` (the cluster starts without it): `build.sh
# thanos` builds it, which `make e2e` runs before the suites that need it while the others run
# (.ci/run starts it at the start, at the lowest priority, off the cold run's critical path).
case "${1:-all}" in
monitoring | chart | all) ;;
cluster)
    # What the cluster needs to start (up.sh; `make run`): the control plane, the kubelet and
    # kube-proxy, etcd, kwok, CoreDNS, metrics-server, Prometheus (the shards' image) and
    # LocalStack. The test tools and the other test images' binaries are `all`'s, which `make e2e`
    # builds (and imports) before its suites.
    locked localstack install_localstack &
    localstack=$!
    locked k8s build_k8s
    locked etcd build_simple etcd "$ETCD_VERSION" "$here/tools/etcd" .
    locked kwok build_simple kwok "$KWOK_VERSION" "$SHARED" sigs.k8s.io/kwok/cmd/kwok
    locked coredns build_coredns
    locked metrics-server build_metrics_server
    locked prometheus build_prometheus
    wait "$localstack"
    exit 0
    ;;
thanos)
    locked thanos build_thanos
    exit 0
    ;;
cert-manager)
    locked helm build_helm
    locked cert-manager build_cert_manager
    exit 0
    ;;
*)
    echo "usage: build.sh [all|cluster|monitoring|chart|thanos|cert-manager]" >&2
    exit 2
    ;;
esac
if [ "${1:-all}" != chart ]; then
    locked prometheus build_prometheus
    locked jsonnet build_simple jsonnet "$JSONNET_VERSION" "$SHARED" github.com/google/go-jsonnet/cmd/jsonnet
fi
if [ "${1:-all}" != monitoring ]; then
    locked helm build_helm
    locked registry build_simple registry "$REGISTRY_VERSION" "$here/tools/registry" \
        github.com/google/go-containerregistry/cmd/registry
    locked k8s build_k8s
fi
[ "${1:-all}" = all ] || exit 0
# LocalStack's install mostly waits on downloads: beside the Go builds, not after them.
locked localstack install_localstack &
localstack=$!
locked etcd build_simple etcd "$ETCD_VERSION" "$here/tools/etcd" .
locked kwok build_simple kwok "$KWOK_VERSION" "$SHARED" sigs.k8s.io/kwok/cmd/kwok
locked metrics-server build_metrics_server
locked coredns build_coredns
locked prometheus-operator build_prometheus_operator
locked prometheus2 build_prometheus2
locked alertmanager build_alertmanager
wait "$localstack"
