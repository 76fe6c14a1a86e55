// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	testSecret  = []byte("test-secret-current")
	otherSecret = []byte("test-secret-previous")
	testStart   = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
)

const validAlert = `{"event":"alert.created","severity":"critical","address":"alice@example.com",` +
	`"source":"combolist","summary":"2 new databases","delta":{"previous_count":3,"new_count":5,` +
	`"new_source_dbs":["db-one","db-two"],"newly_exposed_fields":["password","phone"],` +
	`"has_new_plaintext":true,"is_first_scan":false},"observed_at":"2025-03-01T11:59:00Z",` +
	`"dashboard_url":"https://service.example/dashboard/a/1"}`

// alertBody is an alert for bob with a distinct summary, so bodies differ.
func alertBody(summary string) []byte {
	return alertBodyFor("bob@example.com", summary)
}

// alertBodyFor is alertBody for another address.
func alertBodyFor(address, summary string) []byte {
	return fmt.Appendf(nil, `{"event":"alert.created","severity":"warning","address":%q,`+
		`"source":"index","summary":%q,"delta":{"new_source_dbs":["x"]},"observed_at":"2025-03-01T11:00:00Z"}`, address, summary)
}

// settings are the parts of the config the receiver reads, given as Go
// values; a zero field keeps the config's default.
type settings struct {
	Secrets         [][]byte // nil: testSecret alone
	MaxBodyBytes    int64
	DedupWindow     time.Duration
	DedupMaxEntries int
	MaxEventAge     time.Duration
	Addresses       []string // configured: watched from the start
	LabelMode       breach.LabelMode
	NoDiscovery     bool // webhook.discover_addresses: false
	MaxDiscovered   int  // webhook.max_discovered_addresses
	// LabsAddresses, when set, make a second account, labs, signing with
	// labsSecret: the others are then the account default's.
	LabsAddresses []string
}

// labsSecret is the second account's secret (settings.LabsAddresses).
var labsSecret = []byte("labs-webhook-secret-0123456789")

// bundle builds the config bundle s describes, as a load would, minus
// the files: the receiver only reads the webhook section and the secrets.
// testToken is the API token of the bundle in force.
const testToken = "svc_ak_webhook-test-token"

// baseConfig is a config with every default, loaded as a start loads
// one (LoadBundle), for the settings to change.
func baseConfig(t testing.TB) *config.Config {
	t.Helper()
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testToken)
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), "api: {base_url: 'http://127.0.0.1:1/api/v1', token_file: token}\n")
	b, err := config.LoadBundle(filepath.Join(dir, "config.yml"), config.LoadOptions{})
	if err != nil {
		t.Fatalf("base config: %v", err)
	}
	return b.Config
}

func (s settings) bundle(t testing.TB) *config.Bundle {
	t.Helper()
	cfg := baseConfig(t)
	w := &cfg.Webhook
	if s.MaxBodyBytes != 0 {
		w.MaxBodyBytes = s.MaxBodyBytes
	}
	if s.DedupWindow != 0 {
		w.DedupWindow = model.Duration(s.DedupWindow)
	}
	if s.DedupMaxEntries != 0 {
		w.DedupMaxEntries = s.DedupMaxEntries
	}
	w.MaxEventAge = model.Duration(s.MaxEventAge)
	if s.NoDiscovery {
		off := false
		w.DiscoverAddresses = &off
	}
	if s.MaxDiscovered != 0 {
		w.MaxDiscoveredAddresses = s.MaxDiscovered
	}
	if s.LabelMode != "" {
		cfg.Labels.Address = s.LabelMode
	}
	// Every alert family the receiver feeds is served.
	cfg.Metrics.DetailFamilies = config.DetailFamilies
	for _, a := range s.Addresses {
		cfg.Addresses = append(cfg.Addresses, config.Address{Email: a})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("test settings are not a valid config: %v", err)
	}
	secrets := s.Secrets
	if secrets == nil {
		secrets = [][]byte{testSecret}
	}
	b := &config.Bundle{Config: cfg}
	if s.LabsAddresses != nil {
		cfg.Accounts = []config.Account{{Name: breach.DefaultAccount, Addresses: cfg.Addresses}, {Name: "labs"}}
		cfg.Addresses = nil
		for _, a := range s.LabsAddresses {
			cfg.Accounts[1].Addresses = append(cfg.Accounts[1].Addresses, config.Address{Email: a})
		}
		b.Accounts = []*config.AccountBundle{
			{Name: breach.DefaultAccount, Config: cfg.Accounts[0], Secrets: secrets, Token: config.NewTokenSource(testToken, nil)},
			{Name: "labs", Config: cfg.Accounts[1], Secrets: [][]byte{labsSecret}, Token: config.NewTokenSource("svc_ak_labs-token", nil)},
		}
		return b
	}
	b.Accounts = []*config.AccountBundle{{Name: breach.DefaultAccount, Config: cfg.AccountsInForce()[0], Secrets: secrets, Token: config.NewTokenSource(testToken, nil)}}
	return b
}

// fixture is the receiver wired as the exporter wires it: the config in
// force, the watchlist its alerts are counted in, and the collector that
// exports the per-address series beside the receiver's own.
type fixture struct {
	t         testing.TB
	h         *Handler
	reg       *prometheus.Registry // the receiver's own metrics
	config    *config.Current
	watchlist *watchlist.List
	metrics   http.Handler        // reg and the collector: /metrics
	gatherer  prometheus.Gatherer // a scrape of metrics, parsed
	clock     *clockwork.FakeClock
}

func newFixture(t testing.TB, s settings) *fixture {
	t.Helper()
	bundle := s.bundle(t)
	f := &fixture{
		t:         t,
		reg:       prometheus.NewRegistry(),
		config:    config.NewCurrent(bundle),
		watchlist: watchlist.New(),
		clock:     clockwork.NewFakeClockAt(testStart),
	}
	f.sync(bundle)
	h, err := NewHandler(f.reg, Options{Config: f.config, Watchlist: f.watchlist, Clock: f.clock, Logger: log.NewNopLogger()})
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	f.h = h
	f.metrics = collector.NewHandler(collector.NewRenderer(f.watchlist, f.config, true), f.reg, log.NewNopLogger())
	f.gatherer = testkit.ScrapeGatherer(t, f.metrics)
	return f
}

// update is a reload as the exporter does it: the new bundle goes in
// force, then the watchlist follows its addresses and label mode.
func (f *fixture) update(s settings) {
	f.t.Helper()
	bundle := s.bundle(f.t)
	f.config.Store(bundle)
	f.sync(bundle)
}

func (f *fixture) sync(bundle *config.Bundle) {
	cfg := bundle.Config
	f.watchlist.Sync(cfg.AccountNames(), cfg.Watched(), cfg.Labels.Address, cfg.Webhook.DiscoveryLimit())
}

// samples gathers what /metrics would serve.
func (f *fixture) samples() map[string]float64 {
	f.t.Helper()
	return testkit.Scrape(f.t, f.metrics)
}

// sample is one served sample; an absent series reads as -1, so that it
// never passes for a zero.
func (f *fixture) sample(name string, labels ...string) float64 {
	f.t.Helper()
	if v, ok := f.samples()[testkit.Series(name, labels...)]; ok {
		return v
	}
	return -1
}

// alertCount is breach_alerts_total for one address, source and severity.
func (f *fixture) alertCount(address, source, severity string) float64 {
	f.t.Helper()
	return f.sample("breach_alerts_total", "address", address, "source", source, "severity", severity)
}

// queued lists, sorted, the watched addresses an alert has queued for an
// immediate re-read (what the old onAlert callback asked the exporter for).
func (f *fixture) queued() []string {
	var out []string
	for _, e := range f.watchlist.View().Entries {
		if e.Schedule.Urgent != 0 {
			out = append(out, e.Address.Email)
		}
	}
	slices.Sort(out)
	return out
}

// post sends body signed with secret (unsigned when secret is nil).
func (f *fixture) post(body []byte, secret []byte) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if secret != nil {
		req.Header.Set(SignatureHeader, sim.Sign(secret, body))
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

// alertSeries counts the served series of all alert families.
func (f *fixture) alertSeries() int {
	f.t.Helper()
	n, err := testutil.GatherAndCount(f.gatherer, alertFamilies...)
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
