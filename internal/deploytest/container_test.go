// SPDX-License-Identifier: Apache-2.0

//go:build container

package deploytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	imageName   = "localhost/breach_exporter"
	testVersion = "container-test"
	imageTag    = imageName + ":" + testVersion
	// slirp4netns with allow_host_loopback=true shows the host's loopback
	// to the container at this address.
	hostLoopbackFromContainer = "10.0.2.2"
)

// TestContainerImage builds the repository's Dockerfile, unchanged, with
// podman, runs the image read-only, as nonroot, with every capability
// dropped, and checks that it scrapes the API and accepts a signed webhook.
//
// The Dockerfile's base images are LOCAL STAND-INS built by the test (see
// standin_test.go): no registry is reachable from CI.
func TestContainerImage(t *testing.T) {
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(raw)

	// podman ignores a `# syntax=` directive, but BuildKit (docker build)
	// pulls the named frontend image from Docker Hub before reading a line,
	// so a build without registry access fails there. Fail here instead.
	if v, ok := parserDirectives(dockerfile)["syntax"]; ok {
		t.Fatalf("Dockerfile has the parser directive `# syntax=%s`: docker build would pull that frontend image from a registry on every build; remove it", v)
	}
	bases, err := parseBaseImages(dockerfile)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	// A short name (golang:1.26) needs the engine's search registries, and
	// Debian's podman has none configured: name the registry.
	for _, ref := range []string{bases.build, bases.runtime} {
		if qualify(ref) != ref {
			t.Errorf("Dockerfile: FROM %s has no registry; podman without unqualified-search registries cannot resolve it (write %s)", ref, qualify(ref))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	buildRef, runtimeRef := qualify(bases.build), qualify(bases.runtime)
	goroot, err := goCmd(root, "env", "GOROOT", "GOVERSION")
	if err != nil {
		t.Fatalf("go env: %v\n%s", err, goroot)
	}
	gorootDir, goVersion, _ := strings.Cut(strings.TrimSpace(goroot), "\n")
	t.Logf("NOTE: the base images are LOCAL STAND-INS, not the registry images: %s is this machine's %s (%s) with a file module proxy; %s is a minimal distroless-like root filesystem (passwd/group with nonroot %d, CA certificates, /tmp). No registry is contacted (--pull=never, --network=none for the build).",
		buildRef, goVersion, gorootDir, runtimeRef, runtimeUser)

	start := time.Now()
	p := setupPodman(t, buildRef, func(w io.Writer) error {
		return writeToolchainRootfs(w, gorootDir, root)
	}, append(envChanges(toolchainEnv), "WORKDIR /go"))
	if err := p.importImage(runtimeRef, []string{fmt.Sprintf("USER %d", runtimeUser)}, writeRuntimeRootfs); err != nil {
		t.Fatal(err)
	}
	t.Logf("stand-in base images ready in %s", time.Since(start).Round(time.Millisecond))

	// `make container`, as a user runs it, with this test's podman store;
	// --pull=never: nothing may come from a registry.
	start = time.Now()
	make := exec.Command("make", "--no-print-directory", "-C", root, "container",
		"CONTAINER_ENGINE="+p.engine(),
		"CONTAINER_BUILD_FLAGS=--pull=never --network=none "+strings.Join(p.limits, " "),
		"IMAGE="+imageName, "IMAGE_TAG="+testVersion, "VERSION="+testVersion)
	make.Env = p.command().Env
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make container (podman build of the Dockerfile) failed: %v\n%s", err, out)
	}
	t.Logf("make container (podman build of the unchanged Dockerfile): %s", time.Since(start).Round(time.Millisecond))

	// The image itself must not run as root, whatever `--user` says.
	var cfg struct {
		User         string
		ExposedPorts map[string]struct{}
	}
	if err := json.Unmarshal([]byte(p.must("image", "inspect", "--format", "{{json .Config}}", imageTag)), &cfg); err != nil {
		t.Fatal(err)
	}
	if u, _, _ := strings.Cut(cfg.User, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("image runs as %q; want a non-root USER", cfg.User)
	}
	for _, port := range []string{"9799/tcp", "9800/tcp"} {
		if _, ok := cfg.ExposedPorts[port]; !ok {
			t.Errorf("image does not expose %s: %v", port, cfg.ExposedPorts)
		}
	}

	// The API: the repository's simulator on the host's loopback.
	token := "svc_ak_" + randomHex(t, 16)
	secret := randomHex(t, 32)
	api := startAPI(t, token)
	_, apiPort, _ := net.SplitHostPort(api.Listener.Addr().String())

	// Configuration and secrets, mounted read-only. The container's nonroot
	// user must be able to read them; they are throwaway test values.
	conf := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"breach_exporter.yml": fmt.Sprintf(`api:
  base_url: http://%s:%s/api/v1
  token_file: /run/secrets/breach_api_token
addresses: [alice@example.com, newhire@example.com]
webhook:
  secret_files: [/run/secrets/breach_webhook_secret]
`, hostLoopbackFromContainer, apiPort),
		"breach_api_token":      token + "\n",
		"breach_webhook_secret": secret + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(conf, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	name := "breach-exporter-test-" + randomHex(t, 4)
	runArgs := append([]string{"run", "--detach", "--name", name,
		"--read-only", "--read-only-tmpfs=false", // no writable path but the state volume
		"--cap-drop=ALL",
		"--security-opt=no-new-privileges",
		"--user", fmt.Sprintf("%d:%d", runtimeUser, runtimeUser),
		"--network", "slirp4netns:allow_host_loopback=true",
		"--publish", "127.0.0.1::9799", "--publish", "127.0.0.1::9800",
		"--volume", filepath.Join(conf, "breach_exporter.yml") + ":/etc/breach_exporter/breach_exporter.yml:ro",
		"--volume", filepath.Join(conf, "breach_api_token") + ":/run/secrets/breach_api_token:ro",
		"--volume", filepath.Join(conf, "breach_webhook_secret") + ":/run/secrets/breach_webhook_secret:ro",
		// A named volume, as the README runs it: podman fills it from the
		// image's empty state folder, owned by the runtime user.
		"--volume", name + "-data:/var/lib/breach_exporter",
	}, p.limits...)
	runArgs = append(runArgs, imageTag,
		"--config.file=/etc/breach_exporter/breach_exporter.yml", "--webhook.listen-address=:9800")
	p.must(runArgs...)
	defer func() {
		if t.Failed() {
			out, _ := p.try("logs", name)
			t.Logf("container log:\n%s", out)
		}
	}()
	metricsURL := "http://" + hostPort(t, p, name, "9799/tcp")
	webhookURL := "http://" + hostPort(t, p, name, "9800/tcp") + "/webhook"
	t.Logf("container %s: metrics %s, webhook %s, API %s", name, metricsURL, webhookURL, api.URL)

	// Locked down as asked: read-only root, nonroot, no capabilities.
	pid := p.must("inspect", "--format", "{{.State.Pid}}", name)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", runtimeUser, runtimeUser, runtimeUser, runtimeUser),
		"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000",
		"NoNewPrivs:\t1",
	} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("exporter process: no %q in /proc/%s/status:\n%s", want, pid, status)
		}
	}
	if ro := p.must("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name); ro != "true" {
		t.Errorf("root filesystem read-only: %s", ro)
	}

	// /metrics: the exporter read the API from inside the container; then
	// a signed webhook.
	checkScrapeAndWebhook(t, metricsURL, webhookURL, secret, fmt.Sprintf(`version="%s"`, testVersion))

	// Stopped, the exporter writes its state snapshot into the volume, the
	// one place a read-only container can keep it.
	p.must("stop", "--time", "10", name)
	volume := strings.TrimSpace(p.must("volume", "inspect", "--format", "{{.Mountpoint}}", name+"-data"))
	snapshot := filepath.Join(volume, "data", "breach_exporter.snapshot")
	if info, err := os.Stat(snapshot); err != nil || info.Size() == 0 {
		t.Errorf("no state snapshot in the volume after a stop: %v", err)
	}
}

func envChanges(env []string) []string {
	out := make([]string, len(env))
	for i, e := range env {
		out[i] = "ENV " + e
	}
	return out
}

// hostPort is the loopback address podman published the container port on.
func hostPort(t *testing.T, p *podman, name, port string) string {
	t.Helper()
	out := p.must("port", name, port)
	addr := strings.TrimSpace(strings.Split(out, "\n")[0])
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatalf("podman port %s %s: %q", name, port, out)
	}
	return addr
}
