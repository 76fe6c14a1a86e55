// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Requests for other paths of the webhook listener are counted as
// not_found, pre-initialised at 0 like every outcome.
func TestOtherPathsAreCountedAsNotFound(t *testing.T) {
	f := newFixture(t, settings{})
	for _, o := range outcomes {
		if _, ok := f.samples()[`breach_webhook_requests_total{outcome="`+o+`"}`]; !ok {
			t.Fatalf("outcome %s is not pre-initialised", o)
		}
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

// A signed body that carries the API token (as a source, a summary,
// anything) is refused as malformed: counted, never a label or a log line.
func TestBodyCarryingTheTokenIsMalformed(t *testing.T) {
	f := newFixture(t, settings{Addresses: []string{"bob@example.com"}})
	for _, body := range [][]byte{
		alertBody("leaked " + testToken),
		[]byte(strings.Replace(string(alertBody("s")), `"source":"index"`, `"source":"`+testToken+`"`, 1)),
	} {
		rec := f.post(body, testSecret)
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", rec.Code)
		}
		if strings.Contains(testkit.ScrapeText(t, f.metrics), testToken) {
			t.Fatal("the token is served")
		}
	}
	if got := f.outcomeCount(outcomeMalformed); got != 2 {
		t.Errorf("malformed = %v, want 2", got)
	}
	if got := f.outcomeCount(outcomeAccepted); got != 0 {
		t.Errorf("accepted = %v, want 0", got)
	}
}
