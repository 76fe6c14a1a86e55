// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"slices"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// What a user's Prometheus pays per address, pinned: the README's metric
// contract and sizing section quote these numbers. A fully exposed address
// (four feeds, every field, three databases each, a plaintext password,
// one alert received) and a pending one, with the receiver on.
const (
	seriesFullDefault    = 22 // at most 25
	seriesPendingDefault = 9  // at most 9
	seriesFullDetail     = 78
	seriesPendingDetail  = 9
)

// fullyExposed answers for addr with every feed, field and three databases.
func fullyExposed(f *fixture, addr string) {
	var sources []breach.SourceState
	for k, s := range breach.KnownSources {
		sources = append(sources, breach.SourceState{Source: s, BreachCount: int64(k + 3),
			SourceDBs:     []string{s + "-corpus-1", s + "-corpus-2", s + "-corpus-3"},
			FieldsExposed: breach.KnownFields, HasPlaintextPassword: true, LastScannedAt: scanned, LastChangedAt: changed})
	}
	f.answer(addr, breach.Verified, sources, polled)
	f.reg.RecordAlert(breach.DefaultAccount, addr, watchlist.AlertDelta{Source: "index", Severity: "warning", NewDatabases: 1,
		ExposedFields: []string{"phone"}, NewPlaintext: true, ObservedAt: polled})
}

// seriesOf counts, per family, the series whose address label is addr.
func seriesOf(t *testing.T, f *fixture, addr string) (int, map[string]int) {
	t.Helper()
	total, byFamily := 0, map[string]int{}
	for _, mf := range testkit.ParseText(t, testkit.ScrapeText(t, f.h)) {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "address" && lp.GetValue() == addr {
					total++
					byFamily[mf.GetName()]++
				}
			}
		}
	}
	return total, byFamily
}

func TestSeriesPerAddress(t *testing.T) {
	const full, pending = "full@example.com", "pending@example.com"
	f := newFixture(breach.LabelEmail, true, testkit.Addresses(full, pending)...)
	fullyExposed(f, full)
	check := func(what, addr string, want, budget int) {
		t.Helper()
		got, byFamily := seriesOf(t, f, addr)
		if got != want || got > budget {
			t.Errorf("%s: %d series carry the address, want %d (budget %d): %v", what, got, want, budget, byFamily)
		}
	}
	check("default, fully exposed", full, seriesFullDefault, 25)
	check("default, pending", pending, seriesPendingDefault, 9)
	_, byFamily := seriesOf(t, f, full)
	for _, name := range config.DetailFamilies {
		if byFamily[name] > 0 {
			t.Errorf("default: detail family %s served", name)
		}
	}

	// A reload switches every detail family on, and off again.
	f.allDetail()
	check("every detail family, fully exposed", full, seriesFullDetail, seriesFullDetail)
	check("every detail family, pending", pending, seriesPendingDetail, seriesPendingDetail)
	_, byFamily = seriesOf(t, f, full)
	for _, name := range config.DetailFamilies {
		if byFamily[name] == 0 {
			t.Errorf("detail on: %s not served", name)
		}
	}
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55},
		Metrics: config.MetricsConfig{DetailFamilies: []string{"breach_source_database_info"}}}})
	check("database names only", full, seriesFullDefault+12, seriesFullDefault+12)
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55}}})
	check("back to the default", full, seriesFullDefault, 25)
}

// The collector's detail families are exactly those the config accepts.
func TestDetailFamiliesMatchTheConfig(t *testing.T) {
	var detail []string
	for _, f := range perAddress {
		if f.detail {
			detail = append(detail, f.name)
		}
	}
	slices.Sort(detail)
	if !slices.Equal(detail, config.DetailFamilies) {
		t.Errorf("detail families %v, the config accepts %v", detail, config.DetailFamilies)
	}
}

func TestFleetAggregates(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com", "b@example.com", "c@example.com", "d@example.com")...)
	f.answer("a@example.com", breach.Verified, breaches(), polled)
	f.answer("b@example.com", breach.Verified, []breach.SourceState{
		{Source: "archive", FieldsExposed: []string{"hash"}},
		{Source: "index", BreachCount: 2, FieldsExposed: []string{"phone"}, HasPlaintextPassword: true},
	}, polled)
	f.answer("c@example.com", breach.NotMonitored, nil, polled)

	samples := testkit.Scrape(t, f.h)
	for key, want := range map[string]float64{
		testkit.Series("breach_addresses", "state", "not_monitored"):                  1,
		testkit.Series("breach_addresses", "state", "pending"):                        1,
		testkit.Series("breach_addresses", "state", "unverified"):                     0,
		testkit.Series("breach_addresses", "state", "verified"):                       2,
		testkit.Series("breach_addresses_breached", "source", "archive"):              1,
		testkit.Series("breach_addresses_breached", "source", "combolist"):            0,
		testkit.Series("breach_addresses_breached", "source", "enriched"):             0,
		testkit.Series("breach_addresses_breached", "source", "index"):                1,
		testkit.Series("breach_addresses_breached", "source", "quarantine"):           1,
		testkit.Series("breach_addresses_plaintext_password", "source", "archive"):    1,
		testkit.Series("breach_addresses_plaintext_password", "source", "combolist"):  0,
		testkit.Series("breach_addresses_plaintext_password", "source", "enriched"):   0,
		testkit.Series("breach_addresses_plaintext_password", "source", "index"):      1,
		testkit.Series("breach_addresses_plaintext_password", "source", "quarantine"): 0,
	} {
		if got, ok := samples[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	fields := 0
	for series := range samples {
		if strings.HasPrefix(series, "breach_addresses_field_exposed{") {
			fields++
		}
	}
	// The spec's 8 x 4, and the unknown field of the unknown feed.
	if fields != 33 {
		t.Errorf("%d breach_addresses_field_exposed series, want 33", fields)
	}
	for _, c := range []struct {
		field, source string
		want          float64
	}{{"hash", "archive", 2}, {"password", "archive", 1}, {"phone", "index", 1}, {"voiceprint", "quarantine", 1}, {"dob", "enriched", 0}} {
		key := testkit.Series("breach_addresses_field_exposed", "field", c.field, "source", c.source)
		if got, ok := samples[key]; !ok || got != c.want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, c.want)
		}
	}
}

// News counters move between two answers of a verified address.
func TestNewsCounters(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com")...)
	f.answer("a@example.com", breach.Verified, []breach.SourceState{{Source: "index", SourceDBs: []string{"x"}}}, polled)
	f.answer("a@example.com", breach.Verified, []breach.SourceState{{Source: "index", SourceDBs: []string{"x", "y"}, FieldsExposed: []string{"dob", "ip"}}}, polled)
	samples := testkit.Scrape(t, f.h)
	for name, want := range map[string]float64{"breach_address_new_databases_total": 1, "breach_address_newly_exposed_sensitive_fields_total": 1} {
		if got := samples[testkit.Series(name, "address", "a@example.com")]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
