// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

const secondToken = "svc_ak_second_account"

// Each key is its own account with its own addresses and its own fixed
// window, and the simulator records every window per key.
func TestEveryKeyHasItsOwnAccountAndWindow(t *testing.T) {
	s, clock := newSim(t, func(o *sim.Options) {
		o.RateLimit = 3
		o.MoreAccounts = []sim.Account{{Token: secondToken, Plan: "business",
			Addresses: []sim.Address{{Email: "zoe@example.net", Verified: true}}}}
	})
	h := s.Handler()

	// The first key spends its window and one more; the second is untouched.
	for i, want := range []int{200, 200, 200, 429} {
		if rec := get(h, "/api/v1/me", testToken); rec.Code != want {
			t.Fatalf("first key, request %d: %d, want %d", i+1, rec.Code, want)
		}
	}
	rec := get(h, "/api/v1/me", secondToken)
	if rec.Code != 200 || rec.Header().Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("second key after the first spent its window: %d, remaining %q", rec.Code, rec.Header().Get("X-RateLimit-Remaining"))
	}
	if !strings.Contains(rec.Body.String(), `"plan":"business"`) {
		t.Errorf("second key's /me: %s", rec.Body)
	}
	clock.Advance(time.Minute) // into the next window
	if rec := get(h, "/api/v1/breaches?email=zoe@example.net", testToken); rec.Code != 404 {
		t.Errorf("the first key asks for the second account's address: %d, want 404", rec.Code)
	}
	if rec := get(h, "/api/v1/breaches?email=alice@example.com", secondToken); rec.Code != 404 {
		t.Errorf("the second key asks for the first account's address: %d, want 404", rec.Code)
	}
	if rec := get(h, "/api/v1/breaches?email=zoe@example.net", secondToken); rec.Code != 200 {
		t.Errorf("the second key asks for its own address: %d, want 200", rec.Code)
	}

	first, dropped := s.Windows(testToken)
	minute := start.Truncate(time.Minute)
	want := []sim.Window{{Start: minute, Requests: 4, RateLimited: 1}, {Start: minute.Add(time.Minute), Requests: 1}}
	if dropped != 0 || len(first) != 2 || first[0] != want[0] || first[1] != want[1] {
		t.Errorf("first key's windows %+v (%d dropped), want %+v", first, dropped, want)
	}
	second, _ := s.Windows(secondToken)
	if len(second) != 2 || second[0] != (sim.Window{Start: minute, Requests: 1}) || second[1] != (sim.Window{Start: minute.Add(time.Minute), Requests: 2}) {
		t.Errorf("second key's windows %+v", second)
	}
	if w, _ := s.Windows("svc_ak_nobody"); w != nil {
		t.Errorf("an unknown key has windows %+v", w)
	}
}

// Answer and AnswerOthers set the first account's answers exactly, values
// the spec does not know included; sweeps leave such addresses alone.
func TestAnswersSetExactly(t *testing.T) {
	s, _ := newSim(t, func(o *sim.Options) { o.Addresses = []sim.Address{} })
	h := s.Handler()
	if rec := get(h, "/api/v1/breaches?email=anyone@example.com", testToken); rec.Code != 404 {
		t.Fatalf("an empty account: %d, want 404", rec.Code)
	}
	changed := time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)
	s.AnswerOthers(sim.Verified(breach.SourceState{Source: "darkweb", BreachCount: 7, SourceDBs: []string{"x"},
		LastScannedAt: changed, LastChangedAt: changed}))
	s.Answer("Bob@example.com", sim.Unverified())
	s.Sweep(t.Context())

	rec := get(h, "/api/v1/breaches?email=anyone@example.com", testToken)
	wantBody := `{"email":"anyone@example.com","sources":[{"source":"darkweb","breach_count":7,"source_dbs":["x"],"fields_exposed":[],` +
		`"has_plaintext_password":false,"last_scanned_at":"2031-05-01T00:00:00.000Z","last_changed_at":"2031-05-01T00:00:00.000Z"}]}` + "\n"
	if rec.Code != 200 || rec.Body.String() != wantBody {
		t.Errorf("others: %d %s, want %s", rec.Code, rec.Body, wantBody)
	}
	if rec := get(h, "/api/v1/breaches?email=bob@example.com", testToken); rec.Code != 403 {
		t.Errorf("bob, set unverified: %d", rec.Code)
	}
	if string(sim.BreachesBody("anyone@example.com", breach.SourceState{Source: "darkweb", BreachCount: 7, SourceDBs: []string{"x"},
		LastScannedAt: changed, LastChangedAt: changed}))+"\n" != wantBody {
		t.Errorf("BreachesBody differs from the served body")
	}
	s.Answer("bob@example.com", sim.NotMonitored())
	if rec := get(h, "/api/v1/breaches?email=bob@example.com", testToken); rec.Code != 404 {
		t.Errorf("bob, set not monitored: %d", rec.Code)
	}
}

// Hooks answer ahead of the key check and the window, Script before
// Misbehave; every request is logged.
func TestHooksAndTheRequestLog(t *testing.T) {
	s, _ := newSim(t, nil)
	h := s.Handler()
	teapot := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }
	gone := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }
	s.Misbehave(teapot)
	s.Script(gone)
	for i, want := range []int{410, 418, 418} {
		if rec := get(h, "/api/v1/breaches?email=alice@example.com", ""); rec.Code != want {
			t.Errorf("request %d: %d, want %d", i+1, rec.Code, want)
		}
	}
	s.Misbehave(nil)
	if rec := get(h, "/api/v1/me", testToken); rec.Code != 200 {
		t.Errorf("after Misbehave(nil): %d", rec.Code)
	}
	if w, _ := s.Windows(testToken); len(w) != 1 || w[0].Requests != 1 {
		t.Errorf("hooked requests cost the window: %+v", w)
	}
	if n := s.Reads("alice@example.com"); n != 3 {
		t.Errorf("Reads = %d, want 3", n)
	}
	if n := s.MeCalls(); n != 1 {
		t.Errorf("MeCalls = %d, want 1", n)
	}
	log := s.Requests()
	if len(log) != 4 || !log[0].Faulted || log[3].Faulted || log[3].Account != 0 || log[0].Account != -1 || !log[0].At.Equal(start) {
		t.Errorf("log %+v", log)
	}

	status, body := s.Reply(httptestRequest("/api/v1/breaches?email=newhire@example.com"))
	if status != 403 || string(body) != `{"error":"unverified"}` {
		t.Errorf("Reply: %d %s", status, body)
	}
}

func httptestRequest(target string) *http.Request {
	r, err := http.NewRequest(http.MethodGet, "http://sim"+target, nil)
	if err != nil {
		panic(err)
	}
	return r
}
