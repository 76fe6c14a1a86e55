package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	testSecret  = []byte("test-secret-current")
	otherSecret = []byte("test-secret-previous")
	testStart   = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

// sign computes the spec's signature header independently of the code
// under test.
func sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

const validAlert = `{"event":"alert.created","severity":"critical","address":"alice@example.com",` +
	`"source":"combolist","summary":"2 new databases","delta":{"previous_count":3,"new_count":5,` +
	`"new_source_dbs":["db-one","db-two"],"newly_exposed_fields":["password","phone"],` +
	`"has_new_plaintext":true,"is_first_scan":false},"observed_at":"2025-03-01T11:59:00Z",` +
	`"dashboard_url":"https://service.example/dashboard/a/1"}`

// alertBody is validAlert with a distinct summary, so bodies differ.
func alertBody(summary string) []byte {
	return fmt.Appendf(nil, `{"event":"alert.created","severity":"warning","address":"bob@example.com",`+
		`"source":"index","summary":%q,"delta":{"new_source_dbs":["x"]},"observed_at":"2025-03-01T11:00:00Z"}`, summary)
}

type fixture struct {
	t       *testing.T
	h       *Handler
	reg     *prometheus.Registry
	clock   *clockwork.FakeClock
	mu      sync.Mutex
	alerted []Alert
}

func newFixture(t *testing.T, s Settings) *fixture {
	t.Helper()
	f := &fixture{t: t, reg: prometheus.NewRegistry(), clock: clockwork.NewFakeClockAt(testStart)}
	if s.Secrets == nil {
		s.Secrets = [][]byte{testSecret}
	}
	h, err := NewHandler(f.reg, f.clock, log.NewNopLogger(), func(a Alert) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.alerted = append(f.alerted, a)
	}, s)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	f.h = h
	return f
}

func (f *fixture) alerts() []Alert {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Alert(nil), f.alerted...)
}

// post sends body signed with secret (unsigned when secret is nil).
func (f *fixture) post(body []byte, secret []byte) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		req.Header.Set(SignatureHeader, sign(secret, body))
	}
	return f.serve(req)
}

func (f *fixture) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// expectOutcome posts a signed body and checks the status and outcome.
func (f *fixture) expectOutcome(body []byte, outcome string) {
	f.t.Helper()
	before := f.outcomeCount(outcome)
	rec := f.post(body, testSecret)
	if rec.Code != http.StatusNoContent {
		f.t.Fatalf("status %d, want 204 (body %q)", rec.Code, rec.Body)
	}
	if got := f.outcomeCount(outcome) - before; got != 1 {
		f.t.Fatalf("outcome %s grew by %v, want 1", outcome, got)
	}
}

func (f *fixture) outcomeCount(outcome string) float64 {
	return testutil.ToFloat64(f.h.metrics.requests[outcome])
}

// outcomeSum is the total over all outcomes.
func (f *fixture) outcomeSum() float64 {
	sum := 0.0
	for _, o := range outcomes {
		sum += f.outcomeCount(o)
	}
	return sum
}

// alertSeries counts the series of all alert families.
func (f *fixture) alertSeries() int {
	f.t.Helper()
	n, err := testutil.GatherAndCount(f.reg, alertFamilies...)
	if err != nil {
		f.t.Fatalf("gather: %v", err)
	}
	return n
}

var alertFamilies = []string{
	"breach_alerts_total",
	"breach_alert_new_databases_total",
	"breach_alert_exposed_fields_total",
	"breach_alert_new_plaintext_passwords_total",
	"breach_alert_last_observed_timestamp_seconds",
}
