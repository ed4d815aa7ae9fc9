# Bloodraven. `make dev` starts the playground, `make test` runs every test.
# Tools are built from the Go module proxy into ./bin (nothing is downloaded
# prebuilt); each tool has its own module under hack/tools/.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

ROOT := $(CURDIR)
BIN  := $(ROOT)/bin
GO   ?= go

KUBE_VERSION := v1.37.2
KUBE_MAJOR   := 1
KUBE_MINOR   := 37
VERSION_PKG  := k8s.io/component-base/version
KUBE_LDFLAGS := -s -w \
	-X $(VERSION_PKG).gitVersion=$(KUBE_VERSION) \
	-X $(VERSION_PKG).gitMajor=$(KUBE_MAJOR) \
	-X $(VERSION_PKG).gitMinor=$(KUBE_MINOR) \
	-X $(VERSION_PKG).gitTreeState=clean \
	-X $(VERSION_PKG).buildDate=1970-01-01T00:00:00Z
ETCD_VERSION := $(shell awk '$$1=="go.etcd.io/etcd/server/v3"{print $$2}' hack/tools/etcd/go.mod)

KUBE_APISERVER := $(BIN)/kube-apiserver
KUBECTL        := $(BIN)/kubectl
ETCD           := $(BIN)/etcd
CONTROLLER_GEN := $(BIN)/controller-gen
HELM           := $(BIN)/helm
RULECHECK      := $(BIN)/rulecheck
STATICCHECK    := $(BIN)/staticcheck
IMPORTAS       := $(BIN)/importas
# The CRDs of what the chart can render objects for (cert-manager's
# Certificate and Issuer, the Prometheus Operator's PodMonitor and
# PrometheusRule), copied from their Go modules for the chart's dry-run test.
CERT_MANAGER_VERSION        := v1.19.1
PROMETHEUS_OPERATOR_VERSION := v0.85.0
THIRD_PARTY_CRDS            := $(BIN)/crds/.$(CERT_MANAGER_VERSION)-$(PROMETHEUS_OPERATOR_VERSION)
TOOLS := $(KUBE_APISERVER) $(KUBECTL) $(ETCD) $(CONTROLLER_GEN) $(HELM) $(RULECHECK) $(STATICCHECK) $(IMPORTAS) $(THIRD_PARTY_CRDS)

export KUBEBUILDER_ASSETS := $(BIN)

# The release is the file VERSION (the chart's version and appVersion follow
# it); builds stamp it and the commit into the binary.
VERSION := $(shell cat VERSION)
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION)$(if $(GIT_REV),+$(GIT_REV))

.PHONY: all
all: build

##@ Tools

# TOOLS_JOBS tool builds run at once: each go build already compiles on every
# core, a second one fills the time the first spends downloading modules and
# linking (a cold `make tools` on two cores: see docs/development.md).
TOOLS_JOBS ?= 2

.PHONY: tools
tools: ## Build kube-apiserver, kubectl, etcd, controller-gen, helm, rulecheck, staticcheck and importas into ./bin (a no-op when up to date).
	@$(MAKE) --no-print-directory -j$(TOOLS_JOBS) tools-each

.PHONY: tools-each
tools-each: $(TOOLS)

# kube-apiserver and kubectl come from one go build: they share most of
# their packages, which one build compiles once.
$(KUBE_APISERVER) $(KUBECTL) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@echo ">> building kube-apiserver and kubectl $(KUBE_VERSION) from the module proxy (first build: about 15 min on 2 cores; package names show progress)"
	@mkdir -p $(BIN)/.kube-build
	cd hack/tools/kube && $(GO) build -v -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(BIN)/.kube-build/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	@mv $(BIN)/.kube-build/kube-apiserver $(KUBE_APISERVER) && mv $(BIN)/.kube-build/kubectl $(KUBECTL) && rmdir $(BIN)/.kube-build
	@touch $(KUBE_APISERVER) $(KUBECTL)

$(ETCD): hack/tools/etcd/go.mod hack/tools/etcd/go.sum
	@echo ">> building etcd $(ETCD_VERSION) from the module proxy"
	cd hack/tools/etcd && $(GO) build -v -trimpath -ldflags '-s -w' -o $@ go.etcd.io/etcd/server/v3
	@touch $@

$(CONTROLLER_GEN): hack/tools/gen/go.mod hack/tools/gen/go.sum
	@echo ">> building controller-gen"
	cd hack/tools/gen && $(GO) build -trimpath -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen
	@touch $@

$(HELM): hack/tools/helm/go.mod hack/tools/helm/go.sum
	@echo ">> building helm"
	cd hack/tools/helm && $(GO) build -trimpath -o $@ helm.sh/helm/v3/cmd/helm
	@touch $@

$(STATICCHECK): hack/tools/staticcheck/go.mod hack/tools/staticcheck/go.sum
	@echo ">> building staticcheck"
	cd hack/tools/staticcheck && $(GO) build -trimpath -o $@ honnef.co/go/tools/cmd/staticcheck
	@touch $@

$(IMPORTAS): hack/tools/importas/go.mod hack/tools/importas/go.sum
	@echo ">> building importas"
	cd hack/tools/importas && $(GO) build -trimpath -o $@ github.com/julz/importas/cmd/importas
	@touch $@

$(THIRD_PARTY_CRDS):
	@echo ">> cert-manager $(CERT_MANAGER_VERSION) and Prometheus Operator $(PROMETHEUS_OPERATOR_VERSION) CRDs from the module proxy"
	@rm -rf $(BIN)/crds && mkdir -p $(BIN)/crds
	@cm=$$(cd / && GOFLAGS=-mod=mod $(GO) mod download -json github.com/cert-manager/cert-manager@$(CERT_MANAGER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	po=$$(cd / && GOFLAGS=-mod=mod $(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	test -n "$$cm" && test -n "$$po" && \
	cp $$cm/deploy/crds/cert-manager.io_certificates.yaml $$cm/deploy/crds/cert-manager.io_issuers.yaml \
		$$po/example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml \
		$$po/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml $(BIN)/crds/ && \
	chmod u+w $(BIN)/crds/*.yaml
	@touch $@

$(RULECHECK): hack/tools/rulecheck/go.mod hack/tools/rulecheck/go.sum $(wildcard hack/tools/rulecheck/*.go)
	@echo ">> building rulecheck (Prometheus's rule parser)"
	cd hack/tools/rulecheck && $(GO) build -trimpath -o $@ .
	@touch $@

##@ Node tools

# make node-tools: what the single-node cluster runs (make cluster, the node
# suite), built from the module proxy into bin/node/: the kubelet,
# kube-proxy, kube-scheduler and kube-controller-manager of the same
# Kubernetes as kube-apiserver, containerd and its runc shim, runc (cgo,
# with seccomp: Debian's libseccomp-dev), the CNI plugins, CoreDNS (the
# plugins the node uses) and kube-router (NetworkPolicy only, a test
# harness: docs/node.md), and the Pods' pause program.
NODE_BIN        := $(BIN)/node
CONTAINERD_VER  := $(shell awk '$$1=="github.com/containerd/containerd/v2"{print $$2}' hack/tools/containerd/go.mod)
KUBE_ROUTER_VER := $(shell awk '$$1=="github.com/cloudnativelabs/kube-router/v2"{print $$2}' hack/tools/kuberouter/go.mod)
NODE_KUBE       := $(NODE_BIN)/kubelet $(NODE_BIN)/kube-proxy $(NODE_BIN)/kube-scheduler $(NODE_BIN)/kube-controller-manager
NODE_TOOLS      := $(NODE_KUBE) $(NODE_BIN)/containerd $(NODE_BIN)/runc $(NODE_BIN)/cni/bridge $(NODE_BIN)/coredns \
	$(NODE_BIN)/kube-router $(NODE_BIN)/pause

.PHONY: node-tools
node-tools: node-packages ## Build what the single-node cluster runs into ./bin/node (kubelet, containerd, runc, CNI, CoreDNS, kube-router).
	@$(MAKE) --no-print-directory -j$(TOOLS_JOBS) node-tools-each

# The Debian packages the node needs: iptables and ipset (kube-proxy's and
# kube-router's rules) and libseccomp-dev (runc is built with seccomp).
NODE_PACKAGES := iptables ipset libseccomp-dev

.PHONY: node-packages
node-packages:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo ">> installing $$missing (Debian packages)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else \
			echo "the node needs: sudo apt-get install -y $$missing"; exit 1; \
		fi; \
	fi

.PHONY: node-tools-each
node-tools-each: $(NODE_TOOLS)

$(NODE_KUBE) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@echo ">> building kubelet, kube-proxy, kube-scheduler and kube-controller-manager $(KUBE_VERSION)"
	@mkdir -p $(NODE_BIN)/.kube-build
	cd hack/tools/kube && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $(NODE_BIN)/.kube-build/ \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager
	@for b in kubelet kube-proxy kube-scheduler kube-controller-manager; do mv $(NODE_BIN)/.kube-build/$$b $(NODE_BIN)/$$b; touch $(NODE_BIN)/$$b; done
	@rmdir $(NODE_BIN)/.kube-build

$(NODE_BIN)/containerd: hack/tools/containerd/go.mod hack/tools/containerd/go.sum
	@echo ">> building containerd $(CONTAINERD_VER), ctr and containerd-shim-runc-v2"
	@mkdir -p $(NODE_BIN)
	cd hack/tools/containerd && CGO_ENABLED=0 $(GO) build -trimpath -tags 'no_btrfs no_devmapper no_zfs urfave_cli_no_docs' \
		-ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VER)' -o $(NODE_BIN)/ \
		github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr
	cd hack/tools/containerd && CGO_ENABLED=0 $(GO) build -trimpath -tags 'urfave_cli_no_docs no_grpc' \
		-ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VER)' -o $(NODE_BIN)/ \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
	@touch $@

$(NODE_BIN)/runc: hack/tools/runc/go.mod hack/tools/runc/go.sum
	@echo ">> building runc (cgo, seccomp)"
	@pkg-config --exists libseccomp || { echo "runc needs libseccomp-dev (apt-get install libseccomp-dev; .ci/run installs it)"; exit 1; }
	@mkdir -p $(NODE_BIN)
	cd hack/tools/runc && CGO_ENABLED=1 $(GO) build -trimpath -buildmode=pie -tags 'seccomp urfave_cli_no_docs' -o $@ github.com/opencontainers/runc
	@touch $@

$(NODE_BIN)/cni/bridge: hack/tools/cni/go.mod hack/tools/cni/go.sum
	@echo ">> building the CNI plugins bridge, host-local, loopback and portmap"
	@mkdir -p $(NODE_BIN)/cni
	cd hack/tools/cni && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(NODE_BIN)/cni/ \
		github.com/containernetworking/plugins/plugins/main/bridge github.com/containernetworking/plugins/plugins/ipam/host-local \
		github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap
	@touch $@

$(NODE_BIN)/coredns: hack/tools/coredns/go.mod hack/tools/coredns/go.sum hack/tools/coredns/main.go
	@echo ">> building CoreDNS (the node's plugins)"
	@mkdir -p $(NODE_BIN)
	cd hack/tools/coredns && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@ .
	@touch $@

$(NODE_BIN)/kube-router: hack/tools/kuberouter/go.mod hack/tools/kuberouter/go.sum
	@echo ">> building kube-router $(KUBE_ROUTER_VER) (NetworkPolicy engine of the node; a test harness)"
	@mkdir -p $(NODE_BIN)
	cd hack/tools/kuberouter && CGO_ENABLED=0 $(GO) build -trimpath \
		-ldflags '-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$(KUBE_ROUTER_VER)' -o $@ github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
	@touch $@

$(NODE_BIN)/pause: hack/pause/main.go
	@mkdir -p $(NODE_BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $@ ./hack/pause
	@touch $@

##@ Generate

GENERATED_DIRS := api config charts/bloodraven/crds charts/bloodraven/files docs/crds.md

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy, CRDs, RBAC and the chart's lease and fence guards from the Go types and markers.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd:allowDangerousTypes=true rbac:roleName=bloodraven webhook paths=./... \
		output:crd:artifacts:config=config/crd output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook
	@# The chart carries the same generated CRDs, RBAC rules and webhook rules.
	cp config/crd/*.yaml charts/bloodraven/crds/
	cp config/rbac/role.yaml charts/bloodraven/files/clusterrole.yaml
	cp config/webhook/manifests.yaml charts/bloodraven/files/webhooks.yaml
	@# The lease guard's constant part, from package leaseguard.
	$(GO) run ./hack/leaseguard > charts/bloodraven/files/lease-guard.yaml
	@# The fence guard's constant part, from package webhook. The webhooks'
	@# match conditions (the operator's writes skip them) name the release's
	@# ServiceAccount: templates/webhook.yaml adds them, as the playground and
	@# the tests do with webhook.ExemptTheOperator.
	$(GO) run ./hack/fenceguard > charts/bloodraven/files/fence-guard.yaml
	@# The CRD reference, from the same generated schemas.
	$(GO) run ./hack/crddoc config/crd > docs/crds.md

.PHONY: check-generate
check-generate: generate ## Fail when generated files differ from what is committed.
	@if [ -n "$$(git status --porcelain -- $(GENERATED_DIRS))" ]; then \
		echo "generated files drifted from the types; run 'make generate' and commit:"; \
		git status --porcelain -- $(GENERATED_DIRS); git --no-pager diff --stat -- $(GENERATED_DIRS); exit 1; \
	fi

##@ Build and test

.PHONY: build
build: ## Build the operator into ./bin/bloodraven, the pipeline CLI into ./bin/bloodraven-deploy and the kubectl plugin into ./bin/kubectl-bloodraven (with its completion shim), versions stamped.
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/bloodraven ./cmd/bloodraven
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/kubectl-bloodraven ./cmd/kubectl-bloodraven
	install -m 0755 cmd/kubectl-bloodraven/kubectl_complete-bloodraven $(BIN)/kubectl_complete-bloodraven
	cd $(CLIENT_MOD) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/bloodraven-deploy ./cmd/bloodraven-deploy

# make image: the operator's and bloodraven-deploy's images, without Docker
# (internal/ociimage): OCI layouts in bin/image/<name>/ and docker-load
# tarballs beside them, each verified (entrypoint, user, labels, --version).
IMAGE_REGISTRY ?= ghcr.io/shipstream
IMAGE_TAG      ?= $(VERSION)

.PHONY: image
image: ## Build the operator's and bloodraven-deploy's OCI images into bin/image/ (no Docker; push with crane or skopeo).
	@mkdir -p $(BIN)/image
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/image/bloodraven-linux-amd64 ./cmd/bloodraven
	cd $(CLIENT_MOD) && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
		-o $(BIN)/image/bloodraven-deploy-linux-amd64 ./cmd/bloodraven-deploy
	$(GO) run ./hack/mkimage -binary $(BIN)/image/bloodraven-linux-amd64 -name bloodraven -version $(VERSION) \
		-description "Bloodraven: MySQL failover groups and deployment coordination" -source https://github.com/shipstream/bloodraven \
		-out $(BIN)/image/bloodraven -tarball $(BIN)/image/bloodraven.tar -tag $(IMAGE_REGISTRY)/bloodraven:$(IMAGE_TAG)
	$(GO) run ./hack/mkimage -binary $(BIN)/image/bloodraven-deploy-linux-amd64 -name bloodraven-deploy -version $(VERSION) \
		-description "bloodraven-deploy: the pipeline client of /deploy/v1" -source https://github.com/shipstream/bloodraven \
		-out $(BIN)/image/bloodraven-deploy -tarball $(BIN)/image/bloodraven-deploy.tar -tag $(IMAGE_REGISTRY)/bloodraven-deploy:$(IMAGE_TAG)

CLI_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: cli
cli: ## Cross-compile bloodraven-deploy (static, no cgo) for linux and darwin, amd64 and arm64, into ./bin/cli/.
	@for p in $(CLI_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
		echo ">> bloodraven-deploy $$os/$$arch"; \
		(cd $(CLIENT_MOD) && GOOS=$$os GOARCH=$$arch CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' \
			-o $(BIN)/cli/bloodraven-deploy-$$os-$$arch ./cmd/bloodraven-deploy) || exit 1; \
	done

# make release: dist/ from a clean tree (internal/release, docs/release.md):
# multi-platform image indexes with SBOMs, the chart (package, index.yaml,
# OCI layout), the CLI archives, SHA256SUMS, the krew manifest and the
# release notes. RELEASE_BASE_URL is where the assets will be downloaded
# from; RELEASE_ALLOW_DIRTY=1 builds a trial from uncommitted changes.
RELEASE_BASE_URL ?= https://github.com/shipstream/bloodraven/releases/download/v$(VERSION)
RELEASE_ALLOW_DIRTY ?=

.PHONY: release
release: $(HELM) ## Write the release into ./dist: multi-arch images with SBOMs, the chart, CLI archives, SHA256SUMS, krew manifest, notes (docs/release.md).
	$(GO) run ./hack/release -root . -out dist -version $(VERSION) -binary-version '$(VERSION)$(if $(GIT_REV),+$(GIT_REV))' \
		-base-url $(RELEASE_BASE_URL) -registry $(IMAGE_REGISTRY) -helm $(HELM) $(if $(RELEASE_ALLOW_DIRTY),-allow-dirty)

.PHONY: fmt
fmt:
	gofmt -l -w $$(git ls-files '*.go')

# The pipeline client is its own module (standard library only, so that
# pipelines do not inherit the operator's dependencies): every Go target
# runs in both modules.
CLIENT_MOD := deployclient

.PHONY: vet
vet:
	$(GO) vet ./...
	cd $(CLIENT_MOD) && $(GO) vet ./...

.PHONY: lint
lint: $(STATICCHECK) $(IMPORTAS) ## gofmt, go vet, staticcheck and importas (one alias per package: IMPORT_ALIASES).
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	cd $(CLIENT_MOD) && $(GO) vet ./...
	$(STATICCHECK) ./...
	cd $(CLIENT_MOD) && $(STATICCHECK) ./...
	@# controller-gen's deepcopy imports meta/v1 without an alias: generated, not ours.
	@out=$$($(IMPORTAS) -no-unaliased $(foreach a,$(IMPORT_ALIASES),-alias $(a)) ./... 2>&1 | grep -v '/zz_generated\.' || true); \
		if [ -n "$$out" ]; then echo "importas: $$out"; exit 1; fi

# One import alias for each of these packages, in every file (make lint).
IMPORT_ALIASES := github.com/shipstream/bloodraven/api/v1alpha1:bloodravenv1alpha1 \
	k8s.io/api/core/v1:corev1 k8s.io/api/coordination/v1:coordinationv1 \
	k8s.io/apimachinery/pkg/apis/meta/v1:metav1 k8s.io/apimachinery/pkg/api/errors:apierrors

FUZZTIME ?= 10s
FUZZ_TARGETS := deployapi:FuzzDecodeGrant deployapi:FuzzDecodeRenew deployapi/authn:FuzzParseClaims deployclient:FuzzDecodeAnswer

TEST_TIMES ?= $(ROOT)/bin/test-times.json
# E2E_PARALLEL: how many of the e2e tests that wait (all but the two that
# compare latencies, which run first and alone) run at once (e2e/doc.go).
E2E_PARALLEL ?= 3
# UNIT_P: how many packages of the first phase (every package but e2e) run
# at once. Most of their time is spent waiting on timers (a take-over's
# 120 s, a soak's renewals, ttl expiries), so three share two cores.
UNIT_P ?= 3
TESTREPORT := $(ROOT)/bin/testreport -slowest 20 -out $(TEST_TIMES)
# The e2e package as make test runs it (make e2e-repeat runs the same).
E2E_GO_TEST = $(GO) test -json -race -count=1 -timeout 30m -parallel $(E2E_PARALLEL) ./e2e
# The node suite (e2e/node, docs/node.md): the chart on a real single-node
# Kubernetes; root only, one node per machine, so it runs alone and last.
NODE_GO_TEST = $(GO) test -json -race -count=1 -timeout 20m ./e2e/node

.PHONY: test
test: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) $(HELM) $(RULECHECK) $(THIRD_PARTY_CRDS) node-tools mariadb percona-toolkit lint ## Lint, every unit, envtest and e2e test with -race against a real kube-apiserver + etcd, the node suite on a real single-node Kubernetes, a short fuzz run of the decoders, then a smoke run of the benchmark (make bench gives its tables).
	@# The e2e package runs after the others, alone: its latency comparison
	@# (the hostile tenant's, quiet against attacked renewals) must not share
	@# this machine's cores with another package's tests.
	@# testreport prints what go test prints (failed tests' output only)
	@# and the slowest tests of each run; every timing goes to TEST_TIMES.
	@rm -f $(TEST_TIMES)
	$(GO) build -o $(ROOT)/bin/testreport ./hack/testreport
	$(TESTREPORT) -- $(GO) test -json -race -count=1 -timeout 30m -p $(UNIT_P) $$($(GO) list ./... | grep -v -e '/e2e$$' -e '/e2e/node$$')
	$(TESTREPORT) -- $(E2E_GO_TEST)
	@$(MAKE) --no-print-directory image
	$(TESTREPORT) -- $(NODE_GO_TEST)
	cd $(CLIENT_MOD) && $(TESTREPORT) -- $(GO) test -json -race -count=1 -timeout 10m ./...
	@$(MAKE) --no-print-directory fuzz
	@$(MAKE) --no-print-directory bench BENCH_SMOKE=1 BENCH_OUT=$(ROOT)/bin/bench-smoke.json

.PHONY: soak
soak: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) mariadb ## The long soak: 20 deploy runs renewing for SOAK_DURATION (5m; make test runs it for 80 s).
	BLOODRAVEN_SOAK_DURATION=$(SOAK_DURATION) $(GO) test -race -count=1 -timeout 30m ./e2e/soak -v

SOAK_DURATION ?= 5m

.PHONY: e2e
e2e: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) mariadb percona-toolkit ## Only the end-to-end and fault suite (./e2e/...: the binaries, real MariaDB, faults, the soak); make test runs it too.
	$(GO) test -race -count=1 -timeout 30m -parallel $(E2E_PARALLEL) ./e2e/... -v

# The e2e package exactly as make test runs it, E2E_RUNS times in a row,
# stopping at the first failure: how a change to it is shown flake-free.
E2E_RUNS ?= 10

.PHONY: e2e-repeat
e2e-repeat: $(KUBE_APISERVER) $(ETCD) $(KUBECTL) mariadb percona-toolkit ## The e2e package as make test runs it, E2E_RUNS (10) times in a row; stops at the first failure.
	$(GO) build -o $(ROOT)/bin/testreport ./hack/testreport
	@for i in $$(seq 1 $(E2E_RUNS)); do \
		start=$$(date +%s); \
		$(ROOT)/bin/testreport -slowest 5 -- $(E2E_GO_TEST) \
			|| { echo "e2e-repeat: run $$i of $(E2E_RUNS) FAILED after $$(( $$(date +%s) - start )) s"; exit 1; }; \
		echo "e2e-repeat: run $$i of $(E2E_RUNS) passed in $$(( $$(date +%s) - start )) s"; \
	done

# make bench: the load generator of ./e2e/bench against a real control plane,
# in one run: the floor (raw GET database + GET group + PUT Lease), the
# product's renewals over HTTPS, and client-go's leaderelection LeaseLock,
# at 1, 8 and 32 clients, with 0 and 5,000 unrelated MysqlDatabases; then
# revocation of 100 leases and the heap per 10,000 tombstones; then the
# site-loss table (every group's primary lost at once, hung and refused, at
# 10, 100, 1,000 and 5,000 groups with the simulated driver, and one row of
# 16 real MariaDB pairs, BENCH_MARIADB_PAIRS); then the deploy history (20
# groups, Leases per group and heap after 10 and after 1,000 deploy cycles
# each). It prints the tables and writes BENCH_OUT (JSON). It asserts only
# that every figure was produced; the README explains the table.
# BENCH_QUICK=1: short cells, site loss at 10, 100 and 1,000 groups, no real row,
# 50 deploy cycles (about 7 min). BENCH_SMOKE=1: the smallest size of each
# table, under a minute: what make test runs, to prove the benchmark builds
# and runs; its figures are not worth reading.
BENCH_QUICK ?=
BENCH_SMOKE ?=
BENCH_OUT   ?= $(ROOT)/bench.json

.PHONY: bench
bench: $(KUBE_APISERVER) $(ETCD) mariadb ## Measure renewals against the floor and client-go, site loss and deploy history (BENCH_QUICK=1: about 7 min); tables on stdout, JSON in BENCH_OUT.
	BLOODRAVEN_BENCH=1 BENCH_QUICK=$(BENCH_QUICK) BENCH_SMOKE=$(BENCH_SMOKE) BENCH_OUT=$(BENCH_OUT) $(GO) test ./e2e/bench -run '^(TestLoad|TestSiteLoss|TestDeployHistory)$$' -count=1 -timeout 60m -v
	@if [ -z "$(BENCH_QUICK)$(BENCH_SMOKE)" ]; then BLOODRAVEN_BENCH=1 $(GO) test ./operator -run '^TestSiteLossOfRealMariaDB$$' -count=1 -timeout 20m -v; fi

.PHONY: fuzz
fuzz: ## Fuzz the request decoders, the token claims decoder and the client's answer decoder for FUZZTIME each (default 10s).
	@# A failing input is written to <pkg>/testdata/fuzz/<target> and fails
	@# the run; the committed seeds there are not failures. An engine
	@# failure that wrote no new input (a worker lost under load, "context
	@# deadline exceeded" at the end of the time) is retried once.
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t#*:}; dir=$$pkg/testdata/fuzz/$$fn; \
		before=$$(ls $$dir 2>/dev/null || true); \
		echo ">> fuzz $$fn for $(FUZZTIME)"; \
		run="$(GO) test -run=^$$ -fuzz=^$$fn$$ -fuzztime=$(FUZZTIME) ./$$pkg/"; \
		if [ -f $$pkg/go.mod ]; then run="cd $$pkg && $(GO) test -run=^$$ -fuzz=^$$fn$$ -fuzztime=$(FUZZTIME) ."; fi; \
		if ! (eval "$$run"); then \
			if [ "$$(ls $$dir 2>/dev/null)" != "$$before" ]; then echo "fuzz $$fn found a failing input in $$dir"; exit 1; fi; \
			echo ">> fuzz $$fn: engine failure without a new failing input; retrying once"; \
			(eval "$$run") || exit 1; \
		fi; \
	done

##@ Playground

.PHONY: cluster
cluster: tools node-tools image mariadb ## Start the single-node cluster (root): the chart installed, the playground's group; Ctrl-C stops and cleans it (docs/node.md).
	@[ "$$(id -u)" = 0 ] || { echo "make cluster prepares the host (a bridge, iptables, cgroups): run it as root"; exit 1; }
	$(GO) build -o $(BIN)/bloodraven-cluster ./hack/cluster
	$(BIN)/bloodraven-cluster --root $(ROOT)

.PHONY: e2e-node
e2e-node: tools node-tools image mariadb ## Run only the node suite (root; what make test runs last).
	$(GO) test -race -count=1 -timeout 20m -v ./e2e/node

.PHONY: mariadb
mariadb: ## Install MariaDB (the playground's sites, the driver's integration tests) if it is missing.
	@if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo ">> installing mariadb-server (Debian package)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server; \
		else \
			echo "mariadbd is missing: run 'sudo apt-get install -y mariadb-server', then make dev again"; exit 1; \
		fi; \
	fi

.PHONY: percona-toolkit
percona-toolkit: ## Install pt-online-schema-change (the online-schema-change tests run it) if it is missing.
	@if ! command -v pt-online-schema-change >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo ">> installing percona-toolkit (Debian package)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq percona-toolkit; \
		else \
			echo "pt-online-schema-change is missing: run 'sudo apt-get install -y percona-toolkit', then make test again"; exit 1; \
		fi; \
	fi

.PHONY: dev
dev: tools mariadb ## Start the playground: control plane, MariaDB sites, operator and demo group, in the foreground.
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/bloodraven ./cmd/bloodraven
	$(GO) build -o $(BIN)/bloodraven-dev ./hack/dev
	$(BIN)/bloodraven-dev --root $(ROOT)

.PHONY: dev-restart-operator
SIGNAL ?= TERM
dev-restart-operator: ## Restart the playground's operator, keeping its state (SIGNAL=KILL for a crash); make dev starts the new one.
	@test -s .dev/operator.pid || { echo "no playground operator is running (start one with make dev)"; exit 1; }
	kill -$(SIGNAL) $$(cat .dev/operator.pid)
	@echo "sent SIG$(SIGNAL) to the operator (pid $$(cat .dev/operator.pid)); make dev restarts it and logs it in its terminal"

.PHONY: clean-dev
clean-dev: ## Remove the playground's state (.dev/).
	rm -rf .dev

.PHONY: help
help:
	@awk 'BEGIN{FS=":.*##"} /^[a-zA-Z_-]+:.*##/{printf "  %-16s %s\n",$$1,$$2}' $(MAKEFILE_LIST)
