// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// directory is an HTTP source of addresses on loopback whose answer a test
// swaps: a status, or a body.
type directory struct {
	*httptest.Server
	status atomic.Int64
	body   atomic.Pointer[string]
}

func newDirectory(t *testing.T, body string) *directory {
	d := &directory{}
	d.status.Store(http.StatusOK)
	d.body.Store(&body)
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(d.status.Load()))
		io.WriteString(w, *d.body.Load())
	}))
	t.Cleanup(d.Close)
	return d
}

func (d *directory) serve(body string) { d.body.Store(&body) }

func info(address, team string) string {
	return testkit.Series("breach_address_info", "account", "default", "address", address, "team", team)
}

// The addresses of an HTTP source are watched from the first scrape on,
// with their owner labels; a change of the list moves the owner within
// the refresh interval, without a reload; a failing source keeps its last
// good list and says so in its metrics.
func TestHTTPSourceOwners(t *testing.T) {
	d := newDirectory(t, `[{"targets": ["alice@example.com"], "labels": {"team": "payments"}},
{"targets": ["bob@example.com"], "labels": {"team": "platform"}}]`)
	f := newFixture(t, fmt.Sprintf("addresses_http: [{url: %q, refresh_interval: 1s}]\n", d.URL+"/owners.json"))
	url := d.URL + "/owners.json"

	samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
	for series, want := range map[string]float64{
		info("alice@example.com", "payments"):                                                         1,
		info("bob@example.com", "platform"):                                                           1,
		testkit.Series("breach_exporter_address_http_up", "url", url):                                 1,
		testkit.Series("breach_exporter_address_http_addresses", "url", url):                          2,
		testkit.Series("breach_exporter_address_http_failures_total", "url", url, "reason", "status"): 0,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("first scrape: %s = %v (present %v), want %v", series, got, ok, want)
		}
	}

	start := time.Now()
	d.serve(`[{"targets": ["alice@example.com", "bob@example.com"], "labels": {"team": "platform"}}]`)
	testkit.Eventually(t, "alice's new team on /metrics", func() bool {
		return testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[info("alice@example.com", "platform")] == 1
	})
	t.Logf("a changed list reached breach_address_info in %s (refresh_interval 1s)", time.Since(start))

	d.status.Store(http.StatusInternalServerError)
	testkit.Eventually(t, "a failed fetch counted", func() bool {
		return testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_exporter_address_http_failures_total", "url", url, "reason", "status")] >= 1
	})
	samples = testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
	if samples[info("alice@example.com", "platform")] != 1 || samples[info("bob@example.com", "platform")] != 1 ||
		samples[testkit.Series("breach_exporter_address_http_up", "url", url)] != 0 {
		t.Errorf("after a 500: the last good list must stay, up 0")
	}
	if logs := f.logs.String(); !strings.Contains(logs, "HTTP source of addresses failed") || !strings.Contains(logs, "answered 500") {
		t.Errorf("the log does not say the source failed:\n%s", logs)
	}
}

// With a state folder, a source's last good list outlives a restart: a
// start while the source fails watches its addresses, with their owners,
// from the first scrape; a reload that drops the source drops its file.
func TestHTTPSourceListOutlivesARestart(t *testing.T) {
	d := newDirectory(t, `[{"targets": ["alice@example.com"], "labels": {"team": "payments"}}]`)
	api := testkit.NewStandIn(t, nil)
	dir, storage := t.TempDir(), t.TempDir()
	source := fmt.Sprintf("addresses_http: [{url: %q, refresh_interval: 1s}]\n", d.URL)
	first := start(t, dir, storage, api.BaseURL(), "[]", source)
	if got := testkit.Scrape(t, first.exp.MetricsHandler(first.reg))[info("alice@example.com", "payments")]; got != 1 {
		t.Fatalf("first life: alice's info %v, want 1", got)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	d.status.Store(http.StatusInternalServerError)
	second := startAt(t, first.clock, dir, storage, api.BaseURL(), "[]", source)
	samples := testkit.Scrape(t, second.exp.MetricsHandler(second.reg))
	if samples[info("alice@example.com", "payments")] != 1 || samples[testkit.Series("breach_exporter_address_http_up", "url", d.URL)] != 0 {
		t.Errorf("a start while the source fails: alice's info %v, up %v; want the saved list, up 0",
			samples[info("alice@example.com", "payments")], samples[testkit.Series("breach_exporter_address_http_up", "url", d.URL)])
	}

	writeConfig(t, dir, api.BaseURL(), "addresses: [bob@example.com]\n")
	if err := second.exp.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if saved, _ := filepath.Glob(filepath.Join(storage, "addresses_http-*")); len(saved) != 0 {
		t.Errorf("saved lists %q after the source left the config, want none", saved)
	}
}
