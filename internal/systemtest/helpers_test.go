// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// exporter is the one build of breach_exporter that every test here runs.
var exporter = testkit.NewBinary("github.com/breach-exporter/breach_exporter")

func TestMain(m *testing.M) {
	code := m.Run()
	exporter.Remove()
	os.Exit(code)
}

// binary skips the test under -short (why says what makes it long) and
// otherwise returns the built binary.
func binary(t *testing.T, why string) string {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	return exporter.Path(t)
}

// process is a started binary that a test may stop itself.
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	logs   *testkit.SyncBuffer
	exited chan error
	done   bool
}

// startProcess starts bin; whatever is still running at the end of the test
// is stopped (SIGTERM, then SIGKILL), and its log shown when the test failed.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command(bin, args...), logs: &testkit.SyncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.done {
			p.stop(syscall.SIGTERM)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", filepath.Base(bin), tail(p.logs.String(), 4000))
		}
	})
	return p
}

// stop sends sig and waits for the exit (SIGKILL after 10 s); it returns
// the exit error.
func (p *process) stop(sig syscall.Signal) error {
	p.done = true
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		return <-p.exited
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// newStandIn is the service's stand-in with one verified address (alice)
// and one unverified (bob); every other address is not monitored.
func newStandIn(t *testing.T) *testkit.StandIn {
	api := testkit.NewStandIn(t, nil)
	api.Answer("alice@example.com", sim.Verified(breach.SourceState{
		Source: "archive", BreachCount: 2, SourceDBs: []string{"LinkedIn 2012", "Adobe 2013"},
		FieldsExposed: []string{"password", "username"}, HasPlaintextPassword: true,
		LastScannedAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), LastChangedAt: time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC),
	}))
	api.Answer("bob@example.com", sim.Unverified())
	return api
}

// receiverConfig writes a config for api with alice@example.com, the
// webhook secret and extra (more top-level YAML, or nothing), and returns
// its path.
func receiverConfig(t *testing.T, api *testkit.StandIn, secret, extra string) string {
	t.Helper()
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	testkit.WriteFile(t, filepath.Join(dir, "secret"), secret+"\n")
	cfg := filepath.Join(dir, "breach_exporter.yml")
	testkit.WriteFile(t, cfg, fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\n"+
		"addresses: [alice@example.com]\nwebhook:\n  secret_files: [secret]\n", api.BaseURL())+extra)
	return cfg
}

// servesMetrics waits until url answers 200.
func servesMetrics(t *testing.T, url string) {
	t.Helper()
	testkit.Eventually(t, "/metrics to answer", func() bool { code, _ := testkit.Get(t, url); return code == http.StatusOK })
}

// signedRequest is a POST of body to url, signed with secret as the
// service signs.
func signedRequest(t *testing.T, url, secret string, body []byte) *http.Request {
	return testkit.SignedRequest(t, url, body, sim.Sign([]byte(secret), body))
}

// sampleValue is the value of the series line that starts with series in
// an exposition, or -1 when there is none.
func sampleValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// The pace of a trickling client.
const (
	slowTick   = 100 * time.Millisecond
	slowRedial = 500 * time.Millisecond // pause after a closed connection
)

// trickle keeps one slow connection to addr from local: it writes start,
// then one byte every slowTick, and dials again slowRedial after the
// server closes it, until stop closes.
func trickle(addr string, local *net.TCPAddr, start string, stop <-chan struct{}, dials, closedBy *atomic.Int64) {
	d := net.Dialer{Timeout: time.Second, LocalAddr: local}
	for {
		dials.Add(1)
		c, err := d.Dial("tcp", addr)
		if err == nil {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte(start))
			tick := time.NewTicker(slowTick)
			for err == nil {
				select {
				case <-stop:
					tick.Stop()
					c.Close()
					return
				case <-tick.C:
				}
				c.SetWriteDeadline(time.Now().Add(time.Second))
				_, err = c.Write([]byte("a"))
			}
			tick.Stop()
			c.Close()
			closedBy.Add(1)
		}
		select {
		case <-stop:
			return
		case <-time.After(slowRedial):
		}
	}
}

// peakKB is the process's peak and current resident set (VmHWM, VmRSS).
func peakKB(t *testing.T, pid int) (hwm, rss int) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		fmt.Sscanf(line, "VmHWM: %d kB", &hwm)
		fmt.Sscanf(line, "VmRSS: %d kB", &rss)
	}
	return hwm, rss
}
