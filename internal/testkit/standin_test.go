// SPDX-License-Identifier: Apache-2.0

package testkit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func get(t *testing.T, url, token string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// The stand-in's answers are what the spec describes: the exporter's own
// strict decoder takes them, and each status comes with its Error body.
func TestStandInAnswersAsTheSpecSays(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	a := testkit.NewStandIn(t, clock)
	alice := breach.SourceState{Source: "archive", BreachCount: 2, SourceDBs: []string{"db-a"}, FieldsExposed: []string{"password"},
		HasPlaintextPassword: true, LastScannedAt: time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC), LastChangedAt: time.Date(2031, 5, 1, 0, 0, 0, 0, time.UTC)}
	a.Answer("Alice@example.com", sim.Verified(alice))
	a.Answer("bob@example.com", sim.Unverified())
	a.SetPlan("business")
	base := a.BaseURL()

	code, h, body := get(t, base+"/me", testkit.APIToken)
	if me, err := api.DecodeMe(body); code != 200 || err != nil || me.Plan != "business" {
		t.Errorf("/me: %d %s (%v)", code, body, err)
	}
	if h.Get("X-RateLimit-Limit") != "60" || h.Get("X-RateLimit-Remaining") == "" ||
		h.Get("X-RateLimit-Reset") != strconv.FormatInt(time.Date(2031, 5, 6, 7, 9, 0, 0, time.UTC).Unix(), 10) {
		t.Errorf("rate-limit headers %v, want the fake clock's next minute", h)
	}
	code, _, body = get(t, base+"/breaches?email=alice%40example.com", testkit.APIToken)
	got, err := api.DecodeBreaches(body, "alice@example.com", clock.Now())
	if code != 200 || err != nil || !reflect.DeepEqual(got.Sources, []breach.SourceState{alice}) {
		t.Errorf("alice: %d %s (%v)", code, body, err)
	}
	for _, c := range []struct {
		query, token string
		code         int
	}{
		{"?email=bob%40example.com", testkit.APIToken, 403},
		{"?email=carol%40example.com", testkit.APIToken, 404},
		{"", testkit.APIToken, 400},
		{"?email=alice%40example.com", "svc_ak_wrong", 401},
		{"?email=alice%40example.com", "", 401},
	} {
		code, _, body := get(t, base+"/breaches"+c.query, c.token)
		if code != c.code || !isErrorBody(body) {
			t.Errorf("%s with %q: %d %s, want %d with an Error body", c.query, c.token, code, body, c.code)
		}
	}

	a.AnswerOthers(sim.Verified())
	if code, _, body := get(t, base+"/breaches?email=carol%40example.com", testkit.APIToken); code != 200 || strings.TrimSpace(string(body)) != `{"email":"carol@example.com","sources":[]}` {
		t.Errorf("carol with AnswerOthers: %d %s", code, body)
	}
	if err := a.SetToken("svc_ak_new"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := get(t, base+"/me", testkit.APIToken); code != 401 {
		t.Errorf("the old token after a rotation: %d, want 401", code)
	}
	if code, _, _ := get(t, base+"/me", "svc_ak_new"); code != 200 {
		t.Errorf("the new token: %d, want 200", code)
	}

	if n := a.Reads("alice@example.com"); n != 3 {
		t.Errorf("Reads(alice) = %d, want 3", n)
	}
	if n := a.MeCalls(); n != 3 {
		t.Errorf("MeCalls = %d, want 3", n)
	}
	for _, r := range a.Requests() {
		if !r.At.Equal(clock.Now()) {
			t.Errorf("request stamped %v, want the fake clock's %v", r.At, clock.Now())
		}
	}
}

// isErrorBody reports whether body is an Error object (spec section 7).
func isErrorBody(body []byte) bool {
	var e struct {
		Error *string `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error != nil && *e.Error != ""
}

// Scripted faults answer the next requests in order, ahead of a standing
// fault; the log marks them.
func TestStandInFaults(t *testing.T) {
	a := testkit.NewStandIn(t, nil)
	a.AnswerOthers(sim.Verified())
	url := a.BaseURL() + "/breaches?email=a%40example.com"
	a.Misbehave(testkit.Status(503))
	a.Script(testkit.Status(500), a.RateLimited(testkit.NextMinute))
	var codes []int
	for range 3 {
		code, h, _ := get(t, url, testkit.APIToken)
		codes = append(codes, code)
		if code == 429 && h.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("429 with Remaining %q, want 0", h.Get("X-RateLimit-Remaining"))
		}
	}
	a.Misbehave(nil)
	code, _, _ := get(t, url, testkit.APIToken)
	codes = append(codes, code)
	if want := []int{500, 429, 503, 200}; !reflect.DeepEqual(codes, want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
	var faulted []bool
	for _, r := range a.Requests() {
		faulted = append(faulted, r.Faulted)
	}
	if want := []bool{true, true, true, false}; !reflect.DeepEqual(faulted, want) {
		t.Errorf("faulted %v, want %v", faulted, want)
	}

	// A hang lets go when the client gives up.
	a.Misbehave(testkit.Hang)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Error("a hanging request answered")
	}

	// Refused connections, then serving again on the same address.
	a.Misbehave(nil)
	a.Refuse()
	if _, err := http.Get(url); err == nil {
		t.Error("a refusing stand-in answered")
	}
	a.Listen()
	if code, _, _ := get(t, url, testkit.APIToken); code != 200 {
		t.Errorf("after Listen: %d", code)
	}
}
