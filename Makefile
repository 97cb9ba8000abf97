# zone-aware-controllers — developer entry points. `make help` lists them.
#
# The two commands of the README:
#   make run    bring up the local zonal cluster and the controllers against it
#   make test   what CI runs first: format, lints, CRD drift, unit + property tests

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
CARGO ?= cargo
# The controller binaries (bins/<name>/), one a line in bins.txt: what `make run` builds and
# starts, `make image` and the Dockerfile pack, `make build-static` checks. The kubectl plugins
# (bins/<name>/ too) are listed in plugins.txt; the image holds them too.
BINS := $(shell cat bins.txt)
# The git commit the release binaries report as <binary>_build_info{revision} ("unknown" outside
# a git checkout). Given to the image and static builds only: in every build it would recompile
# the runtime crate at each commit.
ZONE_AWARE_REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
# E2E_SUITE=<file> runs one suite, e2e/tests/<file>.rs (alerting, cert_manager, crd_validation, deploy, deploy_local, federator, federator_security, federator_thanos, helm, install, monitoring, oracle, sharding, smoke, sprom, sprom_health, tenancy, thanos, thanos_rules, upgrade, zau, zau_gate, zdb, zone_outage).
E2E_SUITE ?=
# E2E_FILTER=<substring> runs only the e2e tests whose function name contains it (in every suite,
# or in E2E_SUITE's).
E2E_FILTER ?=
# E2E_THREADS bounds parallel e2e tests: they share one small control plane on 2 cores.
E2E_THREADS ?= 2
# E2E_SKIP lists e2e tests left out of `make e2e` (substrings, e.g. E2E_SKIP=zau_leader).
E2E_SKIP ?=
# E2E_LANES suites run at once (e2e/run_suites.py): they mostly wait on the cluster. The suites
# of E2E_EXCLUSIVE install the whole project (cluster-wide webhooks and ClusterRoles, fixed
# namespaces) or run a controller over every namespace (oracle, tenancy: it would act on the
# other suites' resources too) or load the API server for minutes (cert_manager: a stream of
# evictions through every renewal, which delays the timed suites beside it) or take a zone of the
# cluster down (zone_outage), and run last, each alone.
E2E_LANES ?= 2
E2E_EXCLUSIVE ?= oracle tenancy deploy deploy_local helm install upgrade cert_manager zone_outage
# E2E_IMAGE_SUITES run the project's image on the real nodes besides the exclusive ones: they wait
# for it, which `make e2e` builds while the other suites run.
E2E_IMAGE_SUITES ?= monitoring
# E2E_THANOS_SUITES run Thanos: they wait for its build and image (E2E_THANOS_CMD). `e2e` is the
# harness's own unit tests (one runs a Querier over two sidecars).
E2E_THANOS_SUITES ?= thanos thanos_rules federator_thanos zone_outage e2e
# E2E_TEST_TOOLS_SUITES run the tests' own tools (prometheus-operator, its CRDs and its config
# reloader, Prometheus 2, Alertmanager): they wait for their builds and images
# (E2E_TEST_TOOLS_CMD), which `make e2e` runs while the other suites go ahead.
E2E_TEST_TOOLS_SUITES ?= alerting federator monitoring oracle sharding sprom tenancy thanos_rules zau_gate zone_outage
# PERF=<substring> runs only the matching e2e/perf/*.sh measurements.
PERF ?=

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

##@ Build and test (no cluster needed)

.PHONY: build
build: ## Build every crate and binary (debug)
	$(CARGO) build --workspace --all-targets

.PHONY: fmt
fmt: ## Format the code
	$(CARGO) fmt --all

.PHONY: fmt-check
fmt-check: ## cargo fmt --check
	$(CARGO) fmt --all -- --check

.PHONY: lint
lint: fmt-check ## cargo fmt --check and clippy with warnings denied (a check build: no tests run)
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The test builds (`make unit`, `make e2e`) compile the workspace's own crates with clippy's driver
# and its lints, warnings denied, as `cargo clippy` does (CLIPPY_ARGS is how it passes them): the
# lints come with the build the tests need instead of a separate check build of every dependency
# (about 4 minutes cold on 2 cores). The dependencies are compiled by rustc as before. Every build
# of the same selection must carry it, or cargo recompiles the workspace's crates.
CLIPPY_DRIVER := $(shell rustc --print sysroot 2>/dev/null)/bin/clippy-driver
LINTED := RUSTC_WORKSPACE_WRAPPER='$(CLIPPY_DRIVER)' CLIPPY_ARGS='-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__'

# The Helm chart installs the same CRDs from its crds/ (copies: a chart is packaged alone).
CHART := charts/zone-aware-controllers
CRD_FILES = $(wildcard config/crd/zonecontrol.k8s.aws_*.yaml)

.PHONY: crds
crds: ## Regenerate config/crd/ from the Rust types, and the chart's copies in crds/
	$(CARGO) run --quiet -p zone-api --bin crdgen -- --out config/crd
	rm -f $(CHART)/crds/*.yaml
	cp $(CRD_FILES) $(CHART)/crds/

.PHONY: crds-check
crds-check: chart-crds-check ## Fail when config/crd/ drifted from the Rust types, or the chart's crds/ from config/crd/
	$(CARGO) run --quiet -p zone-api --bin crdgen -- --out config/crd --check

.PHONY: chart-crds-check
chart-crds-check: ## Fail when the chart's crds/ drifted from config/crd/
	@diff -r --exclude=kustomization.yaml config/crd $(CHART)/crds >/dev/null || { echo "crds-check: $(CHART)/crds/ is not config/crd/: run \`make crds\`" >&2; exit 1; }

.PHONY: unit
unit: ## Unit and property tests of the whole workspace, built with clippy's lints (warnings denied)
	@[ -x '$(CLIPPY_DRIVER)' ] || { echo "unit: clippy is missing ($(CLIPPY_DRIVER)): rustup component add clippy" >&2; exit 1; }
	$(LINTED) $(CARGO) build --workspace --all-targets
	$(LINTED) $(CARGO) test --workspace

.PHONY: bins-check
bins-check: ## Fail when bins.txt (controllers) and plugins.txt (kubectl plugins) disagree with bins/
	@listed="$$(cat bins.txt plugins.txt | sort | tr '\n' ' ')"; \
	present="$$(for dir in bins/*/; do basename "$$dir"; done | sort | tr '\n' ' ')"; \
	[ "$$listed" = "$$present" ] || { echo "bins-check: bins.txt and plugins.txt list: $$listed; bins/ holds: $$present" >&2; exit 1; }

##@ Monitoring mixin (monitoring/: alerts, recording rules, dashboards)

# jsonnet and promtool, built from their Go modules and cached by version (e2e/cluster/build.sh).
TOOLS_CACHE := $(shell source e2e/cluster/versions.sh && echo "$$ZAC_CACHE")
JSONNET = $(TOOLS_CACHE)/jsonnet-$(shell source e2e/cluster/versions.sh && echo "$$JSONNET_VERSION")/jsonnet
PROMTOOL = $(TOOLS_CACHE)/prometheus-$(shell source e2e/cluster/versions.sh && echo "$$PROMETHEUS_VERSION")/promtool

.PHONY: monitoring-tools
monitoring-tools: ## Build (cached) jsonnet and promtool
	bash e2e/cluster/build.sh monitoring

.PHONY: mixin
mixin: monitoring-tools ## Render the mixin: monitoring/generated/ and config/monitoring/prometheus-rule.yaml (and the chart's copy)
	$(JSONNET) -J monitoring -c -m . -S monitoring/render.jsonnet >/dev/null
	cp config/monitoring/prometheus-rule.yaml $(CHART)/files/prometheus-rule.yaml

.PHONY: mixin-check
mixin-check: monitoring-tools ## The rendered mixin is up to date, its rules and dashboard queries parse, its promtool tests pass
	@out="$$(mktemp -d)"; trap 'rm -rf "$$out"' EXIT; \
	$(JSONNET) -J monitoring -c -m "$$out" -S monitoring/render.jsonnet >/dev/null; \
	for file in $$(cd "$$out" && find . -type f | sort); do \
		cmp -s "$$out/$$file" "$$file" || { echo "mixin-check: $${file#./} is not what monitoring/ renders: run \`make mixin\`" >&2; exit 1; }; \
	done; \
	stale="$$(comm -13 <(cd "$$out" && find monitoring/generated -type f | sort) <(find monitoring/generated -type f | sort))"; \
	[ -z "$$stale" ] || { echo "mixin-check: not rendered by monitoring/ any more: $$stale" >&2; exit 1; }; \
	! grep -rn '%([a-zA-Z]*)' monitoring/generated || { echo "mixin-check: a %(name) placeholder left unformatted in monitoring/generated (a string without % c)" >&2; exit 1; }; \
	$(JSONNET) -J monitoring monitoring/dashboard-queries.jsonnet >"$$out/dashboard-queries.json"; \
	$(PROMTOOL) check rules monitoring/generated/alerts.yaml monitoring/generated/rules.yaml "$$out/dashboard-queries.json"; \
	$(PROMTOOL) test rules monitoring/generated/tests.yaml

##@ Helm chart (charts/zone-aware-controllers: the same objects as config/, docs/helm.md)

HELM = $(TOOLS_CACHE)/helm-$(shell source e2e/cluster/versions.sh && echo "$$HELM_VERSION")/helm
# The cluster's kubectl (its kustomize renders config/), built from the same cache as the cluster.
CHART_KUBECTL = $(TOOLS_CACHE)/k8s-$(shell source e2e/cluster/versions.sh && echo "$$K8S_VERSION")/kubectl

.PHONY: chart-tools
chart-tools: ## Build (cached) helm, kubectl (and with it the cluster's other Kubernetes binaries)
	bash e2e/cluster/build.sh chart

.PHONY: chart-check
chart-check: chart-tools ## The chart renders what config/ renders, object by object (defaults, and every option of make deploy); helm lint
	python3 mk/values-schema.py --check
	$(HELM) lint --strict $(CHART)
	python3 mk/chart-check.py --helm $(HELM) --kubectl $(CHART_KUBECTL)

.PHONY: chart-schema
chart-schema: ## Write the chart's values.schema.json from values.yaml (its comments are the descriptions)
	python3 mk/values-schema.py

# Every object a released version stored (its samples, the goldens' inputs, fixtures and
# documented examples, snapshotted by mk/compat-snapshot.py into crates/api/tests/compat/<tag>)
# still validates under config/crd, as the API server validates it (its own packages: schema,
# defaults, pruning and CEL), and the check finds a field made required, an enum narrowed, a
# field removed and a CEL rule added. After the chart tools: the Kubernetes build compiled the
# packages it uses.
.PHONY: crd-compat
crd-compat: chart-tools ## Released objects stay valid under the CRDs of the tree (the schemas only widen)
	cd e2e/cluster/tools/kubernetes && go test -trimpath -count=1 ./crd-compat

.PHONY: import-cycles
import-cycles: ## The import cycles between the modules of each crate (bins/, crates/), and their count
	python3 mk/import-cycles.py

.PHONY: long-functions
long-functions: ## The production functions over 60 lines, longest first, and the counts over 60 and 80
	python3 mk/long-functions.py

.PHONY: scripts-test
scripts-test: ## Tests of the e2e runner's scheduling (e2e/run_suites_test.py)
	python3 e2e/run_suites_test.py

# The shape gates of `make test`: no import cycle between the modules of a crate, no production
# function over 80 lines (tests may be longer: a scenario reads top to bottom).
.PHONY: shape
shape: ## Fails on an import cycle or a production function over 80 lines
	python3 mk/import-cycles.py --check
	python3 mk/long-functions.py --check --limit 80

# The repository the released image is pushed to; install.yaml and the chart pin it by digest.
RELEASE_IMAGE ?= ghcr.io/zone-aware-controllers/zone-aware-controllers

.PHONY: release
release: chart-tools ## dist/: image index (amd64+arm64), install.yaml, crds.yaml, chart, SBOM, checksums (VERSION=x.y.z; CHART_REGISTRY=oci://... also pushes the chart)
	VERSION='$(VERSION)' RELEASE_IMAGE='$(RELEASE_IMAGE)' KUBECTL='$(CHART_KUBECTL)' HELM='$(HELM)' \
		CHART_REGISTRY='$(CHART_REGISTRY)' CHART_PLAIN_HTTP='$(CHART_PLAIN_HTTP)' bash mk/release.sh

# Where `make release` and `make chart-push` publish the chart (an OCI registry path, e.g.
# oci://ghcr.io/zone-aware-controllers/charts); empty: make release publishes nothing.
CHART_REGISTRY ?=
CHART_PLAIN_HTTP ?=
# The chart package `make chart-push` publishes (make release's).
CHART_PACKAGE ?= dist/zone-aware-controllers-$(VERSION).tgz

.PHONY: chart-push
chart-push: chart-tools ## Push the packaged chart to CHART_REGISTRY as an OCI artifact (VERSION=x.y.z, after make release)
	HELM='$(HELM)' CHART_PLAIN_HTTP='$(CHART_PLAIN_HTTP)' bash mk/chart-push.sh '$(CHART_PACKAGE)' '$(CHART_REGISTRY)'

.PHONY: chart-version
chart-version: ## Set the chart's version and appVersion: make chart-version VERSION=x.y.z
	bash mk/chart-version.sh '$(VERSION)'

##@ Supply chain

# cargo-machete and cargo-deny are built unoptimised: half the cold build (cargo-deny: 144 s
# instead of 279 s), and a check of this workspace still takes about 2 s.
CARGO_MACHETE_VERSION := 0.9.2
CARGO_MACHETE = $(TOOLS_CACHE)/cargo-machete-$(CARGO_MACHETE_VERSION)/bin/cargo-machete

$(CARGO_MACHETE):
	CARGO_PROFILE_RELEASE_OPT_LEVEL=0 $(CARGO) install cargo-machete --locked --version $(CARGO_MACHETE_VERSION) --root $(TOOLS_CACHE)/cargo-machete-$(CARGO_MACHETE_VERSION)

.PHONY: deps-check
deps-check: $(CARGO_MACHETE) ## No declared dependency is unused (cargo-machete, cached by version)
	$(CARGO_MACHETE) --with-metadata

CARGO_DENY_VERSION := 0.20.2
CARGO_DENY = $(TOOLS_CACHE)/cargo-deny-$(CARGO_DENY_VERSION)/bin/cargo-deny
# Where cargo-deny keeps the RustSec advisory database it fetches.
ADVISORY_DBS := $(or $(CARGO_HOME),$(HOME)/.cargo)/advisory-dbs

$(CARGO_DENY):
	CARGO_PROFILE_RELEASE_OPT_LEVEL=0 $(CARGO) install cargo-deny --locked --version $(CARGO_DENY_VERSION) --root $(TOOLS_CACHE)/cargo-deny-$(CARGO_DENY_VERSION)

.PHONY: deny
deny: $(CARGO_DENY) ## cargo deny (deny.toml): licenses, duplicate versions, sources, and RustSec advisories
	$(CARGO_DENY) --offline check bans licenses sources
	@if $(CARGO_DENY) fetch db >/dev/null 2>&1 || ls -d $(ADVISORY_DBS)/*/crates >/dev/null 2>&1; then \
		$(CARGO_DENY) --offline check advisories; \
	else \
		echo "deny: advisories NOT checked: the RustSec database (github.com/RustSec/advisory-db) cannot be fetched from this machine and none is cached in $(ADVISORY_DBS)" >&2; \
	fi

.PHONY: test
# The Rust checks first, the workspace's test build (`unit`) before the supply-chain checks, whose
# tools compile from crates.io on a cold machine (.ci/run's `make e2e` waits for that build, not
# for them); the ones needing tools built from Go modules (promtool, helm, kubectl) last: .ci/run
# builds those in the background meanwhile. config/crd's drift from the Rust types is checked by
# the unit tests (crates/api/tests/crd.rs runs the workspace build's crdgen --check), not by a
# build of its own.
test: fmt-check shape scripts-test chart-crds-check bins-check unit deps-check deny mixin-check chart-check crd-compat ## Everything CI checks before the e2e tests: fmt, clippy, drift checks, supply chain, unit + property tests

.PHONY: bench
bench: ## Benchmarks: sharding (criterion, 1,000,000 targets); one federated answer's CPU at 100 backends
	$(CARGO) bench -p zone-topology --bench sharding
	$(CARGO) bench -p zone-rules --bench federate

##@ Local zonal cluster (real control plane, kwok and real nodes in three zones, LocalStack)

.PHONY: cluster-up
cluster-up: ## Build (cached) and start the local zonal cluster; reuses a running one
	bash e2e/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop exactly the processes cluster-up started
	bash e2e/cluster/down.sh

.PHONY: local-crds
local-crds: cluster-up ## Apply the CRDs to the local zonal cluster
	source e2e/.cluster/env && kubectl apply --server-side --force-conflicts -k config/crd

.PHONY: run
# The controllers compile while the cluster's Go builds run: each leaves the cores idle in its
# serial stretches (links, cargo's narrow points), which the other fills.
run: ## Local zonal cluster, CRDs, the controllers on namespace default, and the samples running there (README quick start)
	$(CARGO) build --bins $(addprefix -p ,$(BINS) kubectl-zone) & build=$$!; \
		$(MAKE) --no-print-directory local-crds || { kill $$build 2>/dev/null; wait $$build; exit 1; }; \
		wait $$build || { echo "run: building the controllers failed" >&2; exit 1; }
	bash e2e/cluster/run-controllers.sh
	bash e2e/cluster/demo.sh

# What images.sh's single-platform image is built from.
IMAGE_ENV = ZONE_AWARE_REVISION='$(ZONE_AWARE_REVISION)' LOCAL_IMG='$(LOCAL_IMG)' BINS='$(BINS)' \
	STATIC_TARGET='$(STATIC_TARGET)'

.PHONY: image
image: ## The project's image without Docker (static binaries, non-root), imported into the real nodes
	$(IMAGE_ENV) IMAGE_PROFILE='$(IMAGE_PROFILE)' bash e2e/cluster/images.sh project

# The multi-arch image's OCI layout tar and name (`make release` writes its own into dist/).
MULTIARCH_TAR ?= target/image/zone-aware-controllers.oci.tar
MULTIARCH_IMAGE ?= $(RELEASE_IMAGE):$(ZONE_AWARE_REVISION)

.PHONY: image-multiarch
image-multiarch: ## The image for linux/amd64 and linux/arm64: one OCI image index in MULTIARCH_TAR (docs/release.md)
	ZONE_AWARE_REVISION='$(ZONE_AWARE_REVISION)' BINS='$(BINS)' \
		bash e2e/cluster/images.sh multiarch '$(MULTIARCH_TAR)' '$(MULTIARCH_IMAGE)'
	python3 e2e/cluster/images/oci-image.py --inspect '$(MULTIARCH_TAR)'

.PHONY: check-arm64
check-arm64: ## The arm64 binaries run under qemu-user-static: --help, a rules-federator merge (not in CI)
	ZONE_AWARE_REVISION='$(ZONE_AWARE_REVISION)' BINS='$(BINS)' bash mk/check-arm64.sh

# The e2e tests' image: `make image`'s image of the binaries `make e2e` has just built for its tests
# (cargo's debug output, dynamically linked, the host's C runtime beside them: images.sh
# e2e-image), not a second, static compile of every dependency. `make release`'s static image is
# checked with E2E_INSTALL_YAML / E2E_HELM_CHART (docs/release.md). cluster-up imported the test
# images.
E2E_IMAGE_CMD = $(IMAGE_ENV) bash e2e/cluster/images.sh e2e-image
# Thanos (its binary from its Go module, cached by version; its image in the nodes) for the
# suites of E2E_THANOS_SUITES: built while the other suites run (the cluster starts without it).
E2E_THANOS_CMD = bash e2e/cluster/build.sh thanos && bash e2e/cluster/images.sh thanos
# The same for cert-manager (its Go build) and the cert_manager suite, and for the previous release
# (its controllers compiled from its tag) and the upgrade suite: cached by version, built in the
# background on a cold machine while the other suites run. Each suite also builds what it needs
# itself when run alone (cached: nothing to do when built).
E2E_CERT_MANAGER_CMD = bash e2e/cluster/build.sh cert-manager
E2E_PREVIOUS_CMD = bash e2e/cluster/previous-release.sh build

# Every test image in the real nodes: the cluster starts with those it needs (`make run` builds
# no more), the tests' own (Prometheus 2, Alertmanager, prometheus-operator's reloader) are built
# and imported here. `make e2e` runs the same while the suites that do not need them go ahead.
E2E_TEST_TOOLS_CMD = bash e2e/cluster/build.sh all && bash e2e/cluster/images.sh test-images-import
.PHONY: test-images
test-images: cluster-up
	$(E2E_TEST_TOOLS_CMD)

.PHONY: e2e
e2e: local-crds chart-tools ## End-to-end tests against the local zonal cluster (E2E_SUITE=file, E2E_FILTER=substring)
	# The same cargo selection and lints as `make test` (the workspace with its test targets): one
	# set of features, so the dependencies are compiled once, not once per selection.
	$(LINTED) $(CARGO) build --workspace --all-targets
ifneq ($(E2E_SUITE),)
	$(E2E_IMAGE_CMD)
	$(if $(filter $(E2E_SUITE),$(E2E_TEST_TOOLS_SUITES)),$(E2E_TEST_TOOLS_CMD))
	$(if $(filter $(E2E_SUITE),$(E2E_THANOS_SUITES)),$(E2E_THANOS_CMD))
	$(if $(filter $(E2E_SUITE),cert_manager),$(E2E_CERT_MANAGER_CMD))
	$(LINTED) $(CARGO) test --workspace --test $(E2E_SUITE) -- --ignored --test-threads=$(E2E_THREADS) $(E2E_FILTER) $(addprefix --skip ,$(E2E_SKIP))
else
	# The image is built while the suites that do not run it go ahead (run_suites.py).
	$(LINTED) CARGO='$(CARGO)' python3 e2e/run_suites.py --lanes $(E2E_LANES) --threads $(E2E_THREADS) \
		--image-cmd "$(E2E_IMAGE_CMD)" $(addprefix --image-suite ,$(E2E_IMAGE_SUITES)) \
		--prereq "the test tools=$(E2E_TEST_TOOLS_CMD)" $(foreach suite,$(E2E_TEST_TOOLS_SUITES),--prereq-suite "the test tools=$(suite)") \
		--prereq "Thanos=$(E2E_THANOS_CMD)" $(addprefix --prereq-suite Thanos=,$(E2E_THANOS_SUITES)) \
		--prereq "cert-manager=$(E2E_CERT_MANAGER_CMD)" --prereq-suite cert-manager=cert_manager \
		--prereq "the previous release=$(E2E_PREVIOUS_CMD)" --prereq-suite "the previous release=upgrade" \
		$(addprefix --exclusive ,$(E2E_EXCLUSIVE)) $(if $(E2E_FILTER),--filter '$(E2E_FILTER)') $(addprefix --skip ,$(E2E_SKIP))
endif

.PHONY: perf
perf: local-crds ## Long measurements from e2e/perf/ (not in CI; PERF=substring selects)
	$(CARGO) build --release --workspace --bins
	bash e2e/perf/run.sh $(PERF)

# COLD=run|ci: which cold measurement `make perf-cold` takes.
COLD ?= run
.PHONY: perf-cold
perf-cold: ## Cold `make run` (COLD=run) or `.ci/run` (COLD=ci) on a fresh clone, every cache empty (not in CI; the cluster down)
	bash e2e/perf/cold/measure.sh $(COLD)

.PHONY: e2e-kind
e2e-kind: ## The same e2e tests against a kind cluster (needs a Docker engine)
	bash e2e/kind.sh $(E2E_FILTER)

include mk/deploy.mk
