// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

func TestEveryStatusCarriesErrorCodeAndRateLimitHeaders(t *testing.T) {
	s, _ := newSim(t, func(o *sim.Options) { o.RateLimit = 7 })
	h := s.Handler()
	reset := strconv.FormatInt(start.Truncate(time.Minute).Add(time.Minute).Unix(), 10)

	cases := []struct {
		name, method, target, token string
		status                      int
		code                        string // "" for 200
		remaining                   string
	}{
		{"me", http.MethodGet, "/api/v1/me", testToken, 200, "", "6"},
		{"breaches", http.MethodGet, "/api/v1/breaches?email=alice@example.com", testToken, 200, "", "5"},
		{"email case-insensitive", http.MethodGet, "/api/v1/breaches?email=Alice@Example.COM", testToken, 200, "", "4"},
		{"missing email", http.MethodGet, "/api/v1/breaches", testToken, 400, sim.CodeMissingEmail, "3"},
		{"no token", http.MethodGet, "/api/v1/me", "", 401, sim.CodeUnauthorized, "7"},
		{"wrong token", http.MethodGet, "/api/v1/breaches?email=alice@example.com", "svc_ak_wrong", 401, sim.CodeUnauthorized, "7"},
		{"unverified", http.MethodGet, "/api/v1/breaches?email=newhire@example.com", testToken, 403, sim.CodeUnverified, "2"},
		{"unknown address", http.MethodGet, "/api/v1/breaches?email=stranger@example.net", testToken, 404, sim.CodeNotMonitored, "1"},
		{"wrong method", http.MethodPost, "/api/v1/me", testToken, 405, sim.CodeMethodNotAllowed, "0"},
		{"over the limit", http.MethodGet, "/api/v1/me", testToken, 429, sim.CodeRateLimited, "0"},
	}
	for _, c := range cases {
		rec := do(h, httptest.NewRequest(c.method, c.target, nil), c.token)
		if rec.Code != c.status {
			t.Fatalf("%s: status %d, want %d (body %s)", c.name, rec.Code, c.status, rec.Body)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		if c.code != "" {
			if got := errorCode(t, rec); got != c.code {
				t.Errorf("%s: error %q, want %q", c.name, got, c.code)
			}
		}
		for header, want := range map[string]string{"X-RateLimit-Limit": "7", "X-RateLimit-Remaining": c.remaining, "X-RateLimit-Reset": reset} {
			if got := rec.Header().Get(header); got != want {
				t.Errorf("%s: %s = %q, want %q", c.name, header, got, want)
			}
		}
	}

	want := map[int]int{200: 3, 400: 1, 401: 2, 403: 1, 404: 1, 405: 1, 429: 1}
	st := s.Stats()
	for code, n := range want {
		if st.Requests[code] != n {
			t.Errorf("Stats.Requests[%d] = %d, want %d (all %v)", code, st.Requests[code], n, st.Requests)
		}
	}
	if st.RateLimited != 1 {
		t.Errorf("Stats.RateLimited = %d, want 1", st.RateLimited)
	}
}

func TestMeAndBreachesBodies(t *testing.T) {
	s, _ := newSim(t, func(o *sim.Options) { o.Plan = "business" })
	h := s.Handler()

	var me sim.Me
	if err := json.Unmarshal(get(h, "/api/v1/me", testToken).Body.Bytes(), &me); err != nil {
		t.Fatal(err)
	}
	if me.Plan != "business" || me.Email != "alice@example.com" || me.ID == "" {
		t.Errorf("me = %+v", me)
	}

	rec := get(h, "/api/v1/breaches?email=alice@example.com", testToken)
	var raw struct {
		Email   string           `json:"email"`
		Sources []map[string]any `json:"sources"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Email != "alice@example.com" || len(raw.Sources) == 0 {
		t.Fatalf("breaches = %s", rec.Body)
	}
	millis := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	for _, src := range raw.Sources {
		for _, key := range []string{"last_scanned_at", "last_changed_at"} {
			if v, _ := src[key].(string); !millis.MatchString(v) {
				t.Errorf("%s = %q, want UTC with milliseconds", key, src[key])
			}
		}
		for _, key := range []string{"source_dbs", "fields_exposed"} {
			if _, isList := src[key].([]any); !isList {
				t.Errorf("%s = %v, want a JSON array", key, src[key])
			}
		}
	}
	// The API body and State agree.
	var body sim.Breaches
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	state, _ := s.State("alice@example.com")
	if len(body.Sources) != len(state.Sources) {
		t.Fatalf("API has %d sources, State %d", len(body.Sources), len(state.Sources))
	}
	for i := range body.Sources {
		if !body.Sources[i].LastScannedAt.Equal(state.Sources[i].LastScannedAt) || body.Sources[i].BreachCount != state.Sources[i].BreachCount {
			t.Errorf("source %d: API %+v, State %+v", i, body.Sources[i], state.Sources[i])
		}
	}
}

func TestUnknownEndpointIs404AndCountsAgainstTheWindow(t *testing.T) {
	s, _ := newSim(t, nil)
	rec := get(s.Handler(), "/api/v1/nothing", testToken)
	if rec.Code != http.StatusNotFound || errorCode(t, rec) != sim.CodeNotFound {
		t.Fatalf("got %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get(sim.HeaderRemaining); got != "59" {
		t.Errorf("remaining %q, want 59", got)
	}
}

func TestFixedWindow(t *testing.T) {
	s, clock := newSim(t, nil) // default limit: 60
	h := s.Handler()
	windowEnd := start.Truncate(time.Minute).Add(time.Minute)

	// Unattributable requests spend nothing.
	for range 5 {
		if rec := get(h, "/api/v1/me", "svc_ak_wrong"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d", rec.Code)
		}
	}
	for i := 1; i <= 60; i++ {
		rec := get(h, "/api/v1/me", testToken)
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
		if got, want := rec.Header().Get(sim.HeaderRemaining), strconv.Itoa(60-i); got != want {
			t.Fatalf("request %d: remaining %s, want %s", i, got, want)
		}
	}
	rec := get(h, "/api/v1/me", testToken)
	if rec.Code != http.StatusTooManyRequests || errorCode(t, rec) != sim.CodeRateLimited {
		t.Fatalf("request 61: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get(sim.HeaderReset); got != strconv.FormatInt(windowEnd.Unix(), 10) {
		t.Errorf("request 61: reset %s, want %d", got, windowEnd.Unix())
	}
	if got := rec.Header().Get(sim.HeaderRemaining); got != "0" {
		t.Errorf("request 61: remaining %s, want 0", got)
	}
	// An unknown token in an exhausted window still gets 401, not 429.
	if rec := get(h, "/api/v1/me", "svc_ak_wrong"); rec.Code != http.StatusUnauthorized {
		t.Errorf("wrong token in exhausted window: %d", rec.Code)
	}

	clock.Advance(windowEnd.Sub(start) - time.Second) // last second of the window
	if rec := get(h, "/api/v1/me", testToken); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("last second of the window: %d", rec.Code)
	}
	clock.Advance(time.Second) // exactly the reset time
	rec = get(h, "/api/v1/me", testToken)
	if rec.Code != http.StatusOK {
		t.Fatalf("next window: %d", rec.Code)
	}
	if got := rec.Header().Get(sim.HeaderRemaining); got != "59" {
		t.Errorf("next window: remaining %s, want 59", got)
	}
	if got := rec.Header().Get(sim.HeaderReset); got != strconv.FormatInt(windowEnd.Add(time.Minute).Unix(), 10) {
		t.Errorf("next window: reset %s, want %d", got, windowEnd.Add(time.Minute).Unix())
	}
	if n := s.Stats().RateLimited; n != 2 {
		t.Errorf("RateLimited = %d, want 2", n)
	}
}

func TestOpenAPIEndpoint(t *testing.T) {
	s, _ := newSim(t, nil)
	rec := get(s.Handler(), "/openapi.json", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	if rec.Body.String() != string(sim.OpenAPIDocument()) {
		t.Error("served document differs from the embedded one")
	}
	if rec := do(s.Handler(), httptest.NewRequest(http.MethodPost, "/openapi.json", nil), ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /openapi.json: %d", rec.Code)
	}
}
