// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// TestAddressHTTP runs the built binary with an HTTP source of addresses
// that turns hostile in every way the issue names (hangs, answers 500, a
// 50 MB body, invalid JSON, a new ETag every request): the watched set and
// owners stay the last good ones, each failure is counted under its
// reason, the log never shows an address of the list (hash mode), a
// change of the list reaches breach_address_info within the refresh
// interval and a bit, and the process stops at once while the server
// hangs.
func TestAddressHTTP(t *testing.T) {
	bin := binary(t, "builds the binary and runs it")
	api := newStandIn(t)
	var mode atomic.Pointer[http.HandlerFunc]
	var etag atomic.Int64
	serve := func(h http.HandlerFunc) { mode.Store(&h) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*mode.Load())(w, r) }))
	t.Cleanup(srv.Close)
	list := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("ETag", fmt.Sprintf(`"%d"`, etag.Add(1)))
			io.WriteString(w, body)
		}
	}
	good := `[{"targets": ["alice@example.com", "bob@example.com"], "labels": {"team": "payments"}},
{"targets": ["carol@example.com"], "labels": {"team": "platform"}}]`
	serve(list(good))

	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	cfg := filepath.Join(dir, "breach_exporter.yml")
	url := srv.URL + "/owners.json"
	testkit.WriteFile(t, cfg, fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\nlabels: {address: hash}\n"+
		"addresses_http: [{url: %q, refresh_interval: 1s}]\n", api.BaseURL(), url))
	addr := testkit.FreeAddress(t)
	p := startProcess(t, bin, "--config.file", cfg, "--web.listen-address", addr, "--storage.path", t.TempDir())
	metricsURL := "http://" + addr + "/metrics"
	servesMetrics(t, metricsURL)

	series := func(name string, labels ...string) string {
		pairs := []string{fmt.Sprintf("url=%q", url)}
		for i := 0; i+1 < len(labels); i += 2 {
			pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		slices.Sort(pairs)
		return name + "{" + strings.Join(pairs, ",") + "}"
	}
	teams := func(metrics string) []string {
		var out []string
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "breach_address_info{") {
				_, team, _ := strings.Cut(line, `team="`)
				team, _, _ = strings.Cut(team, `"`)
				out = append(out, team)
			}
		}
		slices.Sort(out)
		return out
	}
	_, metrics := testkit.Get(t, metricsURL)
	if got := teams(metrics); !slices.Equal(got, []string{"payments", "payments", "platform"}) {
		t.Fatalf("at start: teams %q, want the list's", got)
	}

	for _, c := range []struct {
		name, reason string
		h            http.HandlerFunc
	}{
		{"hang", "request", testkit.Hang},
		{"500", "status", testkit.Status(http.StatusInternalServerError)},
		{"50 MB", "too_large", testkit.HugeBodyOf(50 << 20)},
		{"invalid JSON", "invalid", list(`[{"targets": ["alice@example.com"`)},
	} {
		serve(c.h)
		failures := series("breach_exporter_address_http_failures_total", "reason", c.reason)
		pollMetrics(t, metricsURL, c.name+" counted", func(m string) bool { return sampleValue(m, failures) >= 1 })
		_, metrics := testkit.Get(t, metricsURL)
		if got := teams(metrics); !slices.Equal(got, []string{"payments", "payments", "platform"}) || sampleValue(metrics, series("breach_exporter_address_http_up")) != 0 {
			t.Errorf("%s: teams %q, up %v; want the last good list, up 0", c.name, got, sampleValue(metrics, series("breach_exporter_address_http_up")))
		}
	}

	// The same list under a new ETag every time: a success, no change.
	serve(list(good))
	pollMetrics(t, metricsURL, "up again", func(m string) bool { return sampleValue(m, series("breach_exporter_address_http_up")) == 1 })

	start := time.Now()
	serve(list(`[{"targets": ["alice@example.com", "bob@example.com", "carol@example.com"], "labels": {"team": "platform"}}]`))
	pollMetrics(t, metricsURL, "the new teams", func(m string) bool {
		return slices.Equal(teams(m), []string{"platform", "platform", "platform"})
	})
	t.Logf("a changed list reached breach_address_info on /metrics in %s (refresh_interval 1s)", time.Since(start))

	serve(testkit.Hang)
	pollMetrics(t, metricsURL, "a hung fetch", func(m string) bool {
		return sampleValue(m, series("breach_exporter_address_http_failures_total", "reason", "request")) >= 2
	})
	stopped := time.Now()
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit with the source hanging: %v", err)
	}
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("the stop took %s with the source hanging", took)
	}
	if logs := p.logs.String(); strings.Contains(logs, "example.com\"") || strings.Contains(logs, "alice@") || !strings.Contains(logs, "HTTP source of addresses failed") {
		t.Errorf("the log must say each failure and show no address in hash mode:\n%s", tail(logs, 4000))
	}

	// --config.check names the field.
	testkit.WriteFile(t, cfg, fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\n"+
		"addresses_http: [{url: %q, refresh_interval: 100ms}]\n", api.BaseURL(), url))
	if code, out := configCheck(t, bin, cfg); code != 1 || !strings.Contains(out, "addresses_http[0].refresh_interval: 100ms must be at least 1s") {
		t.Errorf("--config.check: exit %d\n%s", code, out)
	}
}
