// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
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

// everyFamily is a fixture whose scrape serves every family of the
// collector: every kind of address, the receiver's alert series, every
// detail family, an acknowledgement, an account with its plan and rate
// limit, and registry families that sort before, between and after ours.
func everyFamily(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(breach.LabelEmail, true, testkit.Addresses("zed@example.com", "alice@example.com", "bob@example.com", "carol@example.com")...)
	f.answer("zed@example.com", breach.Verified, breaches(), polled)
	f.answer("alice@example.com", breach.Verified, breaches(), polled)
	f.answer("bob@example.com", breach.Unverified, nil, polled)
	f.reg.RecordAlert(breach.DefaultAccount, "carol@example.com", watchlist.AlertDelta{Source: "quarantine", Severity: "urgent",
		ExposedFields: []string{"voiceprint", "password"}, ObservedAt: polled})
	f.reg.RecordAlert(breach.DefaultAccount, "alice@example.com", watchlist.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2,
		NewPlaintext: true, ObservedAt: polled})
	f.reg.SetAccount(breach.DefaultAccount, "business", true)
	f.reg.SetRateLimit(breach.DefaultAccount, breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 3, HasRemaining: true, Reset: polled})
	acks, err := acknowledge.Parse([]byte("acknowledgements:\n  - address: alice@example.com\n    handled_at: 2026-11-21T00:00:00Z\n    by: oncall\n    comment: \"rotated, \\\"all\\\" sessions\"\n"), polled)
	if err != nil {
		t.Fatal(err)
	}
	f.config.Store(&config.Bundle{Acknowledgements: acks, Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55},
		Metrics: config.MetricsConfig{DetailFamilies: config.DetailFamilies}}})
	f.reg.NoteAcknowledgements(acks, polled)
	promReg := prometheus.NewRegistry()
	for _, name := range []string{"a_first", "breach_api_requests_total", "breach_webhook_requests_total", "zz_last"} {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "h"})
		c.Add(3)
		promReg.MustRegister(c)
	}
	f.h = NewHandler(f.c, promReg, log.NewNopLogger())
	return f
}

// The exposition is written by hand; this checks that it is in expfmt's
// text form: parsed and re-encoded by expfmt's text encoder, every byte
// comes back the same (HELP and TYPE lines, escaping, number formatting,
// the watchlist's families merged with the registry's in name order), for
// every family. It does not check which labels a series has or in which
// order: the parser keeps the order it reads, so the re-encoding does too.
// TestServedLabelsAreTheFamilys checks that.
func TestRenderingIsExpfmts(t *testing.T) {
	f := everyFamily(t)
	text := testkit.ScrapeText(t, f.h)
	if again := render(t, testkit.ParseText(t, text)); again != text {
		t.Errorf("the exposition is not expfmt's:\n--- served\n%s\n--- expfmt\n%s", text, again)
	}
	// A second scrape reuses the blocks and serves the same bytes.
	if second := testkit.ScrapeText(t, f.h); second != text {
		t.Error("a second scrape of an unchanged watchlist differs")
	}
}

// Every series the collector serves carries exactly its family's label
// names, in the family's order (family.labels: address first, not name
// order), and every family is served by the fixture: a label swapped,
// added or left out where a series is rendered fails here.
func TestServedLabelsAreTheFamilys(t *testing.T) {
	byName := map[string]*family{}
	for _, fam := range families {
		byName[fam.name] = fam
	}
	served := map[string]bool{}
	for _, mf := range testkit.ParseText(t, testkit.ScrapeText(t, everyFamily(t).h)) {
		fam, ok := byName[mf.GetName()]
		if !ok {
			continue // the registry's
		}
		served[fam.name] = true
		for _, m := range mf.GetMetric() {
			names := make([]string, 0, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				names = append(names, lp.GetName())
			}
			if fam == addressInfo && len(names) > len(fam.labels) {
				names = names[:len(fam.labels)] // then the owner labels, which vary
			}
			if !slices.Equal(names, fam.labels) {
				t.Errorf("%s: a series with labels %v, the family's are %v", fam.name, names, fam.labels)
				break
			}
		}
	}
	for _, fam := range families {
		if !served[fam.name] {
			t.Errorf("%s: not served by the fixture, so not checked", fam.name)
		}
	}
}

// The README's metric tables, the public contract, list each family's
// label names (as a set: the table is read by people, not parsers).
func TestREADMEListsTheFamilysLabels(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	parenthesised := regexp.MustCompile(`\([^)]*\)`)
	listed := map[string][]string{}
	for line := range strings.Lines(string(readme)) {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`breach_") {
			continue
		}
		var names []string
		for n := range strings.SplitSeq(parenthesised.ReplaceAllString(cells[3], ""), ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		for _, metric := range strings.Split(cells[1], ",") {
			listed[strings.Trim(strings.TrimSpace(metric), "`")] = names
		}
	}
	for _, fam := range families {
		want := slices.Sorted(slices.Values(fam.labels))
		if got, ok := listed[fam.name]; !ok || !slices.Equal(got, want) {
			t.Errorf("README lists %s with labels %v (listed: %v), the family has %v", fam.name, got, ok, want)
		}
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
