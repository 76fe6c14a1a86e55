// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

const journalSecret = "journal-test-secret-0123456789"

// exporterOnFolder is the built binary with the receiver on, its state in
// one folder across lives.
type exporterOnFolder struct {
	bin, cfg, storage string
	webAddr, hookAddr string
}

func newExporterOnFolder(t *testing.T, bin string) *exporterOnFolder {
	t.Helper()
	api := newStandIn(t)
	// The discovered address must stay watched for its counts to be served:
	// the API knows it (a 404 would drop it before the test's scrape).
	api.Answer("found@example.org", sim.Unverified())
	cfg := receiverConfig(t, api, journalSecret, testkit.AllDetailYAML())
	return &exporterOnFolder{bin: bin, cfg: cfg, storage: filepath.Join(t.TempDir(), "data"),
		webAddr: testkit.FreeAddress(t), hookAddr: testkit.FreeAddress(t)}
}

// start runs one life and waits until it serves. The snapshot interval is
// long: what a SIGKILL would lose is only in the journal.
func (x *exporterOnFolder) start(t *testing.T) *process {
	t.Helper()
	p := startProcess(t, x.bin, "--config.file", x.cfg, "--web.listen-address", x.webAddr,
		"--webhook.listen-address", x.hookAddr, "--storage.path", x.storage, "--storage.snapshot-interval", "1h")
	servesMetrics(t, "http://"+x.webAddr+"/metrics")
	return p
}

func (x *exporterOnFolder) samples(t *testing.T) map[string]float64 {
	t.Helper()
	code, text := testkit.Get(t, "http://"+x.webAddr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return testkit.Flatten(testkit.ParseText(t, text))
}

// alertBodies are n distinct signed alerts: even ones for the configured
// alice (critical, combolist), odd ones for found@example.org, which the
// receiver discovers (warning, archive).
func alertBodies(n int, tag string) [][]byte {
	observed := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	out := make([][]byte, n)
	for i := range out {
		address, severity, source := "alice@example.com", "critical", "combolist"
		if i%2 == 1 {
			address, severity, source = "found@example.org", "warning", "archive"
		}
		out[i] = fmt.Appendf(nil, `{"event":"alert.created","severity":%q,"address":%q,"source":%q,"summary":"%s #%d",`+
			`"delta":{"new_source_dbs":["db-%d"],"newly_exposed_fields":["password"]},"observed_at":%q}`,
			severity, address, source, tag, i, i, observed)
	}
	return out
}

// sendAll posts every body at once from its own goroutine, so the journal
// commits them in shared syncs, and returns the statuses.
func sendAll(t *testing.T, url string, bodies [][]byte) []int {
	t.Helper()
	codes := make([]int, len(bodies))
	var wg sync.WaitGroup
	// At most 8 at once: one sender is one client, and the receiver resets
	// a client's connections past --webhook.max-connections-per-client (16).
	slots := make(chan struct{}, 8)
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			resp, err := http.DefaultClient.Do(signedRequest(t, url, journalSecret, body))
			if err != nil {
				return
			}
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return codes
}

func all204(codes []int) bool {
	for _, c := range codes {
		if c != http.StatusNoContent {
			return false
		}
	}
	return true
}

// An alert answered 204 is durable: the built binary, SIGKILLed right after
// a batch of 204s, counts the batch after its restart and takes every
// replay as a duplicate. A first batch, stopped with SIGTERM, goes through
// the snapshot; the second, killed, through the journal alone. Then a
// second exporter on the same folder refuses to start, naming it, and a
// SIGKILLed one's folder is free at once.
func TestStateFolderAgainstTheBinary(t *testing.T) {
	bin := binary(t, "builds the binary and runs it five times")

	t.Run("accepted alerts survive SIGKILL", func(t *testing.T) {
		x := newExporterOnFolder(t, bin)
		hookURL := "http://" + x.hookAddr + "/webhook"
		first, second := alertBodies(10, "first"), alertBodies(30, "second")

		p := x.start(t)
		if codes := sendAll(t, hookURL, first); !all204(codes) {
			t.Fatalf("the first batch: %v", codes)
		}
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		p = x.start(t)
		if codes := sendAll(t, hookURL, second); !all204(codes) {
			t.Fatalf("the second batch: %v", codes)
		}
		p.stop(syscall.SIGKILL)

		x.start(t)
		want := map[string]float64{
			testkit.Series("breach_webhook_requests_total", "outcome", "accepted"):                                                        40,
			testkit.Series("breach_webhook_requests_total", "outcome", "duplicate"):                                                       0,
			testkit.Series("breach_alerts_total", "address", "alice@example.com", "severity", "critical", "source", "combolist"):          20,
			testkit.Series("breach_alerts_total", "address", "found@example.org", "severity", "warning", "source", "archive"):             20,
			testkit.Series("breach_alert_new_databases_total", "address", "alice@example.com", "source", "combolist"):                     20,
			testkit.Series("breach_alert_exposed_fields_total", "address", "found@example.org", "field", "password", "source", "archive"): 20,
		}
		check := func(when string) {
			t.Helper()
			got := x.samples(t)
			for series, v := range want {
				if got[series] != v {
					t.Errorf("%s: %s = %v, want %v", when, series, got[series], v)
				}
			}
		}
		check("after the SIGKILL")
		if codes := sendAll(t, hookURL, append(first, second...)); !all204(codes) {
			t.Fatalf("the replay: %v", codes)
		}
		want[testkit.Series("breach_webhook_requests_total", "outcome", "duplicate")] = 40
		check("after the replay")
	})

	t.Run("one exporter per folder", func(t *testing.T) {
		x := newExporterOnFolder(t, bin)
		owner := x.start(t)
		other := startProcess(t, bin, "--config.file", x.cfg, "--web.listen-address", testkit.FreeAddress(t),
			"--storage.path", x.storage)
		select {
		case err := <-other.exited:
			other.done = true
			if err == nil {
				t.Fatal("a second exporter on the same folder exited 0")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a second exporter on the same folder did not exit")
		}
		if log := other.logs.String(); !strings.Contains(log, x.storage) || !strings.Contains(log, "in use by another process") {
			t.Errorf("the refusal does not name the folder:\n%s", log)
		}

		owner.stop(syscall.SIGKILL)
		x.start(t) // fails the test unless it serves
	})
}
