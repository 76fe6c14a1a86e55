// SPDX-License-Identifier: Apache-2.0

package faulttest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The schedule every test runs under: the full budget, so the scheduler
// would send one request a second if nothing held it back.
const (
	interval   = 5 * time.Minute
	meInterval = 2 * time.Minute
	apiTimeout = 200 * time.Millisecond // real time: the API client's own deadline

	// step is how far the fake clock moves at a time: the scheduler's
	// spacing at 60 requests a minute, so no wake-up is much overshot.
	step = time.Second
)

var addresses = []string{"alice@example.com", "bob@example.com"}

// start is deliberately not on a minute boundary, so the service's windows
// and the scheduler's start do not line up.
var start = time.Date(2031, 5, 6, 7, 8, 9, 500_000_000, time.UTC)

// harness runs the real exporter against the API stand-in on a fake clock.
// The stand-in stamps every request with the fake clock's time: the clock
// only moves while the scheduler waits, so that is the instant the request
// was sent.
type harness struct {
	t     *testing.T
	clock *clockwork.FakeClock
	api   *testkit.StandIn
	reg   *prometheus.Registry
	dir   string
	exp   *exporter.Exporter
}

// newHarness builds the exporter from a config file and a token file, as
// main does; start runs it.
func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, clock: clockwork.NewFakeClockAt(start), reg: prometheus.NewRegistry(), dir: t.TempDir()}
	h.api = testkit.NewStandIn(t, h.clock)
	h.setCount(3)

	h.writeToken(testkit.APIToken)
	config := fmt.Sprintf(`api:
  base_url: %s
  token_file: token
  requests_per_minute: 60
  timeout: %s
refresh:
  interval: %s
  me_interval: %s
addresses: [%s]
%s`, h.api.BaseURL(), model.Duration(apiTimeout), model.Duration(interval), model.Duration(meInterval), strings.Join(addresses, ", "), testkit.AllDetailYAML())
	configFile := filepath.Join(h.dir, "config.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	var err error
	h.exp, err = exporter.New(exporter.Options{
		ConfigFile: configFile,
		UserAgent:  "breach_exporter/faulttest",
		Logger:     log.NewNopLogger(),
		Registerer: h.reg,
		Clock:      h.clock,
	})
	if err != nil {
		t.Fatalf("exporter.New: %v", err)
	}
	return h
}

// start runs the exporter until the test ends.
func (h *harness) start() *harness {
	testkit.Go(h.t, h.exp.Run)
	return h
}

// writeToken replaces the token file the way an operator would.
func (h *harness) writeToken(token string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, "token"), []byte(token+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// advanceUntil moves the fake clock a step at a time, each step taken only
// once the scheduler waits on its timer, until cond holds; it returns the
// fake time that took. cond is checked between steps, so it never sees a
// request half done. It fails the test when cond has not held after limit
// of fake time.
func (h *harness) advanceUntil(what string, limit time.Duration, cond func() bool) time.Duration {
	h.t.Helper()
	return testkit.AdvanceParked(h.t, h.clock, what, step, limit, cond)
}

// advance lets d of fake time pass.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	end := h.clock.Now().Add(d)
	h.advanceUntil(fmt.Sprintf("%s to pass", d), d, func() bool { return !h.clock.Now().Before(end) })
}

// setCount makes every address verified, with breach_count n in both of
// its sources, from now on.
func (h *harness) setCount(n int64) {
	h.api.AnswerOthers(sim.Verified(sources(n)...))
}

// sources are the two feeds the stand-in serves with breach_count n.
func sources(n int64) []breach.SourceState {
	return []breach.SourceState{
		{Source: "archive", BreachCount: n, SourceDBs: []string{"db-a", "db-b"}, FieldsExposed: []string{"password", "hash"},
			HasPlaintextPassword: true, LastScannedAt: time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC), LastChangedAt: time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)},
		{Source: "combolist", BreachCount: n, SourceDBs: []string{"combo-1"}, FieldsExposed: []string{"username"},
			LastScannedAt: time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC), LastChangedAt: time.Date(2031, 5, 2, 0, 0, 0, 0, time.UTC)},
	}
}

// samples gathers the registry; gathering must never fail, fault or not.
func (h *harness) samples() map[string]float64 {
	return testkit.Scrape(h.t, h.exp.MetricsHandler(h.reg))
}

// scrape serves /metrics as Prometheus would fetch it, fails the test
// unless it answers 200 with a parseable exposition, and returns its
// samples.
func (h *harness) scrape() map[string]float64 {
	h.t.Helper()
	return h.samples()
}

// requestsSent is breach_api_requests_total over every label, gathered
// from the registry alone: unlike a scrape of /metrics, cheap enough to
// check at every step of the fake clock.
func (h *harness) requestsSent() float64 {
	h.t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		h.t.Fatalf("gathering the registry: %v", err)
	}
	sum := 0.0
	for _, mf := range families {
		if mf.GetName() == "breach_api_requests_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// value is one sample; absent series read as -1 so that a missing series
// never passes for a zero.
func (h *harness) value(name string, labels ...string) float64 {
	h.t.Helper()
	return lookup(h.samples(), name, labels...)
}

func lookup(samples map[string]float64, name string, labels ...string) float64 {
	if v, ok := samples[testkit.Series(name, labels...)]; ok {
		return v
	}
	return -1
}

// requestsTotal sums breach_api_requests_total over both endpoints for one
// code, or over every code when code is "".
func requestsTotal(samples map[string]float64, code string) float64 {
	sum := 0.0
	for k, v := range samples {
		if strings.HasPrefix(k, "breach_api_requests_total{") && (code == "" || strings.Contains(k, fmt.Sprintf("code=%q", code))) {
			sum += v
		}
	}
	return sum
}

func failuresTotal(samples map[string]float64, kinds string) float64 {
	sum := 0.0
	for k, v := range samples {
		for _, kind := range strings.Split(kinds, "|") {
			if strings.HasPrefix(k, "breach_api_request_failures_total{") && strings.Contains(k, fmt.Sprintf("kind=%q", kind)) {
				sum += v
			}
		}
	}
	return sum
}

// cachedValues are the series that hold what the API last answered: a
// fault must leave every one of them as it was.
func cachedValues(samples map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range samples {
		for _, prefix := range []string{"breach_source_", "breach_address_", "breach_account_info{"} {
			if strings.HasPrefix(k, prefix) {
				out[k] = v
			}
		}
	}
	return out
}

// healthy reports whether every address shows count and /me answered.
func (h *harness) healthy(count int64) bool {
	s := h.samples()
	for _, a := range addresses {
		if lookup(s, "breach_source_breaches", "address", a, "source", "archive") != float64(count) {
			return false
		}
	}
	return lookup(s, "breach_api_up", "account", "default") == 1
}
