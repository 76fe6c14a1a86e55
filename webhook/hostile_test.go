package webhook

import (
	"net/http"
	"net/http/httptest"
	"testing"
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
