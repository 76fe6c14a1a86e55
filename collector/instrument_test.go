// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

var (
	requests200 = testkit.Series("promhttp_metric_handler_requests_total", "code", "200")
	requests500 = testkit.Series("promhttp_metric_handler_requests_total", "code", "500")
	requests503 = testkit.Series("promhttp_metric_handler_requests_total", "code", "503")
	inFlight    = testkit.Series("promhttp_metric_handler_requests_in_flight")
)

// The first scrape already has the handler's own series, as promhttp's
// has: every likely code at 0, and itself in flight.
func TestInstrumentedFromTheFirstScrape(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("alice@example.com")...)
	reg := prometheus.NewRegistry()
	h := Instrument(reg, NewHandler(f.c, reg, log.NewNopLogger()), DefaultMaxRequests)
	first := testkit.Scrape(t, h)
	for series, want := range map[string]float64{requests200: 0, requests500: 0, requests503: 0, inFlight: 1} {
		if got, ok := first[series]; !ok || got != want {
			t.Errorf("first scrape: %s = %v (served: %v), want %v", series, got, ok, want)
		}
	}
	if got := testkit.Scrape(t, h)[requests200]; got != 1 {
		t.Errorf("second scrape: %s = %v, want 1", requests200, got)
	}
	// A second handler on the same registry (tests build several) shares
	// the series instead of failing to register.
	again := Instrument(reg, NewHandler(f.c, reg, log.NewNopLogger()), DefaultMaxRequests)
	if got := testkit.Scrape(t, again)[requests200]; got != 2 {
		t.Errorf("through a second handler: %s = %v, want 2", requests200, got)
	}
}

// heldGatherer holds every Gather, and so the scrape that called it, until
// release closes; entered says that one has started.
type heldGatherer struct {
	reg     *prometheus.Registry
	entered chan struct{}
	release chan struct{}
}

func (g heldGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.reg.Gather()
}

// scrapeInBackground serves one scrape through h and sends its status.
func scrapeInBackground(h http.Handler) <-chan int {
	code := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		code <- rec.Code
	}()
	return code
}

// within waits for a status from c, failing after a generous deadline
// rather than hanging the test when the handler waits where it must not.
func within(t *testing.T, what string, c <-chan int) int {
	t.Helper()
	select {
	case code := <-c:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer", what)
		return 0
	}
}

// waitEntered waits until a scrape has reached g's Gather, failing after a
// generous deadline rather than hanging when none does.
func (g heldGatherer) waitEntered(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached Gather", what)
	}
}

// Past --web.max-requests, a scrape is answered 503 without waiting for the
// one in flight, and the refusal shows in the counter; once the held scrape
// ends, its slot serves again.
func TestMaxRequestsRefusesAtOnce(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("alice@example.com")...)
	reg := prometheus.NewRegistry()
	held := heldGatherer{reg: reg, entered: make(chan struct{}), release: make(chan struct{})}
	h := Instrument(reg, NewHandler(f.c, held, log.NewNopLogger()), 1)

	first := scrapeInBackground(h)
	held.waitEntered(t, "the first scrape") // the one slot is taken
	if code := within(t, "the scrape past the limit", scrapeInBackground(h)); code != http.StatusServiceUnavailable {
		t.Errorf("a scrape past the limit answered %d, want 503", code)
	}
	samples := testkit.Samples(t, reg)
	if samples[requests503] != 1 || samples[inFlight] != 1 {
		t.Errorf("while one scrape is held: 503 counted %v, in flight %v; want 1 and 1", samples[requests503], samples[inFlight])
	}

	close(held.release)
	if code := within(t, "the held scrape", first); code != http.StatusOK {
		t.Errorf("the held scrape answered %d, want 200", code)
	}
	next := scrapeInBackground(h)
	held.waitEntered(t, "the scrape after") // the freed slot serves
	if code := within(t, "the scrape after", next); code != http.StatusOK {
		t.Errorf("the scrape after the held one answered %d, want 200", code)
	}
	samples = testkit.Samples(t, reg)
	if samples[requests200] != 2 || samples[requests503] != 1 || samples[inFlight] != 0 {
		t.Errorf("after: 200 counted %v, 503 counted %v, in flight %v; want 2, 1, 0", samples[requests200], samples[requests503], samples[inFlight])
	}
}

// --web.max-requests=0 is no limit: two scrapes are held at once.
func TestMaxRequestsZeroIsNoLimit(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("alice@example.com")...)
	reg := prometheus.NewRegistry()
	held := heldGatherer{reg: reg, entered: make(chan struct{}), release: make(chan struct{})}
	h := Instrument(reg, NewHandler(f.c, held, log.NewNopLogger()), 0)

	a, b := scrapeInBackground(h), scrapeInBackground(h)
	// Both are in at once; with a limit of 1 the second would be refused.
	held.waitEntered(t, "one scrape")
	held.waitEntered(t, "the other scrape")
	close(held.release)
	for _, c := range []<-chan int{a, b} {
		if code := within(t, "a held scrape", c); code != http.StatusOK {
			t.Errorf("a scrape answered %d, want 200", code)
		}
	}
}
