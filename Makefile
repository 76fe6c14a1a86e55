# breach_exporter build and test entry points. `make test` is the test command
# the README and CI use; on a machine without promtool it installs Debian's
# `prometheus` package (needs root and apt), and says so.

GO        ?= go
PROMTOOL  ?= promtool
BIN       := breach_exporter
SIMULATOR := breach_simulator
PKG       := github.com/prometheus/common/version
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH    ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X $(PKG).Version=$(VERSION) -X $(PKG).Revision=$(REVISION) \
             -X $(PKG).Branch=$(BRANCH) -X $(PKG).BuildUser=$(shell id -un)@$(shell hostname) \
             -X $(PKG).BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)

.PHONY: all build test fmt-check vet staticcheck unit rules-check promtool demo e2e e2e-deps soak bench prometheusrule clean \
        container container-deps container-test systemd-test kubernetes-test deploy-test

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) .
	CGO_ENABLED=0 $(GO) build -trimpath -o $(SIMULATOR) ./examples/simulator

test: promtool fmt-check vet staticcheck unit rules-check

# promtool comes from Debian's prometheus package; install it when missing.
promtool:
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
	  echo ">> promtool not found: installing Debian's prometheus package (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }
	@$(PROMTOOL) --version | head -1

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags e2e ./internal/e2e/

# Pinned, fetched through the module proxy: no install step, same result
# on every machine. The e2e tag covers the end-to-end test's files too.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
staticcheck:
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags e2e ./internal/e2e/

# BREACH_REQUIRE_PROMTOOL makes the scrape test fail instead of skip without promtool.
unit:
	BREACH_REQUIRE_PROMTOOL=1 $(GO) test -race -count=1 ./...

rules-check:
	$(PROMTOOL) check rules alerts/breach_exporter.rules.yml
	$(PROMTOOL) test rules alerts/breach_exporter.rules.test.yml

clean:
	rm -f $(BIN) $(SIMULATOR)

# The README's first command: simulator + exporter on loopback until Ctrl-C.
demo: build
	./examples/demo.sh

# Regenerate the Kubernetes PrometheusRule from alerts/ (a test fails when stale).
prometheusrule:
	$(GO) run ./examples/kubernetes/gen

# 60 s of real time: simulator sweeps and scrapes every second (CI runs it).
soak:
	$(GO) test -race -count=1 -v -run TestSoak ./internal/integration/ -soak=60s

# The end-to-end test runs Debian's prometheus and prometheus-alertmanager
# (Alertmanager is prometheus-alertmanager there, alertmanager upstream);
# installs both with apt-get (as root) when either is missing.
e2e-deps:
	@{ command -v prometheus && { command -v prometheus-alertmanager || command -v alertmanager; }; } >/dev/null 2>&1 || { \
	  echo ">> prometheus or alertmanager not found: installing Debian's prometheus and prometheus-alertmanager packages (apt-get, needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus prometheus-alertmanager >/dev/null; }
	@prometheus --version 2>&1 | head -1
	@{ prometheus-alertmanager --version 2>&1 || alertmanager --version 2>&1; } | head -1

e2e: e2e-deps
	$(GO) test -race -tags e2e -count=1 -v -timeout 8m ./internal/e2e/

# Benchmarks against baselines measured in the same run (about 2 minutes);
# prints the table and writes bench/results.json. See bench/README.md.
bench:
	$(GO) run ./bench/cmd/breach_bench -out bench/results.json

# The container image, built with docker when a docker engine answers, else
# with podman (CONTAINER_ENGINE=podman to choose). The base images come from
# their registries. IMAGE and IMAGE_TAG name the result;
# CONTAINER_BUILD_FLAGS adds build options (the container test's --pull=never).
CONTAINER_ENGINE      ?= $(shell { docker info >/dev/null 2>&1 && echo docker; } || command -v podman 2>/dev/null)
CONTAINER_BUILD_FLAGS ?=
IMAGE                 ?= ghcr.io/breach-exporter/breach_exporter
IMAGE_TAG             ?= $(VERSION)

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

# Builds examples/kubernetes with kustomize's library and decodes every object
# strictly into its k8s.io/api or Prometheus Operator type, then checks the
# image reference, resources, NetworkPolicy and ServiceMonitor labels. Its own
# module keeps those dependencies out of go.mod. A few seconds once the
# modules are downloaded.
kubernetes-test:
	cd examples/kubernetes/test && $(GO) test -count=1 -v ./...

# The deployment files on real engines (CI runs it after make test).
deploy-test: systemd-test kubernetes-test container-test
