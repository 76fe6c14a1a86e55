// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

var soak = flag.Duration("soak", 0, "run TestSoak for this long in real time (make soak: 60s)")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Several sweeps on a shared fake clock: after each, once the exporter has
// caught up, every gauge equals the simulator's state, the alert counters
// equal the alerts delivered, and the simulator never answered 429.
func TestExporterFollowsSimulator(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC))
	p := startPipeline(t, clock, 10*time.Second, testkit.AllDetailYAML())

	alerts := 0
	var diffs []string // what the exporter showed differently, at the last look
	defer func() {
		if t.Failed() && len(diffs) > 0 {
			t.Logf("the exporter still differs from the simulator:\n%s", strings.Join(diffs, "\n"))
		}
	}()
	rounds := 6
	if testing.Short() {
		rounds = 3 // two sweeps: alerts on both paths, a third of the fake time
	}
	for i := 1; i <= rounds; i++ {
		if i > 1 {
			alerts += len(p.sweep())
		}
		took := testkit.AdvanceUntil(t, clock, fmt.Sprintf("round %d: the exporter to catch up with the simulator", i), 200*time.Millisecond,
			func() bool { diffs = p.mismatches(); return len(diffs) == 0 })
		t.Logf("round %d: caught up after %v of fake time", i, took)
	}
	if alerts == 0 {
		t.Fatalf("%d sweeps produced no alert: the test proves nothing about the webhook path", rounds-1)
	}
	if got := p.samples()[testkit.Series("breach_webhook_requests_total", "outcome", "accepted")]; got != float64(alerts) {
		t.Errorf("accepted webhooks = %v, the sweeps produced %d alerts", got, alerts)
	}
}

// TestSoak is the CI soak (make soak): sweeps every second and scrapes every
// second in real time; at the end the integration invariants hold and the
// goroutine count has not grown.
func TestSoak(t *testing.T) {
	if *soak == 0 {
		t.Skip("run with -soak=60s (make soak)")
	}
	p := startPipeline(t, clockwork.NewRealClock(), time.Second, testkit.AllDetailYAML())
	metrics := httptest.NewServer(p.exp.MetricsHandler(p.reg))
	defer metrics.Close()

	// Sweeping stops on its own signal, not by cancelling the context the
	// deliveries run on: a cancelled delivery may already be accepted by the
	// exporter while the simulator counts it as given up, so the totals
	// below could not agree.
	deliveries, cancelDeliveries := context.WithCancel(context.Background())
	defer cancelDeliveries()
	stop, sweeping := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sweeping)
		every := time.NewTicker(time.Second)
		defer every.Stop()
		for {
			select {
			case <-stop:
				return
			case <-every.C:
				p.sim.Sweep(deliveries)
			}
		}
	}()

	end := time.Now().Add(*soak)
	var baseline int
	scrapes := 0
	tick := time.NewTicker(time.Second) // the scrape interval: load, not synchronisation
	defer tick.Stop()
	for ; time.Now().Before(end); <-tick.C {
		resp, err := http.Get(metrics.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "breach_address_state{") {
			t.Fatalf("scrape %d: %d, %d bytes", scrapes, resp.StatusCode, len(body))
		}
		scrapes++
		if scrapes == 10 {
			baseline = runtime.NumGoroutine() // after warm-up: connections and timers exist
		}
	}
	close(stop)
	<-sweeping
	flush, cancelFlush := context.WithTimeout(context.Background(), 20*time.Second)
	p.sim.Flush(flush)
	cancelFlush()
	if given := p.sim.Stats().Deliveries.GivenUp; given != 0 {
		t.Errorf("the simulator gave up %d deliveries: the exporter refused or lost them", given)
	}

	deadline := time.Now().Add(30 * time.Second)
	diffs := p.mismatches()
	for ; len(diffs) > 0 && time.Now().Before(deadline); diffs = p.mismatches() {
		time.Sleep(200 * time.Millisecond) // polling interval while the exporter catches up
	}
	if len(diffs) > 0 {
		t.Fatalf("after the soak the exporter disagrees with the simulator:\n%s", strings.Join(diffs, "\n"))
	}
	now := runtime.NumGoroutine()
	t.Logf("%d scrapes; goroutines after warm-up %d, at the end %d; simulator stats %+v", scrapes, baseline, now, p.sim.Stats().Deliveries)
	if now > baseline+5 {
		t.Errorf("goroutines grew from %d to %d during the soak", baseline, now)
	}
}
