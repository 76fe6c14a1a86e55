package openapitest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The simulator's own tests' helpers live in sim's _test files, which
// another module cannot import; these are the few this test needs.

const testToken = "svc_ak_openapi_test_token"

// newSim starts a seeded simulator on a fake clock; mutate, when not nil,
// adjusts its options first.
func newSim(t *testing.T, mutate func(*sim.Options)) (*sim.Simulator, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC))
	o := sim.Options{Token: testToken, Plan: "pro", Seed: 42, Clock: clock}
	if mutate != nil {
		mutate(&o)
	}
	s, err := sim.New(o)
	if err != nil {
		t.Fatalf("sim.New: %v", err)
	}
	return s, clock
}

// do serves req, with token as its bearer token when not empty.
func do(h http.Handler, req *http.Request, token string) *httptest.ResponseRecorder {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
