package webhook

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lastObserved reads breach_alert_last_observed_timestamp_seconds for bob's
// index feed (alertBody's), 0 when absent.
func (f *fixture) lastObserved() float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "breach_alert_last_observed_timestamp_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["address"] == "bob@example.com" && labels["source"] == "index" {
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// An observed_at far ahead of the exporter's clock (issue 10: year 9999)
// is accepted and counted, but never moves the last-observed gauge, which
// would otherwise stay pinned for good; a few minutes of skew still count.
func TestFutureObservedAtDoesNotPinTheGauge(t *testing.T) {
	f := newFixture(t, Settings{})
	withObserved := func(summary, observed string) []byte {
		return []byte(strings.Replace(string(alertBody(summary)), "2025-03-01T11:00:00Z", observed, 1))
	}
	future := func() float64 { return testutil.ToFloat64(f.h.metrics.futureObserved) }

	f.expectOutcome(withObserved("normal", "2025-03-01T11:00:00Z"), outcomeAccepted)
	if got, want := f.lastObserved(), float64(testStart.Add(-time.Hour).Unix()); got != want {
		t.Fatalf("gauge = %v after a normal alert, want %v", got, want)
	}
	// testStart is 12:00; 12:04:59 is within the allowed skew.
	f.expectOutcome(withObserved("skewed", "2025-03-01T12:04:59Z"), outcomeAccepted)
	if got, want := f.lastObserved(), float64(testStart.Unix()+299); got != want {
		t.Fatalf("gauge = %v after a 4m59s skew, want %v", got, want)
	}
	for i, observed := range []string{"9999-12-31T23:59:59Z", "2025-03-01T12:05:01Z", "2026-03-01T12:00:00Z"} {
		before := len(f.alerts())
		f.expectOutcome(withObserved(fmt.Sprint("future ", i), observed), outcomeAccepted)
		if got, want := f.lastObserved(), float64(testStart.Unix()+299); got != want {
			t.Errorf("observed_at %s moved the gauge to %v", observed, got)
		}
		if got := future(); got != float64(i+1) {
			t.Errorf("future-observed counter = %v after %d such alerts", got, i+1)
		}
		if len(f.alerts()) != before+1 {
			t.Errorf("observed_at %s: the alert was not handed on", observed)
		}
	}
	if got := testutil.ToFloat64(f.h.metrics.alerts.WithLabelValues("bob@example.com", "index", "warning")); got != 5 {
		t.Errorf("breach_alerts_total = %v, want all 5 alerts counted", got)
	}
}

// Requests for other paths of the webhook listener are counted as
// not_found, pre-initialised at 0 like every outcome.
func TestOtherPathsAreCountedAsNotFound(t *testing.T) {
	f := newFixture(t, Settings{})
	if got, err := testutil.GatherAndCount(f.reg, "breach_webhook_requests_total"); err != nil || got != len(outcomes) {
		t.Fatalf("breach_webhook_requests_total has %d series (%v), want all %d outcomes", got, err, len(outcomes))
	}
	if got := f.outcomeCount(outcomeNotFound); got != 0 {
		t.Fatalf("not_found starts at %v", got)
	}
	srv := NewServer(f.h, "/webhook")
	for i, target := range []string{"/", "/metrics", "/-/reload", "/webhook/", "/.env"} {
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", target, rec.Code)
		}
		if got := f.outcomeCount(outcomeNotFound); got != float64(i+1) {
			t.Errorf("after GET %s: not_found = %v, want %d", target, got, i+1)
		}
	}
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, HealthyPath, nil))
	if rec.Code != http.StatusOK || f.outcomeCount(outcomeNotFound) != 5 {
		t.Errorf("the health check answered %d or was counted as not_found", rec.Code)
	}
}
