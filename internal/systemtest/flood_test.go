// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Bounds of the flood test: the flood, and what the process must stay under.
const (
	floodConnections = 20_000
	floodWorkers     = 2_000
	floodClients     = 64 // source addresses 127.0.1.1 to 127.0.1.64
	floodDialTimeout = time.Second
	maxChildFDs      = 2_000
	recoveryDeadline = 15 * time.Second
	// The test process holds the flood's client ends; the child inherits the
	// same limit, so only --webhook.max-connections can keep it low.
	floodRlimit = 40_000
)

// TestWebhookFloodAgainstTheBinary builds breach_exporter and floods its
// webhook port with 20,000 connections that each send GET /-/healthy and
// then sit idle (an attack that, without a connection limit, takes the
// process to 20,000 descriptors and makes /metrics and signed webhooks time
// out). While the
// flood lasts the process stays under 2,000 descriptors and /metrics
// answers; once it stops, a signed alert is accepted within 15 s.
func TestWebhookFloodAgainstTheBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts descriptors in /proc")
	}
	bin := binary(t, "builds the binary and opens 20,000 connections")
	raiseFDLimit(t, floodRlimit)

	cfg := receiverConfig(t, newStandIn(t), "flood-test-secret", "")
	webAddr, hookAddr := testkit.FreeAddress(t), testkit.FreeAddress(t)

	child := startProcess(t, bin, "--config.file", cfg, "--web.listen-address", webAddr,
		"--webhook.listen-address", hookAddr, "--log.level", "warn", "--storage.path", "")
	metricsURL := "http://" + webAddr + "/metrics"
	servesMetrics(t, metricsURL)
	t.Logf("child: %s", openFilesLimit(t, child.cmd.Process.Pid))

	// The flood, with a watcher sampling the child's descriptors and
	// /metrics until it is over.
	var (
		mu       sync.Mutex
		conns    []net.Conn
		failed   atomic.Int64
		ownLimit atomic.Int64 // dials that failed on the test's own descriptor limit
		next     atomic.Int64
		wg       sync.WaitGroup
		flooding = make(chan struct{})
	)
	start := time.Now()
	for w := range floodWorkers {
		// From 64 addresses, so that the cap per client (16) leaves the
		// listener's own limit to be reached.
		d := net.Dialer{Timeout: floodDialTimeout, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+w%floodClients))}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= floodConnections {
				c, err := d.Dial("tcp", hookAddr)
				if errors.Is(err, syscall.EMFILE) {
					ownLimit.Add(1)
				}
				if err != nil {
					failed.Add(1)
					continue
				}
				c.SetWriteDeadline(time.Now().Add(floodDialTimeout))
				c.Write([]byte("GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")) // and never read the answer
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(flooding) }()

	maxFDs, scrapes, badScrapes := 0, 0, 0
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for done := false; !done; {
		select {
		case <-flooding:
			done = true
		case <-time.After(200 * time.Millisecond): // sampling interval
		}
		maxFDs = max(maxFDs, countFDs(t, child.cmd.Process.Pid))
		resp, err := client.Get(metricsURL)
		scrapes++
		if err != nil || resp.StatusCode != 200 {
			badScrapes++
			t.Logf("/metrics during the flood: %v", err)
		}
		if err == nil {
			resp.Body.Close()
		}
	}
	floodTook := time.Since(start)
	_, rss := peakKB(t, child.cmd.Process.Pid)
	t.Logf("flood: %d connection attempts in %s, %d established, %d timed out or refused; child: at most %d descriptors, RSS %d kB; /metrics %d/%d answered",
		floodConnections, floodTook.Round(time.Millisecond), len(conns), failed.Load(), maxFDs, rss, scrapes-badScrapes, scrapes)
	if maxFDs >= maxChildFDs {
		t.Errorf("the child held %d descriptors during the flood, want under %d", maxFDs, maxChildFDs)
	}
	if badScrapes > 0 {
		t.Errorf("/metrics failed %d of %d times during the flood", badScrapes, scrapes)
	}
	if n := ownLimit.Load(); n > 0 {
		t.Errorf("%d dials failed on the test process's own descriptor limit: the flood was smaller than it claims", n)
	}
	if len(conns) == 0 {
		t.Fatal("no flood connection was established: the test measured nothing")
	}

	// The flood stops; the webhook recovers by itself.
	for _, c := range conns {
		c.Close()
	}
	stopped := time.Now()
	body := []byte(`{"event":"alert.created","severity":"critical","address":"alice@example.com","source":"combolist",` +
		`"summary":"flood test","delta":{"new_source_dbs":["x"]},"observed_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`)
	hookClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	status, attempts := 0, 0
	for time.Since(stopped) < recoveryDeadline && status != http.StatusNoContent {
		attempts++
		resp, err := hookClient.Do(signedRequest(t, "http://"+hookAddr+"/webhook", "flood-test-secret", body))
		if err != nil {
			time.Sleep(100 * time.Millisecond) // retry interval
			continue
		}
		status = resp.StatusCode
		resp.Body.Close()
	}
	recovered := time.Since(stopped)
	t.Logf("signed webhook after the flood: %d after %s (%d attempts)", status, recovered.Round(time.Millisecond), attempts)
	if status != http.StatusNoContent {
		t.Fatalf("signed webhook not accepted within %s of the flood's end (last status %d)", recoveryDeadline, status)
	}
	_, metrics := testkit.Get(t, metricsURL)
	if !strings.Contains(metrics, `breach_alerts_total{address="alice@example.com",severity="critical",source="combolist"} 1`) {
		t.Error("the accepted alert is not counted")
	}
	if !strings.Contains(metrics, `breach_exporter_listener_connection_limit_reached_total{listener="webhook"}`) ||
		strings.Contains(metrics, `breach_exporter_listener_connection_limit_reached_total{listener="webhook"} 0`) {
		t.Error("the webhook listener's limit was reached but not counted")
	}
}

// raiseFDLimit lets the test hold the flood's client ends: it raises the
// soft limit to n, and the hard limit too when allowed (root with
// CAP_SYS_RESOURCE); otherwise the soft limit goes as far as the hard one.
// The flood needs fewer than the hard limit at once (only what the
// listener and the kernel's queue hold is established), and running short
// would show as EMFILE, which the test reports.
func raiseFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if old.Cur >= n {
		return
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, old.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: old.Max, Max: old.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("RLIMIT_NOFILE of the test (and the child): %d", want.Cur)
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

func countFDs(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("reading the child's descriptors: %v", err)
	}
	return len(entries)
}

func openFilesLimit(t *testing.T, pid int) string {
	t.Helper()
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(limits), "\n") {
		if strings.HasPrefix(line, "Max open files") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return "no open-files limit found"
}
