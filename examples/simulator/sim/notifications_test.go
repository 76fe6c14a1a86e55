// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kit/log"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// The demo's Alertmanager posts here: each alert is logged and the answer
// is 200, so the example's receivers never count a failed notification.
func TestNotificationsAreLoggedAndAccepted(t *testing.T) {
	var logs bytes.Buffer
	s, _ := newSim(t, func(o *sim.Options) { o.Logger = log.NewLogfmtLogger(&logs) })
	h := s.Handler()
	body := `{"version":"4","receiver":"security-oncall","status":"firing","alerts":[` +
		`{"status":"firing","labels":{"alertname":"BreachCredentialsExposed","severity":"critical","address":"alice@example.com","source":"paste"}},` +
		`{"status":"resolved","labels":{"alertname":"BreachDataStale","severity":"warning"}}]}`

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, sim.NotificationsPath+"security-oncall", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("POST a notification: %d %s", rec.Code, rec.Body)
	}
	for _, want := range []string{
		`receiver=security-oncall status=firing alertname=BreachCredentialsExposed severity=critical address=alice@example.com source=paste`,
		`receiver=security-oncall status=resolved alertname=BreachDataStale severity=warning`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "not json", http.StatusBadRequest},
		{http.MethodPost, `{"alerts":"` + strings.Repeat("x", 2<<20) + `"}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, sim.NotificationsPath+"ops", strings.NewReader(tc.body)))
		if rec.Code != tc.want {
			t.Errorf("%s %.20q: %d, want %d", tc.method, tc.body, rec.Code, tc.want)
		}
	}
}
