// SPDX-License-Identifier: Apache-2.0

//go:build container

package deploytest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// podman runs podman against a private store under the test's temporary
// directory: images, containers, build caches and runtime state never touch
// the machine's default store, and removing the directory removes them all.
type podman struct {
	t      *testing.T
	dir    string
	global []string // store, cgroup manager, events, runtime
	limits []string // --ulimit flags for run and build, when the host needs them
}

// storageDrivers is the order to try: overlay is fast; vfs works anywhere,
// e.g. when the temporary directory itself is on overlayfs.
func storageDrivers() []string {
	if d := os.Getenv("BREACH_PODMAN_STORAGE_DRIVER"); d != "" {
		return []string{d}
	}
	return []string{"overlay", "vfs"}
}

func newPodman(t *testing.T, dir, driver, runtime string) *podman {
	p := &podman{t: t, dir: dir}
	p.global = []string{
		"--root", filepath.Join(dir, "storage"),
		"--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "libpod"),
		"--storage-driver", driver,
		// No systemd or journald to rely on in CI containers and sandboxes.
		"--cgroup-manager", "cgroupfs",
		"--events-backend", "file",
	}
	if runtime != "" {
		p.global = append(p.global, "--runtime", runtime)
	}
	return p
}

// engine is the podman command line with this store, for `make container`.
func (p *podman) engine() string {
	return strings.Join(append([]string{"podman"}, p.global...), " ")
}

func (p *podman) command(args ...string) *exec.Cmd {
	cmd := exec.Command("podman", append(append([]string{}, p.global...), args...)...)
	// Buildah keeps RUN --mount=type=cache directories under TMPDIR.
	tmp := filepath.Join(p.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		p.t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	return cmd
}

// try runs podman and returns its combined output and error.
func (p *podman) try(args ...string) (string, error) {
	out, err := p.command(args...).CombinedOutput()
	return string(out), err
}

// must runs podman, failing the test with its output on error.
func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.try(args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(out)
}

// importImage streams a root filesystem from write into `podman import`.
func (p *podman) importImage(ref string, changes []string, write func(io.Writer) error) error {
	args := []string{"import", "--quiet"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	cmd := p.command(append(args, "-", ref)...)
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	go func() { pw.CloseWithError(write(pw)) }()
	out, err := cmd.CombinedOutput()
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if podman quit early
	if err != nil {
		return fmt.Errorf("podman import %s: %v\n%s", ref, err, out)
	}
	return nil
}

// remove deletes every container and image of the private store; the
// caller's temporary directory then goes with everything else.
func (p *podman) remove() {
	for _, args := range [][]string{{"rm", "--all", "--force", "--time", "0"}, {"rmi", "--all", "--force"}} {
		if out, err := p.try(args...); err != nil {
			p.t.Logf("cleanup: podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Whatever the store still has mounted (it should be nothing) must go
	// before the directory can.
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], p.dir+"/") {
				p.t.Logf("cleanup: unmounting %s", f[1])
				_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
			}
		}
	}
}

// hostLimits are --ulimit flags that stay within this process's own hard
// limits. Rootful podman asks for more open files and processes than a host
// without CAP_SYS_RESOURCE (a sandbox, a CI container) may grant, and the
// OCI runtime then fails with "setrlimit ... operation not permitted".
func hostLimits() []string {
	var nofile syscall.Rlimit
	limit := uint64(4096)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil && nofile.Max < 1<<20 {
		limit = nofile.Max
	}
	// 4096 processes per user is plenty for a Go build and the exporter; it
	// is also what such sandboxes let the runtime set.
	return []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", limit, limit), "--ulimit", "nproc=4096:4096"}
}

// setupPodman finds a podman configuration that runs containers on this
// machine, trying storage drivers, then OCI runtimes (the default, then
// runc: crun refuses hosts with controllers in both cgroup v1 and v2), then
// resource limits; it imports the build stand-in with the first store and
// probes with it, since that image has a binary to run.
func setupPodman(t *testing.T, buildRef string, writeBuild func(io.Writer) error, changes []string) *podman {
	t.Helper()
	runtimes := []string{""}
	if _, err := exec.LookPath("runc"); err == nil {
		runtimes = append(runtimes, "runc")
	}
	var tried []string
	for _, driver := range storageDrivers() {
		dir := storeDir(t, driver)
		store := newPodman(t, dir, driver, "")
		if err := store.importImage(buildRef, changes, writeBuild); err != nil {
			tried = append(tried, fmt.Sprintf("storage %s: %v", driver, err))
			store.remove()
			continue
		}
		for _, runtime := range runtimes {
			for _, limits := range [][]string{nil, hostLimits()} {
				p := newPodman(t, dir, driver, runtime)
				p.limits = limits
				args := append(append([]string{"run", "--rm", "--network=none"}, limits...), buildRef, "go", "version")
				out, err := p.try(args...)
				if err == nil {
					t.Logf("podman: storage driver %s, runtime %s, limits %v; build stand-in runs %s",
						driver, orDefault(runtime), limits, strings.TrimSpace(out))
					t.Cleanup(p.remove) // runs before storeDir's removal
					return p
				}
				tried = append(tried, fmt.Sprintf("storage %s, runtime %s, limits %v: %s",
					driver, orDefault(runtime), limits, strings.TrimSpace(out)))
			}
		}
		store.remove()
	}
	t.Fatalf("podman cannot run a container on this machine; tried:\n%s", strings.Join(tried, "\n"))
	return nil
}

// storeDir makes the private store's directory, removed when the test ends.
// Podman refuses a runroot longer than 50 characters, so it lives directly
// in the temporary directory rather than in t.TempDir's deeper tree.
func storeDir(t *testing.T, driver string) string {
	t.Helper()
	base := os.TempDir()
	if len(base) > 24 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "breach-podman-"+driver+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}
