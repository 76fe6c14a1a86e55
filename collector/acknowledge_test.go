// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// withAcks puts data in force as the acknowledgements file, as a reload
// does at polled.
func (f *fixture) withAcks(t *testing.T, data string) { f.loadAcks(t, data, polled) }

// loadAcks puts data in force as the acknowledgements file, as a reload
// does at now: in the bundle, and its moments in the watchlist.
func (f *fixture) loadAcks(t *testing.T, data string, now time.Time) {
	t.Helper()
	acks, err := acknowledge.Parse([]byte(data), now)
	if err != nil {
		t.Fatal(err)
	}
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55}}, Acknowledgements: acks})
	f.reg.NoteAcknowledgements(acks, now)
}

// An acknowledgement handles what its feeds reported up to handled_at: the
// acknowledged feeds get one series each, the fleet counts open and
// handled exposures, and a reload re-renders the addresses' cached lines.
func TestAcknowledgements(t *testing.T) {
	later := changed.Add(48 * time.Hour)
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com", "b@example.com")...)
	f.answer("a@example.com", breach.Verified, []breach.SourceState{
		{Source: "combolist", HasPlaintextPassword: true, LastChangedAt: changed},
		{Source: "index", HasPlaintextPassword: true, LastChangedAt: later},
		{Source: "archive", LastChangedAt: changed},
	}, polled)
	f.answer("b@example.com", breach.Verified, []breach.SourceState{
		{Source: "combolist", HasPlaintextPassword: true, LastChangedAt: changed},
	}, polled)
	before, _ := seriesOf(t, f, "b@example.com")
	testkit.Scrape(t, f.h) // the blocks are cached before the reload

	handled := changed.Add(time.Hour)
	f.withAcks(t, fmt.Sprintf("acknowledgements:\n  - address: A@example.com\n    handled_at: %s\n    by: oncall\n    comment: \"rotated, \\\"all\\\" sessions\"\n  - address: nobody@example.com\n    handled_at: %[1]s\n    by: x\n",
		handled.Format(time.RFC3339)))
	samples := testkit.Scrape(t, f.h)
	ack := func(source string) string {
		return testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", "a@example.com", "source", source,
			"by", "oncall", "comment", `rotated, "all" sessions`)
	}
	for source, want := range map[string]float64{
		"archive":   unixSeconds(handled),
		"combolist": unixSeconds(handled),
		"index":     0, // changed after handled_at
	} {
		if got, ok := samples[ack(source)]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", ack(source), got, ok, want)
		}
	}
	if after, byFamily := seriesOf(t, f, "b@example.com"); after != before {
		t.Errorf("b, not acknowledged: %d series, %d before: %v", after, before, byFamily)
	}
	for _, c := range []struct {
		family, source string
		want           float64
	}{
		// a's combolist changed before handled_at; its index after.
		{"breach_addresses_plaintext_password_handled", "combolist", 1},
		{"breach_addresses_plaintext_password_open", "combolist", 1}, // b
		{"breach_addresses_plaintext_password_open", "index", 1},
		{"breach_addresses_plaintext_password_handled", "index", 0},
		{"breach_addresses_plaintext_password_open", "archive", 0},
		{"breach_addresses_plaintext_password_handled", "enriched", 0},
	} {
		key := testkit.Series(c.family, "source", c.source)
		if got, ok := samples[key]; !ok || got != c.want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, c.want)
		}
	}

	// A reload without the file drops the series and opens the exposures.
	f.withAcks(t, "")
	samples = testkit.Scrape(t, f.h)
	if _, ok := samples[ack("combolist")]; ok {
		t.Errorf("%s served after the acknowledgement went", ack("combolist"))
	}
	if got := samples[testkit.Series("breach_addresses_plaintext_password_open", "source", "combolist")]; got != 2 {
		t.Errorf("open combolist exposures %v, want 2", got)
	}
}

// The exporter decides on its own clock whether an acknowledgement covers
// a feed, and exports exactly what alerts/breach_exporter.rules.test.yml
// feeds the rules in the same cases: the moment the acknowledgement took
// effect while it covers the feed, 0 once something came after it.
func TestAcknowledgementClocks(t *testing.T) {
	t0 := polled
	minute := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	ackFile := func(handled time.Time, source string) string {
		s := "acknowledgements:\n  - address: a@example.com\n    handled_at: " + handled.Format(time.RFC3339) + "\n    by: oncall\n"
		if source != "" {
			s += "    source: " + source + "\n"
		}
		return s
	}
	feed := func(source string, changedAt time.Time) breach.SourceState {
		return breach.SourceState{Source: source, HasPlaintextPassword: true, LastChangedAt: changedAt}
	}
	series := func(source string) string {
		return testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", "a@example.com", "source", source, "by", "oncall", "comment", "")
	}
	type want struct {
		source      string
		value       float64
		open, total float64 // of the fleet, for the source
	}
	check := func(t *testing.T, f *fixture, step string, wants ...want) {
		t.Helper()
		samples := testkit.Scrape(t, f.h)
		for _, w := range wants {
			if got, ok := samples[series(w.source)]; !ok || got != w.value {
				t.Errorf("%s: %s = %v (present %v), want %v", step, series(w.source), got, ok, w.value)
			}
			open := samples[testkit.Series("breach_addresses_plaintext_password_open", "source", w.source)]
			handled := samples[testkit.Series("breach_addresses_plaintext_password_handled", "source", w.source)]
			if open != w.open || handled != w.total-w.open {
				t.Errorf("%s: %s open %v, handled %v; want %v and %v", step, w.source, open, handled, w.open, w.total-w.open)
			}
		}
	}

	t.Run("future handled_at", func(t *testing.T) {
		f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com")...)
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-30))}, t0)
		// Written at t0 with handled_at 4 minutes ahead: in effect from t0.
		f.loadAcks(t, ackFile(minute(4), "combolist"), t0)
		check(t, f, "loaded", want{"combolist", unixSeconds(t0), 0, 1})
		// The service stamps its change before handled_at; the exporter
		// sees it after loading the acknowledgement.
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(2))}, minute(3))
		check(t, f, "changed", want{"combolist", 0, 1, 1})
	})
	t.Run("service clock behind", func(t *testing.T) {
		f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com")...)
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-30))}, t0)
		f.loadAcks(t, ackFile(minute(1), "combolist"), minute(2))
		check(t, f, "loaded", want{"combolist", unixSeconds(minute(1)), 0, 1})
		// Seen at t0+10m, stamped 10 minutes before handled_at.
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-9))}, minute(10))
		check(t, f, "changed", want{"combolist", 0, 1, 1})
	})
	t.Run("change exactly at handled_at", func(t *testing.T) {
		f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com")...)
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-30))}, minute(-10))
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-1))}, t0)
		f.loadAcks(t, ackFile(t0, "combolist"), minute(1))
		check(t, f, "loaded", want{"combolist", unixSeconds(t0), 0, 1})
		// Seen a second after handled_at: open.
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", t0)}, t0.Add(time.Second+time.Minute))
		check(t, f, "changed", want{"combolist", 0, 1, 1})
	})
	t.Run("acknowledgement without a source", func(t *testing.T) {
		f := newFixture(breach.LabelEmail, true, testkit.Addresses("a@example.com")...)
		f.answer("a@example.com", breach.Verified, []breach.SourceState{feed("combolist", minute(-30)), feed("paste", minute(-20))}, t0)
		f.loadAcks(t, ackFile(minute(1), ""), minute(1))
		check(t, f, "loaded", want{"combolist", unixSeconds(minute(1)), 0, 1}, want{"paste", unixSeconds(minute(1)), 0, 1})
		// A critical webhook for one feed reopens that feed alone, and a
		// feed it names that the API does not list yet gets the series.
		f.reg.RecordAlert(breach.DefaultAccount, "a@example.com", watchlist.AlertDelta{Source: "paste", Severity: breach.Critical, AcceptedAt: minute(5)})
		f.reg.RecordAlert(breach.DefaultAccount, "a@example.com", watchlist.AlertDelta{Source: "index", Severity: breach.Critical, AcceptedAt: minute(6)})
		check(t, f, "critical webhooks", want{"combolist", unixSeconds(minute(1)), 0, 1}, want{"paste", 0, 1, 1}, want{"index", 0, 0, 0})
	})
}
