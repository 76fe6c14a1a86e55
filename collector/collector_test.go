package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/state"
)

var (
	scanned = time.Date(2026, 11, 20, 10, 0, 0, 250e6, time.UTC) // 1795168800.25
	changed = time.Date(2026, 11, 19, 8, 30, 0, 0, time.UTC)     // 1795077000
	polled  = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)      // 1795327200
)

func emailLabel(e string) string { return e }

const header = `
# HELP breach_api_budget_requests_per_minute The request budget the exporter allows itself (api.requests_per_minute).
# TYPE breach_api_budget_requests_per_minute gauge
breach_api_budget_requests_per_minute 55
# HELP breach_api_up 1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected). Served from the exporter's cache; a scrape never calls the API.
# TYPE breach_api_up gauge
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
	for _, st := range state.States {
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
func breaches(email string) api.Breaches {
	return api.Breaches{Email: email, Sources: []api.SourceState{
		{Source: "archive", BreachCount: 3, SourceDBs: []string{"LinkedIn 2012", "combo-7", "LinkedIn 2012"},
			FieldsExposed: []string{"password", "hash", "password"}, HasPlaintextPassword: true,
			LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "quarantine", BreachCount: 1, FieldsExposed: []string{"voiceprint"},
			LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "archive", BreachCount: 99, LastScannedAt: scanned, LastChangedAt: changed},
	}}
}

func TestCollector(t *testing.T) {
	const addr = "alice@example.com"
	apiUp := "breach_api_up 1\n"
	for _, tc := range []struct {
		name    string
		prepare func(*state.Store)
		label   func(string) string
		want    string
	}{
		{
			name:    "pending",
			prepare: func(*state.Store) {},
			want:    addressSeries(addr, state.Pending, "0"),
		},
		{
			name:    "verified",
			prepare: func(s *state.Store) { s.SetBreaches(addr, breaches(addr), polled) },
			want:    addressSeries(addr, state.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", addr),
		},
		{
			name: "unverified drops the feed series",
			prepare: func(s *state.Store) {
				s.SetBreaches(addr, breaches(addr), changed)
				s.SetState(addr, state.Unverified, polled)
			},
			want: addressSeries(addr, state.Unverified, "1.7953272e+09"),
		},
		{
			name:    "not monitored",
			prepare: func(s *state.Store) { s.SetState(addr, state.NotMonitored, polled) },
			want:    addressSeries(addr, state.NotMonitored, "1.7953272e+09"),
		},
		{
			name: "a fault after a good read keeps the values",
			prepare: func(s *state.Store) {
				s.SetBreaches(addr, breaches(addr), polled)
				s.SetAccount("", false) // the API went down: /me failed, nothing else is written
			},
			want: addressSeries(addr, state.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", addr),
		},
		{
			name:    "alias label",
			prepare: func(s *state.Store) { s.SetBreaches(addr, breaches(addr), polled) },
			label:   func(string) string { return "ops" },
			want:    addressSeries("ops", state.Verified, "1.7953272e+09") + strings.ReplaceAll(archiveSeries, "ADDR", "ops"),
		},
		{
			name:    "hash label",
			prepare: func(s *state.Store) { s.SetBreaches(addr, breaches(addr), polled) },
			label:   func(string) string { return "sha256:ff8d9819fc0e12bf" },
			want: addressSeries("sha256:ff8d9819fc0e12bf", state.Verified, "1.7953272e+09") +
				strings.ReplaceAll(archiveSeries, "ADDR", "sha256:ff8d9819fc0e12bf"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := state.NewStore()
			s.SetAddresses([]string{addr})
			s.SetCycle(15 * time.Minute)
			s.SetAccount("pro", true)
			up := apiUp
			tc.prepare(s)
			if snap := s.Snapshot(); !snap.Account.Up {
				up = "breach_api_up 0\n"
			}
			label := tc.label
			if label == nil {
				label = emailLabel
			}
			c := New(s, label, 55)
			want := header + up + tc.want + accountAndPlan
			if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
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
	s := state.NewStore()
	s.SetAddresses([]string{"a@example.com", "b@example.com"})
	s.SetRateLimit(api.RateLimit{Limit: 60, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: polled})
	s.SetAddresses([]string{"b@example.com"}) // a reload removed a@
	c := New(s, emailLabel, 55)
	c.Update(emailLabel, 30)

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
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

func TestCollectorPassesLint(t *testing.T) {
	s := state.NewStore()
	s.SetAddresses([]string{"alice@example.com"})
	s.SetBreaches("alice@example.com", breaches("alice@example.com"), polled)
	problems, err := testutil.CollectAndLint(New(s, emailLabel, 55))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// Gather builds the same exposition as the registry does over Collect,
// byte for byte, for every kind of address.
func TestGatherMatchesCollect(t *testing.T) {
	s := state.NewStore()
	s.SetAddresses([]string{"zed@example.com", "alice@example.com", "bob@example.com", "carol@example.com"})
	s.SetBreaches("zed@example.com", breaches("zed@example.com"), polled)
	s.SetBreaches("alice@example.com", breaches("alice@example.com"), polled)
	s.SetState("bob@example.com", state.Unverified, polled)
	s.SetAccount("business", true)
	s.SetRateLimit(api.RateLimit{Limit: 60, HasLimit: true, Remaining: 3, HasRemaining: true, Reset: polled})
	c := New(s, emailLabel, 55)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	viaRegistry, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	direct, err := Merge{c}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if a, b := render(t, viaRegistry), render(t, direct); a != b {
		t.Errorf("Gather differs from the registry:\n--- registry\n%s\n--- Gather\n%s", a, b)
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
