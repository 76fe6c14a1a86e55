// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

func admin(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
}

func TestAdminFaults(t *testing.T) {
	s, clock := newSim(t, nil)
	api, ctl := s.Handler(), s.AdminHandler(context.Background())

	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":"rate_limited"}`), http.StatusNoContent)
	rec := get(api, "/api/v1/me", testToken)
	wantStatus(t, rec, http.StatusTooManyRequests)
	if got, want := rec.Header().Get(sim.HeaderReset), strconv.FormatInt(clock.Now().Add(sim.FaultResetAfter).Unix(), 10); got != want {
		t.Errorf("reset %s, want %s", got, want)
	}
	if rec.Header().Get(sim.HeaderRemaining) != "0" || errorCode(t, rec) != sim.CodeRateLimited {
		t.Errorf("429 with remaining %s, body %s", rec.Header().Get(sim.HeaderRemaining), rec.Body)
	}
	// An unknown key still gets its 401 first.
	wantStatus(t, get(api, "/api/v1/me", "svc_ak_other"), http.StatusUnauthorized)

	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":"server_error"}`), http.StatusNoContent)
	wantStatus(t, get(api, "/api/v1/breaches?email=alice@example.com", testToken), http.StatusServiceUnavailable)

	// One address only.
	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":""}`), http.StatusNoContent)
	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":"server_error","email":"Bob@example.com"}`), http.StatusNoContent)
	wantStatus(t, get(api, "/api/v1/breaches?email=bob@example.com", testToken), http.StatusServiceUnavailable)
	wantStatus(t, get(api, "/api/v1/breaches?email=alice@example.com", testToken), http.StatusOK)
	wantStatus(t, get(api, "/api/v1/me", testToken), http.StatusOK)
	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":"","email":"bob@example.com"}`), http.StatusNoContent)
	wantStatus(t, get(api, "/api/v1/breaches?email=bob@example.com", testToken), http.StatusOK)

	wantStatus(t, admin(t, ctl, "/admin/fault", `{"kind":"teapot"}`), http.StatusBadRequest)
	wantStatus(t, admin(t, ctl, "/admin/fault", `{"knd":"close"}`), http.StatusBadRequest)
	if rec := do(ctl, httptest.NewRequest(http.MethodGet, "/admin/fault", nil), ""); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /admin/fault: %d, want 405", rec.Code)
	}
}

func TestAdminCloseFaultDropsTheConnection(t *testing.T) {
	s, _ := newSim(t, nil)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	if err := s.SetFault(sim.FaultClose, ""); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/me", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want the connection closed", resp.Status)
	}
}

func TestAdminTokenAndPlan(t *testing.T) {
	s, _ := newSim(t, nil)
	api, ctl := s.Handler(), s.AdminHandler(context.Background())
	wantStatus(t, admin(t, ctl, "/admin/token", `{"token":"svc_ak_rotated"}`), http.StatusNoContent)
	wantStatus(t, get(api, "/api/v1/me", testToken), http.StatusUnauthorized)
	wantStatus(t, get(api, "/api/v1/me", "svc_ak_rotated"), http.StatusOK)
	wantStatus(t, admin(t, ctl, "/admin/token", `{"token":"not-a-key"}`), http.StatusBadRequest)

	wantStatus(t, admin(t, ctl, "/admin/plan", `{"plan":"free"}`), http.StatusNoContent)
	var me sim.Me
	if err := json.Unmarshal(get(api, "/api/v1/me", "svc_ak_rotated").Body.Bytes(), &me); err != nil || me.Plan != "free" {
		t.Errorf("/me %+v (%v), want plan free", me, err)
	}
	wantStatus(t, admin(t, ctl, "/admin/plan", `{"plan":"gold"}`), http.StatusBadRequest)
}

func TestAdminAddressStates(t *testing.T) {
	s, _ := newSim(t, nil)
	api, ctl := s.Handler(), s.AdminHandler(context.Background())
	for _, tc := range []struct {
		email, state string
		want         int
	}{
		{"newhire@example.com", "verified", http.StatusOK},
		{"alice@example.com", "unverified", http.StatusForbidden},
		{"bob@example.com", "absent", http.StatusNotFound},
		{"new@example.net", "unverified", http.StatusForbidden},
		{"new@example.net", "verified", http.StatusOK},
	} {
		wantStatus(t, admin(t, ctl, "/admin/address", `{"email":"`+tc.email+`","state":"`+tc.state+`"}`), http.StatusNoContent)
		if rec := get(api, "/api/v1/breaches?email="+tc.email, testToken); rec.Code != tc.want {
			t.Errorf("%s %s: GET /breaches %d, want %d", tc.email, tc.state, rec.Code, tc.want)
		}
	}
	if b, _ := s.State("newhire@example.com"); len(b.Sources) != 0 {
		t.Errorf("a newly verified address has scanned feeds: %+v", b)
	}
	wantStatus(t, admin(t, ctl, "/admin/address", `{"email":"x@example.com","state":"lost"}`), http.StatusBadRequest)
	wantStatus(t, admin(t, ctl, "/admin/address", `{"email":"not an email","state":"verified"}`), http.StatusBadRequest)
}

// A feed set through the controls reports exactly that, produces the alert a
// sweep would, delivers it, and is left alone by later sweeps.
func TestAdminFeedAlertsAndPins(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	s, clock := newSim(t, func(o *sim.Options) {
		o.WebhookURL, o.WebhookSecret = hook.URL, []byte("secret")
		o.Addresses = []sim.Address{{Email: "owner@example.com", Verified: true}}
	})
	ctx := context.Background()
	ctl := s.AdminHandler(ctx)
	wantStatus(t, admin(t, ctl, "/admin/address", `{"email":"subject@example.com","state":"verified"}`), http.StatusNoContent)
	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"index","databases":["base-2019"],"fields":["username"]}`), http.StatusOK)

	rec := admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"index","databases":["base-2019","new-2026"],"fields":["username","password","phone"],"plaintext":true}`)
	wantStatus(t, rec, http.StatusOK)
	var alert sim.Alert
	if err := json.Unmarshal(rec.Body.Bytes(), &alert); err != nil {
		t.Fatal(err)
	}
	if alert.Severity != breach.Critical || !alert.Delta.HasNewPlaintext || strings.Join(alert.Delta.NewSourceDBs, ",") != "new-2026" ||
		strings.Join(alert.Delta.NewlyExposedFields, ",") != "password,phone" {
		t.Errorf("alert %+v", alert)
	}
	// The same state again is no change: no alert.
	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"index","databases":["base-2019","new-2026"],"fields":["username","password","phone"],"plaintext":true}`), http.StatusNoContent)
	s.Flush(ctx)
	// Deliveries run concurrently, so they may arrive in either order.
	mu.Lock()
	received := slices.Clone(bodies)
	mu.Unlock()
	withPlaintext := slices.IndexFunc(received, func(b string) bool { return strings.Contains(b, `"has_new_plaintext":true`) })
	if len(received) != 2 || withPlaintext < 0 {
		t.Errorf("deliveries %q; want 2, one of them with the plaintext", received)
	}

	before, _ := s.State("subject@example.com")
	for range 50 {
		clock.Advance(1)
		s.Sweep(ctx)
	}
	after, _ := s.State("subject@example.com")
	if len(after.Sources) != 1 || !after.Sources[0].LastChangedAt.Equal(before.Sources[0].LastChangedAt) || after.Sources[0].BreachCount != before.Sources[0].BreachCount {
		t.Errorf("sweeps changed a pinned address: %+v -> %+v", before, after)
	}

	// The plan decides deliveries.
	s.Flush(ctx) // the owner's sweep alerts
	mu.Lock()
	delivered := len(bodies)
	mu.Unlock()
	wantStatus(t, admin(t, ctl, "/admin/plan", `{"plan":"personal"}`), http.StatusNoContent)
	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"index","databases":[],"fields":[]}`), http.StatusOK)
	s.Flush(ctx)
	mu.Lock()
	if len(bodies) != delivered {
		t.Errorf("%d deliveries on the personal plan, want none", len(bodies)-delivered)
	}
	mu.Unlock()

	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"nobody@example.com","source":"index"}`), http.StatusBadRequest)
	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"rumours"}`), http.StatusBadRequest)
	wantStatus(t, admin(t, ctl, "/admin/feed", `{"email":"subject@example.com","source":"index","fields":["shoe_size"]}`), http.StatusBadRequest)
}
