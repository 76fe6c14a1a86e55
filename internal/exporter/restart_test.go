// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// run is one life of an exporter with persistence, on a fake clock.
type run struct {
	*running
	clock *clockwork.FakeClock
}

// start runs an exporter watching addresses (a YAML list) against the API
// at baseURL; webhookTail adds settings under webhook.
func start(t *testing.T, dir, storage, baseURL, addresses, webhookTail string) *run {
	t.Helper()
	return startAt(t, clockwork.NewFakeClock(), dir, storage, baseURL, addresses, webhookTail)
}

// startAt is start on a given clock: a later life starts where the last
// one's clock ended, or the state it saved would be in its future.
func startAt(t *testing.T, clock *clockwork.FakeClock, dir, storage, baseURL, addresses, webhookTail string) *run {
	t.Helper()
	writeConfig(t, dir, baseURL, webhookTail+"addresses: "+addresses+"\n")
	return &run{clock: clock, running: startExporter(t, Options{
		ConfigFile:       filepath.Join(dir, "config.yml"),
		Clock:            clock,
		Webhook:          true,
		StoragePath:      storage,
		SnapshotInterval: time.Minute,
	})}
}

// feedLines renders the feed series and address states, the lines a
// restart must keep.
func feedLines(t *testing.T, r *run) []string {
	t.Helper()
	var out []string
	for series, v := range testkit.Scrape(t, r.exp.MetricsHandler(r.reg)) {
		if strings.HasPrefix(series, "breach_source_") || strings.HasPrefix(series, "breach_address_state") ||
			strings.HasPrefix(series, "breach_address_last_refresh") {
			out = append(out, fmt.Sprintf("%s %v", series, v))
		}
	}
	slices.Sort(out)
	return out
}

func alertFor(address string) string {
	return `{"event":"alert.created","severity":"critical","address":"` + address + `","source":"combolist",
		"summary":"s","delta":{"new_source_dbs":["y"],"has_new_plaintext":true},"observed_at":"2026-11-22T06:00:00Z"}`
}

// A restart with the API unreachable serves the same feed series and states
// from the first scrape, with their real refresh times; the discovered
// address and the duplicate memory come back; what the config no longer
// allows does not.
func TestRestartKeepsTheState(t *testing.T) {
	api := testkit.NewStandIn(t, nil)
	api.AnswerOthers(combolist(4))
	dir, storage := t.TempDir(), filepath.Join(t.TempDir(), "data")

	first := start(t, dir, storage, api.BaseURL(), "[alice@example.com, bob@example.com]", "")
	body := alertFor("found@example.org")
	if rec := httptest.NewRecorder(); func() int { first.exp.WebhookHandler().ServeHTTP(rec, signed(body)); return rec.Code }() != http.StatusNoContent {
		t.Fatal("the alert was not accepted")
	}
	testkit.AdvanceUntil(t, first.clock, "every address read", 100*time.Millisecond, func() bool {
		return api.Reads("alice@example.com") == 1 && api.Reads("bob@example.com") == 1 && api.Reads("found@example.org") == 1
	})
	testkit.Eventually(t, "the answers in the cache", func() bool {
		samples := testkit.Scrape(t, first.exp.MetricsHandler(first.reg))
		for _, a := range []string{"alice@example.com", "bob@example.com", "found@example.org"} {
			if samples[testkit.Series("breach_address_state", "address", a, "account", breach.DefaultAccount, "state", "verified")] != 1 {
				return false
			}
		}
		return true
	})
	before := feedLines(t, first)
	first.stop()

	// Second life: the API is gone.
	api.Refuse()
	second := startAt(t, clockwork.NewFakeClockAt(first.clock.Now()), dir, storage, api.BaseURL(), "[alice@example.com, bob@example.com]", "")
	if after := feedLines(t, second); !slices.Equal(before, after) {
		t.Fatalf("after the restart the first scrape differs:\nbefore %q\n after %q", before, after)
	}
	if got := testkit.Samples(t, second.reg)["breach_exporter_state_restored_addresses{}"]; got != 3 {
		t.Errorf("restored addresses = %v, want 3", got)
	}
	rec := httptest.NewRecorder()
	second.exp.WebhookHandler().ServeHTTP(rec, signed(body))
	if got := testkit.Samples(t, second.reg)[testkit.Series("breach_webhook_requests_total", "outcome", "duplicate")]; got != 1 {
		t.Fatalf("a replay after the restart counted duplicate %v times, want 1", got)
	}
	second.stop()

	// Third life: bob is no longer configured and discovery is off.
	third := startAt(t, clockwork.NewFakeClockAt(second.clock.Now()), dir, storage, api.BaseURL(), "[alice@example.com]", "  discover_addresses: false\n")
	lines := strings.Join(feedLines(t, third), "\n")
	if strings.Contains(lines, "bob@") || strings.Contains(lines, "found@") || !strings.Contains(lines, "alice@") {
		t.Errorf("after a restart with a smaller config:\n%s", lines)
	}
}

// Nothing changed, nothing written: the snapshot's timestamp stays.
func TestSnapshotOnlyWhenSomethingChanged(t *testing.T) {
	down := testkit.NewStandIn(t, nil)
	down.Refuse()
	r := start(t, t.TempDir(), filepath.Join(t.TempDir(), "data"), down.BaseURL(), "[]", "")
	written := func() float64 {
		return testkit.Samples(t, r.reg)["breach_exporter_state_snapshot_last_success_timestamp_seconds{}"]
	}
	if err := r.exp.Save(); err != nil || written() != 0 {
		t.Fatalf("an unchanged state was written (%v, at %v)", err, written())
	}
	rec := httptest.NewRecorder()
	r.exp.WebhookHandler().ServeHTTP(rec, signed(alertFor("new@example.com")))
	if err := r.exp.Save(); err != nil || written() == 0 {
		t.Fatalf("a changed state was not written (%v)", err)
	}
}

// A snapshot cut at any byte, or garbage, never stops a start: the exporter
// starts empty, counts the load failure and moves the file aside.
func TestDamagedSnapshotNeverStopsAStart(t *testing.T) {
	down := testkit.NewStandIn(t, nil)
	down.Refuse()
	dir, storage := t.TempDir(), filepath.Join(t.TempDir(), "data")
	first := start(t, dir, storage, down.BaseURL(), "[alice@example.com]", "")
	rec := httptest.NewRecorder()
	first.exp.WebhookHandler().ServeHTTP(rec, signed(alertFor("found@example.org")))
	first.stop()
	path := filepath.Join(storage, persist.FileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cases := [][]byte{[]byte("garbage"), bytes.Repeat([]byte{0xff}, 512)}
	cuts := 400
	if testing.Short() {
		cuts = 40 // a start each: the full sweep costs half a second
	}
	for n := 0; n < len(good); n += max(1, len(good)/cuts) {
		cases = append(cases, good[:n])
	}
	for _, data := range cases {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		exp, err := New(Options{
			ConfigFile: filepath.Join(dir, "config.yml"), Registerer: reg, Webhook: true,
			StoragePath: storage, SnapshotInterval: time.Minute,
		})
		if err != nil {
			t.Fatalf("a snapshot cut to %d of %d bytes stopped the start: %v", len(data), len(good), err)
		}
		exp.release()
		samples := testkit.Samples(t, reg)
		if samples["breach_exporter_state_load_failures_total{}"] != 1 || samples["breach_exporter_state_restored_addresses{}"] != 0 {
			t.Fatalf("a snapshot cut to %d bytes: load failures %v, restored %v", len(data),
				samples["breach_exporter_state_load_failures_total{}"], samples["breach_exporter_state_restored_addresses{}"])
		}
		if _, err := os.Stat(path + ".corrupt"); err != nil {
			t.Fatalf("a snapshot cut to %d bytes was not moved aside: %v", len(data), err)
		}
		if discoveredOf(exp) != 0 {
			t.Fatal("a damaged snapshot restored a discovered address")
		}
	}
	// The whole file still restores: the cuts above were the only damage.
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	exp, err := New(Options{ConfigFile: filepath.Join(dir, "config.yml"), Registerer: prometheus.NewRegistry(), Webhook: true,
		StoragePath: storage, SnapshotInterval: time.Minute})
	if err != nil || discoveredOf(exp) != 1 {
		t.Fatalf("the intact snapshot: %v, %d discovered", err, discoveredOf(exp))
	}
	exp.release()
}

// startOnSnapshot writes st as the snapshot in a fresh folder and builds an
// exporter on it, its clock at now, the API down.
func startOnSnapshot(t *testing.T, st persist.State, now time.Time, addresses string) (*Exporter, *prometheus.Registry) {
	t.Helper()
	down := testkit.NewStandIn(t, nil)
	down.Refuse()
	dir, storage := t.TempDir(), filepath.Join(t.TempDir(), "data")
	saveSnapshot(t, storage, st, now)
	writeConfig(t, dir, down.BaseURL(), "addresses: "+addresses+"\n")
	reg := prometheus.NewRegistry()
	exp, err := New(Options{ConfigFile: filepath.Join(dir, "config.yml"), Registerer: reg, Clock: clockwork.NewFakeClockAt(now),
		Webhook: true, StoragePath: storage, SnapshotInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(exp.release)
	return exp, reg
}

// A restored snapshot goes through the bounds of the live paths: a source
// name of 100,000 bytes is cut, of 150 unknown sources and 150 unknown
// fields only 16 each become label values, and the rest is counted in
// breach_label_values_dropped_total, for the cached answers and the alert
// counts alike.
func TestRestoredSnapshotKeepsTheBounds(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	var fields []string
	for i := range 150 {
		fields = append(fields, fmt.Sprintf("field%03d", i))
	}
	sources := []breach.SourceState{{Source: strings.Repeat("s", 100_000), BreachCount: 1}}
	var alerts []watchlist.AlertCount
	for i := range 150 {
		sources = append(sources, breach.SourceState{Source: fmt.Sprintf("feed%03d", i), BreachCount: 1, FieldsExposed: fields})
		alerts = append(alerts, watchlist.AlertCount{Family: watchlist.AlertsBySeverity, Source: fmt.Sprintf("alertfeed%03d", i), Label: "critical", Value: 1})
	}
	st := persist.State{Watchlist: watchlist.Saved{Entries: []watchlist.SavedEntry{{
		Address: breach.Address{Email: "alice@example.com"}, State: breach.Verified, Sources: sources,
		LastRefresh: now.Add(-time.Minute), LastAttempt: now.Add(-time.Minute), Alerts: alerts,
	}}}}
	exp, reg := startOnSnapshot(t, st, now, "[alice@example.com]")

	text := testkit.ScrapeText(t, exp.MetricsHandler(reg))
	sourceLabels := map[string]bool{}
	fieldLabels := map[string]bool{}
	for _, f := range testkit.ParseText(t, text) {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if len(l.GetValue()) > breach.MaxDatabaseBytes {
					t.Fatalf("%s: a label value of %d bytes", f.GetName(), len(l.GetValue()))
				}
				switch l.GetName() {
				case "source":
					sourceLabels[l.GetValue()] = true
				case "field":
					fieldLabels[l.GetValue()] = true
				}
			}
		}
	}
	if n := len(sourceLabels); n > len(breach.KnownSources)+watchlist.MaxUnknownValues {
		t.Errorf("%d source label values after a restore", n)
	}
	if n := len(fieldLabels); n > len(breach.KnownFields)+watchlist.MaxUnknownValues {
		t.Errorf("%d field label values after a restore", n)
	}
	samples := testkit.Samples(t, testkit.ScrapeGatherer(t, exp.MetricsHandler(reg)))
	// 150 feeds and 150 alert feeds plus the long one: 16 admitted.
	if got := samples[testkit.Series("breach_label_values_dropped_total", "label", "source")]; got != 301-watchlist.MaxUnknownValues {
		t.Errorf("dropped sources = %v, want %d", got, 301-watchlist.MaxUnknownValues)
	}
	if got := samples[testkit.Series("breach_label_values_dropped_total", "label", "field")]; got == 0 {
		t.Error("no dropped field counted")
	}
}

// A snapshot written while the clock ran a day ahead: the address is read
// first, and its last refresh is not in the future.
func TestRestoredTimesInTheFutureAreClamped(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	ahead := now.Add(24 * time.Hour)
	st := persist.State{Watchlist: watchlist.Saved{Entries: []watchlist.SavedEntry{
		{Address: breach.Address{Email: "alice@example.com"}, State: breach.Unverified, LastRefresh: ahead, LastAttempt: ahead},
		{Address: breach.Address{Email: "bob@example.com"}, State: breach.Unverified, LastRefresh: now.Add(-time.Hour), LastAttempt: now.Add(-time.Hour)},
	}}}
	exp, reg := startOnSnapshot(t, st, now, "[alice@example.com, bob@example.com]")
	samples := testkit.Scrape(t, exp.MetricsHandler(reg))
	if got := samples[testkit.Series("breach_address_last_refresh_timestamp_seconds", "address", "alice@example.com")]; got > float64(now.Unix()) {
		t.Errorf("last refresh %v is after now %v", got, now.Unix())
	}
	for _, e := range exp.watchlist.View().Entries {
		if e.Address.Email == "alice@example.com" && (!e.Schedule.LastAttempt.IsZero() || e.Schedule.Urgent == 0) {
			t.Errorf("alice is not first in the schedule: %+v", e.Schedule)
		}
	}
}

// breach_exporter_state_restored_addresses counts what the snapshot gave
// back, not what the config watches.
func TestRestoredAddressesCountsTheSnapshot(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	_, reg := startOnSnapshot(t, persist.State{}, now, "[alice@example.com, bob@example.com]")
	if got := testkit.Samples(t, reg)["breach_exporter_state_restored_addresses{}"]; got != 0 {
		t.Errorf("an empty snapshot restored %v addresses", got)
	}
}

// saveSnapshot writes st as the snapshot of the state folder storage, as
// a running exporter does.
func saveSnapshot(t *testing.T, storage string, st persist.State, now time.Time) {
	t.Helper()
	folder, err := persist.Open(storage, prometheus.NewRegistry(), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer folder.Close()
	if err := folder.Save(st, now); err != nil {
		t.Fatal(err)
	}
}
