// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

var (
	scanned = time.Date(2026, 11, 20, 10, 0, 0, 250e6, time.UTC) // 1795168800.25
	changed = time.Date(2026, 11, 19, 8, 30, 0, 0, time.UTC)     // 1795077000
	polled  = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)      // 1795327200
)

// fixture is a watchlist watching addresses under mode, and a collector
// over it with a budget of 55 a minute.
type fixture struct {
	reg    *watchlist.List
	config *config.Current
	c      *Renderer
	h      *Handler
}

func newFixture(mode breach.LabelMode, webhook bool, addresses ...breach.Address) *fixture {
	f := &fixture{reg: watchlist.New()}
	f.config = config.NewCurrent(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55}}})
	f.reg.Sync(nil, addresses, mode, 1000)
	f.reg.SetCycle(breach.DefaultAccount, 15*time.Minute)
	f.c = NewRenderer(f.reg, f.config, webhook)
	f.h = NewHandler(f.c, prometheus.NewRegistry(), log.NewNopLogger())
	return f
}

// allDetail switches every detail family on, as a reload does.
func (f *fixture) allDetail() *fixture {
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55},
		Metrics: config.MetricsConfig{DetailFamilies: config.DetailFamilies}}})
	return f
}

func (f *fixture) answer(email, st string, sources []breach.SourceState, at time.Time) {
	f.reg.Answered(breach.Key(email), st, sources, at)
}

// breaches has a repeated source, database and field, and a feed and field the
// spec does not know: all must be exported once, none may fail the scrape.
func breaches() []breach.SourceState {
	return []breach.SourceState{
		{Source: "archive", BreachCount: 3, SourceDBs: []string{"LinkedIn 2012", "combo-7", "LinkedIn 2012"},
			FieldsExposed: []string{"password", "hash", "password"}, HasPlaintextPassword: true,
			LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "quarantine", BreachCount: 1, FieldsExposed: []string{"voiceprint"},
			LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "archive", BreachCount: 99, LastScannedAt: scanned, LastChangedAt: changed},
	}
}

// A reload that lowers the budget and removes an address shows both at the
// next scrape: the collector reads the bundle in force every time.
func TestCollectorFollowsAReload(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com", "b@example.com")...)
	f.answer("a@example.com", breach.Verified, breaches(), polled)
	testkit.Scrape(t, f.h) // a's block is cached
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 30}}})
	f.reg.Sync(nil, testkit.Addresses("b@example.com"), breach.LabelEmail, 1000)

	samples := testkit.Scrape(t, f.h)
	if got := samples[testkit.Series("breach_api_budget_requests_per_minute", "account", breach.DefaultAccount)]; got != 30 {
		t.Errorf("budget after the reload = %v, want 30", got)
	}
	for series := range samples {
		if strings.Contains(series, "a@example.com") {
			t.Errorf("%s outlived the address's removal", series)
		}
	}
	if _, ok := samples[testkit.Series("breach_address_last_refresh_timestamp_seconds", "address", "b@example.com")]; !ok {
		t.Error("the kept address lost its series")
	}
}

// The exposition is written by hand; this proves it is exactly expfmt's:
// parsed and re-encoded by expfmt's text encoder, every byte comes back the
// same, for every kind of address, alert series included, and the watchlist's
// families are merged in name order.
func TestRenderingIsExpfmts(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, testkit.Addresses("zed@example.com", "alice@example.com", "bob@example.com", "carol@example.com")...).allDetail()
	f.answer("zed@example.com", breach.Verified, breaches(), polled)
	f.answer("alice@example.com", breach.Verified, breaches(), polled)
	f.answer("bob@example.com", breach.Unverified, nil, polled)
	f.reg.RecordAlert(breach.DefaultAccount, "carol@example.com", watchlist.AlertDelta{Source: "quarantine", Severity: "urgent",
		ExposedFields: []string{"voiceprint", "password"}, ObservedAt: polled})
	f.reg.RecordAlert(breach.DefaultAccount, "alice@example.com", watchlist.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2})
	f.reg.SetAccount(breach.DefaultAccount, "business", true)
	f.reg.SetRateLimit(breach.DefaultAccount, breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 3, HasRemaining: true, Reset: polled})
	// Families of a registry sort before, between and after ours.
	promReg := prometheus.NewRegistry()
	for _, name := range []string{"a_first", "breach_api_requests_total", "breach_webhook_requests_total", "zz_last"} {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "h"})
		c.Add(3)
		promReg.MustRegister(c)
	}
	f.h = NewHandler(f.c, promReg, log.NewNopLogger())

	text := testkit.ScrapeText(t, f.h)
	if again := render(t, testkit.ParseText(t, text)); again != text {
		t.Errorf("the exposition is not expfmt's:\n--- served\n%s\n--- expfmt\n%s", text, again)
	}
	// A second scrape reuses the blocks and serves the same bytes.
	if second := testkit.ScrapeText(t, f.h); second != text {
		t.Error("a second scrape of an unchanged watchlist differs")
	}
}

func render(t *testing.T, families []*dto.MetricFamily) string {
	t.Helper()
	var b strings.Builder
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A removed address takes its alert series along (what they hold is in
// internal/exporter's golden receiver.prom).
func TestAlertSeriesGoWithTheAddress(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, testkit.Addresses("a@example.com", "b@example.com")...).allDetail()
	f.reg.RecordAlert(breach.DefaultAccount, "b@example.com", watchlist.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2,
		ExposedFields: []string{"password", "dob"}, NewPlaintext: true, ObservedAt: polled})
	if n := strings.Count(testkit.ScrapeText(t, f.h), `address="b@example.com"`); n < 13 {
		t.Fatalf("b@ has %d series before its removal, want its alert series too", n)
	}
	f.reg.Sync(nil, testkit.Addresses("a@example.com"), breach.LabelEmail, 1000) // a reload removes b@
	for _, mf := range testkit.ParseText(t, testkit.ScrapeText(t, f.h)) {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == "b@example.com" {
					t.Errorf("%s still carries the removed address", mf.GetName())
				}
			}
		}
	}
}

// Past 1,000 database names a feed exports the first 1,000 in name order;
// breach_source_databases still tells the true number.
func TestDatabaseInfoIsCapped(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com")...).allDetail()
	dbs := make([]string, watchlist.MaxDatabasesPerFeed+5)
	for i := range dbs {
		dbs[i] = fmt.Sprintf("db-%05d", len(dbs)-i) // reverse order: the cap keeps the sorted first
	}
	f.answer("a@example.com", breach.Verified, []breach.SourceState{{Source: "combolist", SourceDBs: dbs}}, polled)
	samples := testkit.Scrape(t, f.h)
	info := 0
	for series := range samples {
		if strings.HasPrefix(series, "breach_source_database_info{") {
			info++
		}
	}
	if info != watchlist.MaxDatabasesPerFeed {
		t.Errorf("%d database info series, want %d", info, watchlist.MaxDatabasesPerFeed)
	}
	if _, ok := samples[testkit.Series("breach_source_database_info", "address", "a@example.com", "database", "db-00001", "source", "combolist")]; !ok {
		t.Error("the cap did not keep the first names in order")
	}
	if got := samples[testkit.Series("breach_source_databases", "address", "a@example.com", "source", "combolist")]; got != float64(len(dbs)) {
		t.Errorf("breach_source_databases = %v, want the true %d", got, len(dbs))
	}
	if got := samples[testkit.Series("breach_label_values_dropped_total", "label", "database")]; got != 5 {
		t.Errorf("dropped databases = %v, want 5", got)
	}
}

// Under hmac labels no series carries an address, even
// one the API or an alert put into a source, field, severity, plan or
// database name; the feed is still exported, under the redacted name.
func TestNoAddressInAnyLabelUnderHMAC(t *testing.T) {
	f := newFixture(breach.LabelEmail, true).allDetail()
	f.reg.Sync(nil, testkit.Addresses("alice.secret@example.com"), breach.Keyed{Mode: breach.LabelHMAC, Key: []byte("0123456789abcdef")}, 1000)
	f.answer("alice.secret@example.com", breach.Verified, []breach.SourceState{{
		Source: "alice.secret@example.com", BreachCount: 2, SourceDBs: []string{"bob@example.com"},
		FieldsExposed: []string{"carol@example.com"}, LastScannedAt: scanned, LastChangedAt: changed,
	}}, polled)
	f.reg.SetAccount(breach.DefaultAccount, "dave@example.com", true)
	f.reg.RecordAlert(breach.DefaultAccount, "alice.secret@example.com", watchlist.AlertDelta{Source: "erin@example.com", Severity: "frank@example.com",
		ExposedFields: []string{"grace@example.com"}, ObservedAt: polled})

	text := testkit.ScrapeText(t, f.h)
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") && strings.Contains(line, "@") {
			t.Errorf("a series holds an address: %s", line)
		}
	}
	label := breach.HMACLabel([]byte("0123456789abcdef"), "alice.secret@example.com")
	samples := testkit.Scrape(t, f.h)
	if got := samples[testkit.Series("breach_source_breaches", "address", label, "source", watchlist.Redacted)]; got != 2 {
		t.Errorf("breach_source_breaches of the redacted feed = %v, want 2", got)
	}
	if got := samples[testkit.Series("breach_label_values_dropped_total", "label", "source")]; got != 2 {
		t.Errorf("dropped sources = %v, want 2 (the answer's and the alert's)", got)
	}
}
