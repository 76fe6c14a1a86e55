# breach_exporter image: a static binary on distroless (CA certificates, no
# shell), running as nonroot. Configuration and secrets are mounted files:
#
#   docker build \
#     --build-arg VERSION="$(cat VERSION)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg BRANCH="$(git rev-parse --abbrev-ref HEAD)" \
#     --build-arg BUILD_USER="$(id -un)@$(hostname)" \
#     --build-arg BUILD_DATE="$(date -u +%Y%m%d-%H:%M:%S)" \
#     -t breach_exporter .
#
#   docker run --rm -p 9799:9799 -p 9800:9800 \
#     -v "$PWD/breach_exporter.yml:/etc/breach_exporter/breach_exporter.yml:ro" \
#     -v "$PWD/secrets:/run/secrets:ro" \
#     breach_exporter --webhook.listen-address=:9800
#
# with api.token_file and webhook.secret_files pointing under /run/secrets.
# Arguments replace the default command, so repeat --config.file when giving
# others. The last stage is the default target; `--target simulator` builds
# the stand-in API used by examples/compose.yaml. `make container` builds it
# with docker or podman. No `# syntax=` line on purpose: with one, BuildKit
# fetches a frontend image from Docker Hub before every build, which fails
# where no registry is reachable (`make container-test` checks this).

ARG GO_VERSION=1.26.8
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM docker.io/library/golang:${GO_VERSION} AS source
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .

FROM source AS build-exporter
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
ARG BRANCH=unknown
ARG BUILD_USER=docker
ARG BUILD_DATE=unknown
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -o /out/breach_exporter \
      -ldflags "-s -w \
        -X 'github.com/prometheus/common/version.Version=${VERSION}' \
        -X 'github.com/prometheus/common/version.Revision=${REVISION}' \
        -X 'github.com/prometheus/common/version.Branch=${BRANCH}' \
        -X 'github.com/prometheus/common/version.BuildUser=${BUILD_USER}' \
        -X 'github.com/prometheus/common/version.BuildDate=${BUILD_DATE}'" \
      . && \
    mkdir -p /out/data

FROM source AS build-simulator
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/breach_simulator ./examples/simulator

# Demo and test only: a stand-in for the breach monitoring service.
FROM ${RUNTIME_IMAGE} AS simulator
COPY --from=build-simulator /out/breach_simulator /bin/breach_simulator
USER nonroot:nonroot
EXPOSE 8099
ENTRYPOINT ["/bin/breach_simulator"]

FROM ${RUNTIME_IMAGE} AS breach_exporter
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="breach_exporter" \
      org.opencontainers.image.description="Prometheus exporter for the breach monitoring service" \
      org.opencontainers.image.source="https://github.com/breach-exporter/breach_exporter" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build-exporter /out/breach_exporter /bin/breach_exporter
# The state snapshot's folder, owned by the non-root user. A volume, so the
# state outlives the container and a read-only root file system leaves it
# writable; distroless has no shell, so the empty folder comes from the
# build stage. It is the working directory, as in Alertmanager's image, so
# the default --storage.path (data/) lands in it even when arguments replace
# the default command. (Relative paths in the config resolve against the
# config file's folder, not the working directory.)
COPY --from=build-exporter --chown=65532:65532 /out/data /var/lib/breach_exporter
VOLUME /var/lib/breach_exporter
WORKDIR /var/lib/breach_exporter
USER nonroot:nonroot
# 9799: /metrics and the /-/ endpoints; 9800: the webhook listener, off
# unless --webhook.listen-address is given.
EXPOSE 9799 9800
ENTRYPOINT ["/bin/breach_exporter"]
CMD ["--config.file=/etc/breach_exporter/breach_exporter.yml"]
