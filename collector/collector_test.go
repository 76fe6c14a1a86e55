package collector

import (
	"fmt"

	"github.com/go-kit/log"

	"github.com/breach-exporter/breach_exporter/internal/testkit"

	"cmp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/registry"
)

var (
	scanned = time.Date(2026, 11, 20, 10, 0, 0, 250e6, time.UTC) // 1795168800.25
	changed = time.Date(2026, 11, 19, 8, 30, 0, 0, time.UTC)     // 1795077000
	polled  = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)      // 1795327200
)

// fixture is a registry watching addresses under mode, and a collector
// over it with a budget of 55 a minute.
type fixture struct {
	reg    *registry.Registry
	config *config.Current
	c      *Collector
	h      *Handler
}

// scraped is what /metrics serves, parsed, for testutil's comparisons.
func (f *fixture) scraped(t *testing.T) prometheus.Gatherer { return testkit.ScrapeGatherer(t, f.h) }

func newFixture(mode breach.LabelMode, webhook bool, addresses ...breach.Address) *fixture {
	f := &fixture{reg: registry.New()}
	f.config = config.NewCurrent(&config.Snapshot{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55}}})
	f.reg.Sync(addresses, mode, 1000)
	f.reg.SetCycle(15 * time.Minute)
	f.c = New(f.reg, f.config, webhook)
	f.h = NewHandler(f.c, prometheus.NewRegistry(), log.NewNopLogger())
	return f
}

func emails(list ...string) []breach.Address {
	out := make([]breach.Address, len(list))
	for i, e := range list {
		out[i] = breach.Address{Email: e}
	}
	return out
}

func (f *fixture) answer(email, st string, sources []breach.SourceState, at time.Time) {
	f.reg.Answered(breach.Key(email), st, sources, at)
}

const header = `
# HELP breach_api_budget_requests_per_minute The request budget the exporter allows itself (api.requests_per_minute).
# TYPE breach_api_budget_requests_per_minute gauge
breach_api_budget_requests_per_minute 55
# HELP breach_api_up 1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected). Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_up gauge
# HELP breach_label_values_dropped_total Values from the API or signed alerts kept out of the exposition by a bound, by label: a source, field, severity or plan past the 16 values outside the spec a label may take, or a database name past 1,000 per address and feed.
# TYPE breach_label_values_dropped_total counter
breach_label_values_dropped_total{label="database"} 0
breach_label_values_dropped_total{label="field"} 0
breach_label_values_dropped_total{label="plan"} 0
breach_label_values_dropped_total{label="severity"} 0
breach_label_values_dropped_total{label="source"} 0
# HELP breach_refresh_cycle_seconds How long one full round of all addresses takes at the current budget.
# TYPE breach_refresh_cycle_seconds gauge
breach_refresh_cycle_seconds 900
# HELP breach_address_state 1 for the address's current state (pending, verified, unverified, not_monitored), 0 for the others. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_address_state gauge
# HELP breach_address_last_refresh_timestamp_seconds Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_address_last_refresh_timestamp_seconds gauge
`

func addressSeries(addr, current string, refreshed string) string {
	var b strings.Builder
	for _, st := range breach.States {
		v := "0"
		if st == current {
			v = "1"
		}
		b.WriteString(`breach_address_state{address="` + addr + `",state="` + st + `"} ` + v + "\n")
	}
	b.WriteString(`breach_address_last_refresh_timestamp_seconds{address="` + addr + `"} ` + refreshed + "\n")
	return b.String()
}

const archiveSeries = `
# HELP breach_source_breaches breach_count reported by the feed for the address. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_breaches gauge
breach_source_breaches{address="ADDR",source="archive"} 3
breach_source_breaches{address="ADDR",source="quarantine"} 1
# HELP breach_source_databases Number of distinct breach databases or combolists the feed lists for the address. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_databases gauge
breach_source_databases{address="ADDR",source="archive"} 2
breach_source_databases{address="ADDR",source="quarantine"} 0
# HELP breach_source_database_info 1 for each breach database or combolist the feed lists for the address. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_database_info gauge
breach_source_database_info{address="ADDR",database="LinkedIn 2012",source="archive"} 1
breach_source_database_info{address="ADDR",database="combo-7",source="archive"} 1
# HELP breach_source_field_exposed 1 when the feed found this category of value exposed alongside the address, else 0. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_field_exposed gauge
breach_source_field_exposed{address="ADDR",field="address",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="dob",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="hash",source="archive"} 1
breach_source_field_exposed{address="ADDR",field="ip",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="name",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="password",source="archive"} 1
breach_source_field_exposed{address="ADDR",field="phone",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="username",source="archive"} 0
breach_source_field_exposed{address="ADDR",field="address",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="dob",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="hash",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="ip",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="name",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="password",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="phone",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="username",source="quarantine"} 0
breach_source_field_exposed{address="ADDR",field="voiceprint",source="quarantine"} 1
# HELP breach_source_plaintext_password 1 when the feed found a plaintext password for the address, else 0. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_plaintext_password gauge
breach_source_plaintext_password{address="ADDR",source="archive"} 1
breach_source_plaintext_password{address="ADDR",source="quarantine"} 0
# HELP breach_source_last_scanned_timestamp_seconds When the feed last scanned the address (Unix seconds). Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_last_scanned_timestamp_seconds gauge
breach_source_last_scanned_timestamp_seconds{address="ADDR",source="archive"} 1.79516880025e+09
breach_source_last_scanned_timestamp_seconds{address="ADDR",source="quarantine"} 1.79516880025e+09
# HELP breach_source_last_changed_timestamp_seconds When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_source_last_changed_timestamp_seconds gauge
breach_source_last_changed_timestamp_seconds{address="ADDR",source="archive"} 1.795077e+09
breach_source_last_changed_timestamp_seconds{address="ADDR",source="quarantine"} 1.795077e+09
`

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

func TestCollector(t *testing.T) {
	const addr = "alice@example.com"
	hash := breach.HashLabel(addr)
	if hash != "sha256:ff8d9819fc0e12bf" {
		t.Fatalf("HashLabel = %s, want the README's example", hash)
	}
	apiUp := "breach_api_up 1\n"
	for _, tc := range []struct {
		name    string
		prepare func(*fixture)
		mode    breach.LabelMode
		want    string
	}{
		{
			name:    "pending",
			prepare: func(*fixture) {},
			want:    addressSeries(addr, breach.Pending, "0"),
		},
		{
			name:    "verified",
			prepare: func(f *fixture) { f.answer(addr, breach.Verified, breaches(), polled) },
			want:    addressSeries(addr, breach.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", addr),
		},
		{
			name: "unverified drops the feed series",
			prepare: func(f *fixture) {
				f.answer(addr, breach.Verified, breaches(), changed)
				f.answer(addr, breach.Unverified, nil, polled)
			},
			want: addressSeries(addr, breach.Unverified, "1.7953272e+09"),
		},
		{
			name:    "not monitored",
			prepare: func(f *fixture) { f.answer(addr, breach.NotMonitored, nil, polled) },
			want:    addressSeries(addr, breach.NotMonitored, "1.7953272e+09"),
		},
		{
			name: "a fault after a good read keeps the values",
			prepare: func(f *fixture) {
				f.answer(addr, breach.Verified, breaches(), polled)
				f.reg.Failed(breach.Key(addr)) // a failed read writes nothing else
				f.reg.SetAccount("", false)    // the API went down: /me failed
			},
			want: addressSeries(addr, breach.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", addr),
		},
		{
			name:    "alias label",
			prepare: func(f *fixture) { f.answer(addr, breach.Verified, breaches(), polled) },
			mode:    breach.LabelAlias,
			want:    addressSeries("ops", breach.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", "ops"),
		},
		{
			name:    "hash label",
			prepare: func(f *fixture) { f.answer(addr, breach.Verified, breaches(), polled) },
			mode:    breach.LabelHash,
			want:    addressSeries(hash, breach.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", hash),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := cmp.Or(tc.mode, breach.LabelEmail)
			f := newFixture(mode, false, breach.Address{Email: addr, Alias: "ops"})
			f.reg.SetAccount("pro", true)
			up := apiUp
			tc.prepare(f)
			if snap := f.reg.Snapshot(); !snap.Account.Up {
				up = "breach_api_up 0\n"
			}
			want := header + up + tc.want + accountAndPlan
			if err := testutil.GatherAndCompare(f.scraped(t), strings.NewReader(want)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

const accountAndPlan = `
# HELP breach_account_info The account's plan as last reported by /me; absent until /me has answered once. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_account_info gauge
breach_account_info{plan="pro"} 1
`

func TestCollectorRateLimitAndRemoval(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, emails("a@example.com", "b@example.com")...)
	f.reg.SetRateLimit(breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: polled})
	// A reload removed a@ and lowered the budget: one swap, one sync.
	f.config.Store(&config.Snapshot{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 30}}})
	f.reg.Sync(emails("b@example.com"), breach.LabelEmail, 1000)

	want := `
# HELP breach_api_rate_limit_limit X-RateLimit-Limit of the last API response. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_rate_limit_limit gauge
breach_api_rate_limit_limit 60
# HELP breach_api_rate_limit_remaining X-RateLimit-Remaining of the last API response. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_rate_limit_remaining gauge
breach_api_rate_limit_remaining 0
# HELP breach_api_rate_limit_reset_timestamp_seconds X-RateLimit-Reset of the last API response (Unix seconds). Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_rate_limit_reset_timestamp_seconds gauge
breach_api_rate_limit_reset_timestamp_seconds 1.7953272e+09
# HELP breach_api_budget_requests_per_minute The request budget the exporter allows itself (api.requests_per_minute).
# TYPE breach_api_budget_requests_per_minute gauge
breach_api_budget_requests_per_minute 30
# HELP breach_address_last_refresh_timestamp_seconds Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer. Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_address_last_refresh_timestamp_seconds gauge
breach_address_last_refresh_timestamp_seconds{address="b@example.com"} 0
# HELP breach_api_up 1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected). Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_up gauge
breach_api_up 0
`
	names := []string{"breach_api_rate_limit_limit", "breach_api_rate_limit_remaining",
		"breach_api_rate_limit_reset_timestamp_seconds", "breach_api_budget_requests_per_minute",
		"breach_address_last_refresh_timestamp_seconds", "breach_api_up", "breach_account_info"}
	if err := testutil.GatherAndCompare(f.scraped(t), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorPassesLint(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, emails("alice@example.com")...)
	f.answer("alice@example.com", breach.Verified, breaches(), polled)
	f.reg.RecordAlert("alice@example.com", registry.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 1,
		ExposedFields: []string{"password"}, NewPlaintext: true, ObservedAt: polled})
	problems, err := testutil.GatherAndLint(f.scraped(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// The exposition is written by hand; this proves it is exactly expfmt's:
// parsed and re-encoded by expfmt's text encoder, every byte comes back the
// same, for every kind of address, alert series included, and the registry's
// families are merged in name order.
func TestRenderingIsExpfmts(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, emails("zed@example.com", "alice@example.com", "bob@example.com", "carol@example.com")...)
	f.answer("zed@example.com", breach.Verified, breaches(), polled)
	f.answer("alice@example.com", breach.Verified, breaches(), polled)
	f.answer("bob@example.com", breach.Unverified, nil, polled)
	f.reg.RecordAlert("carol@example.com", registry.AlertDelta{Source: "quarantine", Severity: "urgent",
		ExposedFields: []string{"voiceprint", "password"}, ObservedAt: polled})
	f.reg.RecordAlert("alice@example.com", registry.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2})
	f.reg.SetAccount("business", true)
	f.reg.SetRateLimit(breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 3, HasRemaining: true, Reset: polled})
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
		t.Error("a second scrape of an unchanged registry differs")
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

// With the receiver on, an address has breach_alerts_total for every known
// severity and source from the start (the rules take increase() of it); the
// other alert series come with the first alert of their source. A removed
// address takes all of them along.
func TestAlertSeries(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, emails("a@example.com", "b@example.com")...)
	f.reg.RecordAlert("b@example.com", registry.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2,
		ExposedFields: []string{"password", "dob"}, NewPlaintext: true, ObservedAt: polled})
	f.reg.RecordAlert("b@example.com", registry.AlertDelta{Source: "quarantine", Severity: "urgent"})

	zeros := func(addr string) string {
		var b strings.Builder
		for _, sev := range []string{"critical", "info", "warning"} {
			for _, src := range []string{"archive", "combolist", "enriched", "index"} {
				v := "0"
				if addr == "b@example.com" && sev == "critical" && src == "index" {
					v = "1"
				}
				b.WriteString(`breach_alerts_total{address="` + addr + `",severity="` + sev + `",source="` + src + `"} ` + v + "\n")
			}
		}
		return b.String()
	}
	bAlerts := zeros("b@example.com")
	// The unknown severity sorts after the known ones.
	bAlerts += `breach_alerts_total{address="b@example.com",severity="urgent",source="quarantine"} 1` + "\n"
	want := `
# HELP breach_alerts_total Accepted alert.created webhooks.
# TYPE breach_alerts_total counter
` + zeros("a@example.com") + bAlerts + `
# HELP breach_alert_exposed_fields_total Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.
# TYPE breach_alert_exposed_fields_total counter
breach_alert_exposed_fields_total{address="b@example.com",field="dob",source="index"} 1
breach_alert_exposed_fields_total{address="b@example.com",field="password",source="index"} 1
# HELP breach_alert_new_databases_total Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).
# TYPE breach_alert_new_databases_total counter
breach_alert_new_databases_total{address="b@example.com",source="index"} 2
breach_alert_new_databases_total{address="b@example.com",source="quarantine"} 0
# HELP breach_alert_new_plaintext_passwords_total Accepted alerts whose delta introduced a new plaintext password.
# TYPE breach_alert_new_plaintext_passwords_total counter
breach_alert_new_plaintext_passwords_total{address="b@example.com",source="index"} 1
breach_alert_new_plaintext_passwords_total{address="b@example.com",source="quarantine"} 0
# HELP breach_alert_last_observed_timestamp_seconds observed_at of the newest accepted alert, as a Unix time.
# TYPE breach_alert_last_observed_timestamp_seconds gauge
breach_alert_last_observed_timestamp_seconds{address="b@example.com",source="index"} 1.7953272e+09
`
	names := []string{"breach_alerts_total", "breach_alert_exposed_fields_total", "breach_alert_new_databases_total",
		"breach_alert_new_plaintext_passwords_total", "breach_alert_last_observed_timestamp_seconds"}
	if err := testutil.GatherAndCompare(f.scraped(t), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	f.reg.Sync(emails("a@example.com"), breach.LabelEmail, 1000) // a reload removes b@
	for _, mf := range testkit.ParseText(t, testkit.ScrapeText(t, f.h)) {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == "b@example.com" {
					t.Errorf("%s still carries the removed address", mf.GetName())
				}
			}
		}
	}

	// With the receiver off there are no alert series at all.
	off := newFixture(breach.LabelEmail, false, emails("a@example.com")...)
	if n, err := testutil.GatherAndCount(off.scraped(t), names...); err != nil || n != 0 {
		t.Errorf("receiver off: %d alert series (%v), want none", n, err)
	}
}

// Past 1,000 database names a feed exports the first 1,000 in name order;
// breach_source_databases still tells the true number.
func TestDatabaseInfoIsCapped(t *testing.T) {
	f := newFixture(breach.LabelEmail, false, emails("a@example.com")...)
	dbs := make([]string, registry.MaxDatabasesPerFeed+5)
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
	if info != registry.MaxDatabasesPerFeed {
		t.Errorf("%d database info series, want %d", info, registry.MaxDatabasesPerFeed)
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
