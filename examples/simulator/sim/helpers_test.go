// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"encoding/json"
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

const testToken = "svc_ak_test_token_1234"

// start is 10s into a Unix minute, so the window boundary is 50s away.
var start = time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)

func newSim(t *testing.T, mutate func(*sim.Options)) (*sim.Simulator, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(start)
	o := sim.Options{Token: testToken, Plan: "pro", Seed: 42, Clock: clock}
	if mutate != nil {
		mutate(&o)
	}
	s, err := sim.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, clock
}

func get(h http.Handler, target, token string) *httptest.ResponseRecorder {
	return do(h, httptest.NewRequest(http.MethodGet, target, nil), token)
}

func do(h http.Handler, req *http.Request, token string) *httptest.ResponseRecorder {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error == nil {
		t.Fatalf("body %q is not an Error object (err %v)", rec.Body.String(), err)
	}
	return *body.Error
}

// states returns every verified address's scan state, per address and source.
func states(t *testing.T, s *sim.Simulator, addrs []sim.Address) map[string]map[string]sim.BreachSourceState {
	t.Helper()
	all := map[string]map[string]sim.BreachSourceState{}
	for _, a := range addrs {
		if !a.Verified {
			continue
		}
		b, ok := s.State(a.Email)
		if !ok {
			t.Fatalf("State(%s): not found", a.Email)
		}
		bySource := map[string]sim.BreachSourceState{}
		for _, src := range b.Sources {
			bySource[src.Source] = src
		}
		all[a.Email] = bySource
	}
	return all
}
