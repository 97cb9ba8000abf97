# Versions of the local zonal cluster's components and where their builds are cached.
# Bumping a version here makes build.sh build into a new cache directory.
K8S_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
LOCALSTACK_VERSION=4.12.0
# Prometheus 3.16.0 is the Go module tag v0.316.0 (tools/shared/go.mod pins it).
PROMETHEUS_VERSION=3.16.0
# Prometheus 2.55.1, the last 2.x (module tag v0.55.1, tools/prometheus2/go.mod pins it): the
# shards of a ShardedPrometheus with version 2 are tested on it too.
PROMETHEUS2_VERSION=2.55.1
# metrics-server for the HPA tests (tools/shared/go.mod pins it).
METRICS_SERVER_VERSION=v0.9.0
# prometheus-operator and its config reloader, the oracle of the ShardedPrometheus comparison tests
# (tools/prometheus-operator/go.mod pins it).
PROMETHEUS_OPERATOR_VERSION=v0.85.0
# Alertmanager, the receiver of the alerting tests (tools/shared/go.mod pins it).
ALERTMANAGER_VERSION=v0.35.0
# jsonnet (go-jsonnet), which renders the monitoring mixin (tools/shared/go.mod pins it).
JSONNET_VERSION=v0.22.0
# helm, the chart check and the helm e2e test (tools/shared/go.mod pins it).
HELM_VERSION=v3.22.0
# Thanos: the shards' sidecars, the Querier, Store and Ruler (tools/thanos/go.mod pins it).
THANOS_VERSION=v0.42.5
# cert-manager's controller and cainjector and its CRDs, for the e2e tests of the certManager
# modes (tools/shared/go.mod pins it).
CERT_MANAGER_VERSION=v1.21.2
# CoreDNS, the cluster DNS of the real nodes (tools/shared/go.mod pins it).
COREDNS_VERSION=v1.15.0
# go-containerregistry's registry, the OCI registry the helm suite pushes the chart to and installs
# it from (tools/registry/go.mod pins it).
REGISTRY_VERSION=v0.22.1
ZAC_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/zone-aware-controllers"
# The previous release, which the upgrade e2e suite installs and upgrades to the tree
# (previous-release.sh builds it, cached by version): its version, and the commit of main it was
# tagged at. The commit, not the tag, is what the build reads: a clone of main carries its history
# but not necessarily its tags.
PREVIOUS_RELEASE=v0.1.0
PREVIOUS_RELEASE_COMMIT=992347aca52b398b661b676a678ff8b739eb00d6
