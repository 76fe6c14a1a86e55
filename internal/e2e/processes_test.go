// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// versionPackage is where the exporter's build info comes from; the test
	// stamps its own version so that the build-info panel has a known value.
	versionPackage = "github.com/prometheus/common/version"
	testVersion    = "e2e"

	// stopTimeout bounds a graceful shutdown after SIGTERM before SIGKILL.
	stopTimeout = 10 * time.Second
	// logTail bounds how much of each process's log a failure prints.
	logTail = 32 << 10
)

// repoRoot is the module root: this package lives two levels below it.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found above the e2e package: %v", err)
	}
	return root
}

// lookPath finds the first of names on PATH; the Debian and upstream
// packages name Alertmanager differently.
func lookPath(t *testing.T, names ...string) string {
	t.Helper()
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatalf("none of %v is on PATH: install Debian's prometheus and prometheus-alertmanager packages (make e2e does)", names)
	return ""
}

// goBuild builds pkg of the module at root into out, statically and with the
// test's version stamped, as the Makefile builds releases.
func goBuild(ctx context.Context, t *testing.T, root, out, pkg string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-X "+versionPackage+".Version="+testVersion, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, output)
	}
}

// freeAddrs returns n distinct free loopback addresses. All n listeners are
// open at once so that the kernel cannot hand out the same port twice.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	listeners := make([]net.Listener, n)
	for i := range listeners {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners[i] = l
		addrs[i] = l.Addr().String()
	}
	for _, l := range listeners {
		l.Close()
	}
	return addrs
}

// process is a program the test started; its output goes to a log file in
// the test's directory.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once the process has exited
	err     error         // Wait's result, valid once done is closed
	stopped atomic.Bool   // the test stopped it on purpose (stopNow)
}

// startProcess starts bin and registers its shutdown: SIGTERM, then SIGKILL
// after stopTimeout, always waited for; its log is printed if the test failed.
func startProcess(t *testing.T, dir, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			p.printLog(t)
		}
	})
	return p
}

// exited reports an error when the process is no longer running, unless
// the test stopped it.
func (p *process) exited() error {
	if p.stopped.Load() {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s exited early (%v); its log is %s", p.name, p.err, p.logPath)
	default:
		return nil
	}
}

// stop ends the process and waits for it. Every program here shuts down
// cleanly on SIGTERM, so anything else is a failure.
func (p *process) stop(t *testing.T) {
	if p.stopped.Load() {
		return // stopNow reported its outcome
	}
	if err := p.exited(); err != nil {
		t.Error(err)
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal %s: %v", p.name, err)
	}
	timeout := time.NewTimer(stopTimeout)
	defer timeout.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("%s did not exit cleanly on SIGTERM: %v", p.name, p.err)
		}
	case <-timeout.C:
		t.Errorf("%s still running %s after SIGTERM: killed", p.name, stopTimeout)
		p.cmd.Process.Kill()
		<-p.done
	}
}

// stopNow stops the process as a scenario's fault (SIGTERM, then SIGKILL)
// and reports how it went; exited and stop then leave it alone.
func (p *process) stopNow() error {
	if err := p.exited(); err != nil {
		return err
	}
	p.stopped.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %v", p.name, err)
	}
	timeout := time.NewTimer(stopTimeout)
	defer timeout.Stop()
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s did not exit cleanly on SIGTERM: %v", p.name, p.err)
		}
		return nil
	case <-timeout.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s still running %s after SIGTERM: killed", p.name, stopTimeout)
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it;
// exited and stop then leave it alone.
func (p *process) kill() error {
	if err := p.exited(); err != nil {
		return err
	}
	p.stopped.Store(true)
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %v", p.name, err)
	}
	<-p.done
	return nil
}

func (p *process) printLog(t *testing.T) {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Logf("%s log: %v", p.name, err)
		return
	}
	if len(data) > logTail {
		data = append([]byte("...\n"), data[len(data)-logTail:]...)
	}
	t.Logf("----- %s log (%s) -----\n%s", p.name, p.logPath, data)
}

// programs finds Prometheus and Alertmanager and builds the exporter and
// the simulator of the repository at root into dir. BREACH_E2E_PROMETHEUS
// names another Prometheus binary: make e2e runs the tests with Debian's
// (2.x) and with Prometheus 3.
func programs(t *testing.T, root, dir string) (prometheus, alertmanager, exporter, simulator string) {
	t.Helper()
	prometheus = os.Getenv("BREACH_E2E_PROMETHEUS")
	if prometheus == "" {
		prometheus = lookPath(t, "prometheus")
	}
	alertmanager = lookPath(t, "prometheus-alertmanager", "alertmanager")
	exporter = filepath.Join(dir, "breach_exporter")
	simulator = filepath.Join(dir, "breach_simulator")
	buildCtx := testContext(t, buildTimeout)
	goBuild(buildCtx, t, root, exporter, ".")
	goBuild(buildCtx, t, root, simulator, "./examples/simulator")
	return prometheus, alertmanager, exporter, simulator
}
