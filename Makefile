# breach_exporter build and test entry points. `make test` is the test command
# the README and CI use; on a machine without promtool it installs Debian's
# `prometheus` package (needs root and apt), and says so.

GO        ?= go
PROMTOOL  ?= promtool
BIN       := breach_exporter
SIMULATOR := breach_simulator
PKG       := github.com/prometheus/common/version
# The release's version: VERSION holds it (the image tag, the chart's
# appVersion, the kustomize image and the README name the same one; a test
# in examples/ checks that). A release is tagged v$(VERSION).
VERSION   ?= $(shell cat VERSION)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X $(PKG).Version=$(VERSION) -X $(PKG).Revision=$(REVISION) \
             -X $(PKG).Branch=$(BRANCH) -X $(PKG).BuildUser=$(shell id -un)@$(shell hostname) \
             -X $(PKG).BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)

.PHONY: all build test fmt-check tidy-check vet staticcheck lint unit cross-build rules-check promtool redis-server promtool3 prometheus3 demo e2e e2e-deps soak bench prometheusrule clean \
        container container-deps container-test systemd-test kubernetes-test deploy-test replicas-test store-topologies-test \
        release generate chart-generate chart-tools chart-test dashboards-check

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .
	CGO_ENABLED=0 $(GO) build -trimpath -o $(SIMULATOR) ./examples/simulator

test: promtool fmt-check tidy-check vet staticcheck lint unit cross-build rules-check dashboards-check

# The Go modules of the repository. The root one is the exporter's and holds
# only what the exporter, its examples and their tests need; each other one
# has its own go.mod (with a replace of the exporter's module by the
# repository root) so that its dependencies stay out of the exporter's:
# bench/ the benchmarks, examples/simulator/openapitest/ kin-openapi (the
# simulator's OpenAPI validation test), examples/kubernetes/test/ the
# Kubernetes and kustomize types.
GO_MODULES := . bench examples/simulator/openapitest examples/kubernetes/test

# go.mod and go.sum of every module must be what `go mod tidy` writes; run it
# in the module named to fix them (after the root's changes, the nested
# modules too: they read its go.mod through their replace).
tidy-check:
	@set -e; for m in $(GO_MODULES); do \
	  (cd $$m && $(GO) mod tidy -diff) || { echo "go.mod or go.sum of $$m is not tidy: run go mod tidy in $$m"; exit 1; }; \
	done

# promtool comes from Debian's prometheus package; install it when missing.
promtool:
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
	  echo ">> promtool not found: installing Debian's prometheus package (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	@$(PROMTOOL) --version | head -1

# The shared store's tests (internal/sharedstore, and the replicated mode's)
# run a real redis-server: Debian's redis-server package; install it when
# missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo ">> redis-server not found: installing Debian's redis-server package (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }
	@redis-server --version

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Every module with every build tag its files use (their //go:build lines:
# e2e in internal/e2e, container and systemd in internal/deploytest, bench in
# bench/). No file asks for a tag to be absent, so one run with all of a
# module's tags sees all of its files; TestLintCoversEveryBuildTag (in
# examples/) fails when a new tag or module is missing here. Each entry is
# folder:tags.
LINT_MODULES := .:e2e,container,systemd bench:bench examples/simulator/openapitest: examples/kubernetes/test:

# $(call each_module,name,command): command in every module's folder, with
# the module's tags in $$tags.
each_module = @set -e; for mt in $(LINT_MODULES); do \
	  m=$${mt%%:*}; tags=$${mt\#*:}; echo ">> $(1) $$m (tags: $${tags:-none})"; \
	  (cd $$m && $(2)); \
	done

vet:
	$(call each_module,go vet,$(GO) vet -tags "$$tags" ./...)

# Pinned, fetched through the module proxy: no install step, same result
# on every machine.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(call each_module,staticcheck,$(GO) run $(STATICCHECK) -tags "$$tags" ./...)

# golangci-lint with .golangci.yml (unchecked errors, ineffective
# assignments, misspellings, a few revive rules, and the size limits:
# cyclomatic complexity 15 and 80 lines for the code the binary links),
# pinned and fetched through the module proxy like staticcheck. From cold
# caches (modules, build, lint) it took 3.5 minutes on the shared 2-core
# machine at load 6: 1.8 to build it (once per Go build cache), 1.7 to
# lint the four modules; with warm caches the four take about 13 s.
GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
lint:
	$(call each_module,golangci-lint,$(GO) run $(GOLANGCI_LINT) run --config "$(CURDIR)/.golangci.yml" --build-tags "$$tags" ./...)

# BREACH_REQUIRE_PROMTOOL makes the promtool check of the golden expositions
# fail instead of skip without promtool. The timeout is per package:
# internal/systemtest, which runs the built binary, takes 8 to 10 minutes
# under -race on a busy 2-core machine (its worst-case memory test alone 8),
# past go test's default of 10.
unit: redis-server
	BREACH_REQUIRE_PROMTOOL=1 $(GO) test -race -count=1 -timeout 20m ./...
	cd examples/simulator/openapitest && $(GO) test -race -count=1 ./...

# Every package keeps building for the release's platforms other than
# Linux (macOS; Linux is what every other step builds). Windows is not a
# target: the state folder's lock (flock) and its check for a journal
# segment unlinked under it (fstat's link count) in internal/persist are
# Unix-only.
CROSS_PLATFORMS = $(filter-out linux/%,$(RELEASE_PLATFORMS))
cross-build:
	@set -e; for p in $(CROSS_PLATFORMS); do \
	  echo ">> GOOS=$${p%/*} GOARCH=$${p#*/} go build ./..."; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build ./...; \
	done

# The rules and their tests on both majors users run: Debian's promtool
# (2.42) and promtool 3 (built into TOOLS_BIN, see promtool3). Their range
# selectors differ at a window's start (3.x leaves it out): the tests hold
# both to the same answer.
rules-check: promtool promtool3
	$(PROMTOOL) check rules alerts/breach_exporter.rules.yml
	$(PROMTOOL) test rules alerts/breach_exporter.rules.test.yml
	$(PROMTOOL3) check rules alerts/breach_exporter.rules.yml
	$(PROMTOOL3) test rules alerts/breach_exporter.rules.test.yml

# Every dashboard in dashboards/ type-checked against Grafana's own dashboard
# types (@grafana/schema, pinned with TypeScript in dashboards/schema-check/
# package-lock.json). Needs node and npm: installs Debian's nodejs and npm
# packages with apt-get (as root) when either is missing, and says so.
# npm ci runs again only when the lock file changes, the check only when a
# dashboard or the check changes (a few seconds).
SCHEMA_CHECK := dashboards/schema-check
dashboards-check: $(SCHEMA_CHECK)/.generated/checked

$(SCHEMA_CHECK)/node_modules/.package-lock.json: $(SCHEMA_CHECK)/package-lock.json
	@{ command -v node && command -v npm; } >/dev/null 2>&1 || { \
	  echo ">> node or npm not found: installing Debian's nodejs and npm packages (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	cd $(SCHEMA_CHECK) && npm ci --no-audit --no-fund --loglevel=error

$(SCHEMA_CHECK)/.generated/checked: $(SCHEMA_CHECK)/node_modules/.package-lock.json $(SCHEMA_CHECK)/check.mjs $(wildcard dashboards/*.json)
	cd $(SCHEMA_CHECK) && node check.mjs
	@touch $@

clean:
	rm -f $(BIN) $(SIMULATOR)
	rm -rf $(RELEASE_DIR)

# Release tarballs, one per platform: the version-stamped binary, LICENSE,
# README.md and an example config (examples/release/breach_exporter.yml),
# under breach_exporter-$(VERSION).<os>-<arch>/, with sha256sums.txt, in
# $(RELEASE_DIR) (gitignored). To release: move the CHANGELOG's Unreleased
# entries under a new version heading, write that version to VERSION, run
# `make generate` and `make release`, tag v$(VERSION).
RELEASE_DIR       ?= .tarballs
# Linux and macOS only: Windows does not build (see cross-build).
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

release:
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@set -e; for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=$(BIN)-$(VERSION).$$os-$$arch; dir=$(RELEASE_DIR)/$$name; \
	  echo ">> $$name"; mkdir -p $$dir; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$dir/$(BIN) .; \
	  if [ "$$os/$$arch" = "$$($(GO) env GOOS)/$$($(GO) env GOARCH)" ]; then \
	    $$dir/$(BIN) --version 2>&1 | grep -q "version $(VERSION) " || { echo "$$dir/$(BIN) --version does not name $(VERSION)"; exit 1; }; fi; \
	  cp -r LICENSE README.md docs examples/release/breach_exporter.yml $$dir/; \
	  tar -C $(RELEASE_DIR) --owner=0 --group=0 --numeric-owner -czf $$dir.tar.gz $$name; \
	  rm -rf $$dir; \
	done
	cd $(RELEASE_DIR) && sha256sum *.tar.gz > sha256sums.txt && cat sha256sums.txt

# The README's first command: simulator + exporter on loopback until Ctrl-C.
demo: build
	./examples/demo.sh

# Regenerate what is copied from alerts/ and dashboards/: the kustomize
# PrometheusRule and the Helm chart's rules and dashboards (a test fails
# when any is stale). prometheusrule and chart-generate are other names for it.
generate:
	$(GO) run ./examples/kubernetes/gen

prometheusrule chart-generate: generate

# 60 s of real time: simulator sweeps and scrapes every second (CI runs it).
soak:
	$(GO) test -race -count=1 -v -run TestSoak ./internal/integration/ -soak=60s

# The end-to-end test runs Debian's prometheus and prometheus-alertmanager
# (Alertmanager is prometheus-alertmanager there, alertmanager upstream),
# and its browser test (TestAcknowledgeFromThePage) Debian's chromium,
# headless; installs the missing ones with apt-get (as root) and says so.
e2e-deps:
	@{ command -v prometheus && { command -v prometheus-alertmanager || command -v alertmanager; }; } >/dev/null 2>&1 || { \
	  echo ">> prometheus or alertmanager not found: installing Debian's prometheus and prometheus-alertmanager packages (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo ">> chromium not found: installing Debian's chromium package (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@prometheus --version 2>&1 | head -1
	@{ prometheus-alertmanager --version 2>&1 || alertmanager --version 2>&1; } | head -1
	@chromium --version 2>/dev/null | head -1

# Twice: with Debian's Prometheus (2.x) and with Prometheus 3 (prometheus3).
e2e: e2e-deps prometheus3
	$(GO) test -race -tags e2e -count=1 -v -timeout 10m ./internal/e2e/
	BREACH_E2E_PROMETHEUS=$(PROMETHEUS3) $(GO) test -race -tags e2e -count=1 -v -timeout 10m ./internal/e2e/

# The replicated mode on real parts: a redis-server, three replicas of the
# built exporter, a stand-in API enforcing its fixed 60-second window, and
# Debian's Prometheus and Alertmanager from the shipped examples and rules;
# a rolling restart, a SIGKILL and 60 s without the store while 2,000
# signed alerts are sent, and Alertmanager sends exactly the one page
# (internal/e2e/replicas_test.go); replicas started on empty folders while
# the store is paused, then restarted empty, and a maxSurge-style
# replacement (replicas_converge_test.go); an upgrade from the previous
# release and a rollback; a rolling restart with --web.shutdown-delay while
# a sender posts to each replica every 50 ms (replicas_rollout_test.go);
# breach_api_up sampled every second on every replica. About 8.5 minutes on
# 2 cores, without -race: the processes under test are built binaries.
replicas-test: e2e-deps redis-server
	BREACH_E2E_REPLICAS=1 $(GO) test -tags e2e -count=1 -v -timeout 15m -run '^TestReplicas' ./internal/e2e/

# The store topologies platform teams run, on loopback from Debian's
# packages: a 3-master Redis Cluster over TLS with an ACL user, and a
# primary, a replica and three Sentinels with a failover by SIGKILL while
# alerts arrive (internal/sharedstore and internal/exporter, Test
# Topology*). Installs redis-server, redis-sentinel and redis-tools when
# missing. About 1 minute.
store-topologies-test:
	@for p in redis-server redis-sentinel redis-cli; do command -v $$p >/dev/null 2>&1 || missing=1; done; \
	  [ -z "$$missing" ] || { echo ">> installing Debian's redis-server, redis-sentinel and redis-tools (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-sentinel redis-tools >/dev/null; }
	BREACH_STORE_TOPOLOGIES=1 $(GO) test -race -count=1 -v -timeout 8m -run '^TestTopology' ./internal/sharedstore/ ./internal/exporter/

# Benchmarks against baselines measured in the same run (about 5 minutes);
# prints the table and writes bench/results.json. See bench/README.md. The
# user-cost figures run a real Prometheus: the promtool target installs
# Debian's prometheus package, which holds both, when it is missing.
bench: promtool
	cd bench && $(GO) run ./cmd/breach_bench -out results.json

# The container image, built with docker when a docker engine answers, else
# with podman (CONTAINER_ENGINE=podman to choose). The base images come from
# their registries. IMAGE and IMAGE_TAG name the result;
# CONTAINER_BUILD_FLAGS adds build options (the container test's --pull=never).
CONTAINER_ENGINE      ?= $(shell { docker info >/dev/null 2>&1 && echo docker; } || command -v podman 2>/dev/null)
CONTAINER_BUILD_FLAGS ?=
IMAGE                 ?= ghcr.io/breach-exporter/breach_exporter
IMAGE_TAG             ?= v$(VERSION)

container:
	@test -n "$(CONTAINER_ENGINE)" || { echo "make container needs docker or podman"; exit 1; }
	$(CONTAINER_ENGINE) build $(CONTAINER_BUILD_FLAGS) \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg BRANCH=$(BRANCH) \
	  --build-arg BUILD_USER=$(shell id -un)@$(shell hostname) --build-arg BUILD_DATE=$(shell date -u +%Y%m%d-%H:%M:%S) \
	  --build-arg TARGETOS=$(shell $(GO) env GOOS) --build-arg TARGETARCH=$(shell $(GO) env GOARCH) \
	  -t $(IMAGE):$(IMAGE_TAG) .

# The container test needs podman, slirp4netns (the container's network with
# a loopback port publish) and, on hosts whose cgroups crun refuses, runc:
# installs the missing ones from Debian with apt-get (as root) and says so.
container-deps:
	@missing=""; for c in podman slirp4netns runc; do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	  if [ -n "$$missing" ]; then \
	    echo ">>$$missing not found: installing Debian's$$missing packages (apt-get, needs root)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi
	@podman --version

# Builds the unchanged Dockerfile with podman from LOCAL STAND-INS of its
# base images (no registry is reachable in CI), runs the image read-only,
# nonroot, without capabilities, scrapes it and posts a signed webhook.
# Everything lives in a private podman store under the temporary directory
# and is removed afterwards. About 1.5 minutes.
container-test: container-deps
	$(GO) test -tags container -count=1 -v -timeout 10m ./internal/deploytest/

# systemd-analyze verify and security --offline on examples/breach_exporter.service
# (exposure at most 2.0), its ExecStart pointed at a fresh build, then the unit
# started under a real systemd booted with systemd-nspawn (needs root).
# Installs Debian's systemd and systemd-container packages with apt-get (as
# root) when systemd-analyze or systemd-nspawn is missing, and says so.
# A few seconds.
systemd-test:
	@{ command -v systemd-analyze && command -v systemd-nspawn; } >/dev/null 2>&1 || { \
	  echo ">> systemd-analyze or systemd-nspawn not found: installing Debian's systemd and systemd-container packages (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd systemd-container >/dev/null; }
	@systemd-analyze --version | head -1
	$(GO) test -tags systemd -count=1 -v ./internal/deploytest/

# Builds examples/kubernetes and its accounts overlay
# (examples/kubernetes-accounts) with kustomize's library and renders the
# Helm chart with helm template (defaults and every ci/*-values.yaml),
# decodes every object strictly into its k8s.io/api or Prometheus Operator
# type, then checks the image reference, resources, security context,
# NetworkPolicy and ServiceMonitor labels, that the chart installs the
# kustomization's image, config and rules, and that every file the overlay's
# config names is mounted (its --config.check, on the built exporter, runs
# against the pod's files). Its own module keeps those dependencies out of
# go.mod. About 20 seconds once the modules and the tools are there.
kubernetes-test: chart-tools
	cd examples/kubernetes/test && HELM=$(HELM) $(GO) test -count=1 -v ./...

# helm and helm-unittest, built from the Go module proxy at pinned versions
# into TOOLS_BIN (outside the repository; nothing is installed system-wide
# and no helm plugin directory is touched). helm-unittest's go.mod has a
# replace directive, which `go install pkg@version` refuses, so it is built
# in its downloaded (checksum-verified) module and run as a program, not as
# a helm plugin. The first build takes a few minutes; later runs reuse it.
TOOLS_BIN             ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/breach_exporter/bin
HELM_VERSION          := v3.22.0
HELM_UNITTEST_VERSION := v1.1.2
HELM                  := $(TOOLS_BIN)/helm-$(HELM_VERSION)
# What helm's own Makefile stamps in: its version, and the Kubernetes version
# `helm template` and `helm lint` assume (1.<client-go's minor>; unstamped
# it is 1.20, which the chart's kubeVersion refuses).
HELM_K8S_MINOR        := 37
HELM_LDFLAGS          := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
                         -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 \
                         -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) \
                         -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 \
                         -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)
HELM_UNITTEST         := $(TOOLS_BIN)/helm-unittest-$(HELM_UNITTEST_VERSION)

chart-tools: $(HELM) $(HELM_UNITTEST)

# Prometheus 3's promtool and server, built from the Go module proxy like
# helm (v0.316.0 is the module version of Prometheus 3.x): the rule tests
# and the e2e run on them as well as on Debian's 2.42. The first build
# takes several minutes; later runs reuse it.
PROMETHEUS3_MODULE := v0.316.0
PROMTOOL3          := $(TOOLS_BIN)/promtool-$(PROMETHEUS3_MODULE)
PROMETHEUS3        := $(TOOLS_BIN)/prometheus-$(PROMETHEUS3_MODULE)

promtool3: $(PROMTOOL3)
	@$(PROMTOOL3) --version | head -1
prometheus3: $(PROMETHEUS3)
	@$(PROMETHEUS3) --version | head -1

$(PROMTOOL3) $(PROMETHEUS3):
	@echo ">> building $(notdir $@) from the Go module proxy into $(TOOLS_BIN)"
	@mkdir -p $(TOOLS_BIN)/.gobin3
	GOBIN=$(TOOLS_BIN)/.gobin3 CGO_ENABLED=0 $(GO) install -trimpath github.com/prometheus/prometheus/cmd/$(firstword $(subst -, ,$(notdir $@)))@$(PROMETHEUS3_MODULE)
	mv $(TOOLS_BIN)/.gobin3/$(firstword $(subst -, ,$(notdir $@))) $@

$(HELM):
	@echo ">> building helm $(HELM_VERSION) from the Go module proxy into $(TOOLS_BIN)"
	@mkdir -p $(TOOLS_BIN)/.gobin
	GOBIN=$(TOOLS_BIN)/.gobin CGO_ENABLED=0 $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS_BIN)/.gobin/helm $@

# `go mod download` runs in an empty temporary folder, outside every module
# (GOWORK=off): inside this repository it would load, and may rewrite, our
# go.mod, leaving the tree dirty for a following `make release`.
$(HELM_UNITTEST):
	@echo ">> building helm-unittest $(HELM_UNITTEST_VERSION) from the Go module proxy into $(TOOLS_BIN)"
	@mkdir -p $(TOOLS_BIN)
	tmp=$$(mktemp -d) && \
	  dir=$$(cd "$$tmp" && GOWORK=off GOFLAGS=-mod=mod $(GO) mod download -json github.com/helm-unittest/helm-unittest@$(HELM_UNITTEST_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  rmdir "$$tmp"; \
	  test -n "$$dir" && cd "$$dir" && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath -o $@ ./cmd/helm-unittest

# The Helm chart: helm lint --strict with the defaults and every
# ci/*-values.yaml, then the helm-unittest suites (charts/breach-exporter/tests).
# kubernetes-test renders the same values files and decodes every object
# strictly. A few seconds once the tools are built.
CHART := charts/breach-exporter
chart-test: chart-tools
	$(HELM) lint --strict $(CHART)
	@set -e; for f in $(CHART)/ci/*-values.yaml; do echo ">> helm lint --strict -f $$f"; $(HELM) lint --strict --quiet $(CHART) -f $$f; done
	$(HELM_UNITTEST) --strict $(CHART)

# The deployment files on real engines (CI runs it after make test).
deploy-test: systemd-test kubernetes-test chart-test container-test
