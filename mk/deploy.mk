# Install on a cluster: images, kustomize manifests, deploy/undeploy, CRD install/uninstall.
# Included from the Makefile. docs/deploy.md explains every target and variable.

##@ Install on a cluster (kubectl with its built-in kustomize; KUBECONFIG selects the cluster)

# The image holding every binary (the Deployments choose one with `command:`).
IMG ?= zone-aware-controllers:latest
# Namespace of the controllers; `make undeploy` deletes it, so it must be theirs alone.
NAMESPACE ?= zone-aware-system
# The kustomization deploy renders (config/default or an overlay of it).
DEPLOY_BASE ?= config/default
# CERT_MANAGER=1: webhook certificate from cert-manager instead of --self-signed.
CERT_MANAGER ?= 0
# ZAU_POD_REMOVAL=delete: zau-controller deletes pods (bypassing disruption budgets) instead of
# evicting them, with the extra RBAC that needs.
ZAU_POD_REMOVAL ?= evict
# MONITORING=1: a PodMonitor per binary and the mixin's PrometheusRule (config/monitoring/), for
# a Prometheus that reads prometheus-operator's objects; needs their CRDs in the cluster.
MONITORING ?= 0
KUBECTL ?= kubectl
DOCKER ?= docker
# Field manager of everything deploy applies (server-side apply).
DEPLOY_FIELD_MANAGER := zone-aware-deploy
STATIC_TARGET ?= x86_64-unknown-linux-gnu
# The cargo profile of `make image`'s binaries (`make e2e` images its test build: see the Makefile).
IMAGE_PROFILE ?= release

DEPLOY_COMPONENTS := $(if $(filter 1 true yes,$(CERT_MANAGER)),config/certmanager) \
	$(if $(filter delete,$(ZAU_POD_REMOVAL)),config/rbac/pod-delete) \
	$(if $(filter 1 true yes,$(MONITORING)),config/monitoring)
RENDER := NAMESPACE='$(NAMESPACE)' IMG='$(IMG)' DEPLOY_BASE='$(DEPLOY_BASE)' \
	DEPLOY_COMPONENTS='$(strip $(DEPLOY_COMPONENTS))' KUBECTL='$(KUBECTL)' bash mk/render-deploy.sh

.PHONY: manifests
manifests: ## Print what `make deploy` applies (IMG, NAMESPACE, CERT_MANAGER, ZAU_POD_REMOVAL, MONITORING)
	@$(RENDER)

.PHONY: install
install: ## Install or upgrade the CRDs only (server-side apply)
	$(KUBECTL) apply --server-side --field-manager=$(DEPLOY_FIELD_MANAGER) --force-conflicts -k config/crd
	$(KUBECTL) wait --for=condition=Established --timeout=60s -f config/crd/zonecontrol.k8s.aws_zoneawareupdates.yaml -f config/crd/zonecontrol.k8s.aws_zonedisruptionbudgets.yaml -f config/crd/zonecontrol.k8s.aws_shardedprometheuses.yaml

.PHONY: uninstall
uninstall: ## Delete the CRDs AND EVERY ZoneAwareUpdate/ZoneDisruptionBudget/ShardedPrometheus (needs CONFIRM=yes)
	@echo "WARNING: deleting the CRDs deletes every ZoneAwareUpdate, ZoneDisruptionBudget and ShardedPrometheus (with its Prometheus shards) in the cluster:" >&2
	@$(KUBECTL) get zoneawareupdates.zonecontrol.k8s.aws,zonedisruptionbudgets.zonecontrol.k8s.aws,shardedprometheuses.zonecontrol.k8s.aws -A --ignore-not-found >&2 || true
	@if [ "$(CONFIRM)" != yes ]; then echo "uninstall: not done. Run 'make uninstall CONFIRM=yes' to delete them." >&2; exit 1; fi
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: install ## Install CRDs and the controllers into NAMESPACE with image IMG
	@tmp="$$(mktemp)"; trap 'rm -f "$$tmp"' EXIT; \
	$(RENDER) >"$$tmp"; \
	echo "$(KUBECTL) apply --server-side -f <rendered manifests> (namespace $(NAMESPACE), image $(IMG))"; \
	$(KUBECTL) apply --server-side --field-manager=$(DEPLOY_FIELD_MANAGER) --force-conflicts -f "$$tmp"

# The webhook configuration goes first: with failurePolicy Fail, a configuration left pointing at
# a deleted Service would refuse every eviction in the selected namespaces. The CRDs are never
# deleted here (that deletes every user object): only `make uninstall` does.
.PHONY: undeploy
undeploy: ## Remove the controllers (webhook configuration first); never the CRDs
	@tmp="$$(mktemp)"; trap 'rm -f "$$tmp"' EXIT; \
	$(RENDER) >"$$tmp"; \
	webhooks="$$($(KUBECTL) get -f "$$tmp" -o name --ignore-not-found | grep '^validatingwebhookconfiguration' || true)"; \
	if [ -n "$$webhooks" ]; then $(KUBECTL) delete --wait=true $$webhooks; fi; \
	$(KUBECTL) delete --ignore-not-found --wait=true --timeout=180s -f "$$tmp"

# The local zonal cluster has no registry: `make image` imports the image into its real nodes and
# config/local runs the controllers there with imagePullPolicy Never.
LOCAL_IMG ?= localhost/zone-aware-controllers:dev

.PHONY: deploy-local
deploy-local: image ## make deploy on the local zonal cluster: the controllers as real pods on its real nodes
	$(MAKE) --no-print-directory deploy DEPLOY_BASE=config/local IMG=$(LOCAL_IMG)

.PHONY: undeploy-local
undeploy-local: ## make undeploy of what deploy-local installed
	$(MAKE) --no-print-directory undeploy DEPLOY_BASE=config/local IMG=$(LOCAL_IMG)

.PHONY: docker-build
docker-build: ## Build the image IMG with every binary (needs a Docker engine)
	$(DOCKER) build --build-arg ZONE_AWARE_REVISION='$(ZONE_AWARE_REVISION)' -t $(IMG) .

.PHONY: docker-push
docker-push: ## Push the image IMG
	$(DOCKER) push $(IMG)

.PHONY: build-static
build-static: ## Release binaries statically linked (what the Dockerfile builds), checked with file/ldd
	ZONE_AWARE_REVISION='$(ZONE_AWARE_REVISION)' RUSTFLAGS="-C target-feature=+crt-static" \
		$(CARGO) build --release --locked --target $(STATIC_TARGET) $(addprefix -p ,$(BINS))
	@dir="$${CARGO_TARGET_DIR:-target}/$(STATIC_TARGET)/release"; \
	for bin in $(BINS); do \
		file "$$dir/$$bin"; \
		ldd "$$dir/$$bin" 2>&1 | grep -Eq 'not a dynamic executable|statically linked' || { echo "build-static: $$bin is dynamically linked" >&2; exit 1; }; \
		file "$$dir/$$bin" | grep -Eq 'statically linked|static-pie linked' || { echo "build-static: $$bin is not static" >&2; exit 1; }; \
	done
