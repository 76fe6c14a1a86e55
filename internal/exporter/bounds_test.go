// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// seriesCount is the number of samples one scrape serves.
func seriesCount(t *testing.T, f *fixture) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(testkit.ScrapeText(t, f.exp.MetricsHandler(f.reg)), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// Signed alerts for ever new addresses cannot grow /metrics without bound:
// with discovery off they are counted without a label; with it on, the
// discovered addresses stop at the limit, and so does the round length.
func TestAlertsForNewAddressesAreBounded(t *testing.T) {
	post := func(t *testing.T, f *fixture, n int) {
		t.Helper()
		for i := range n {
			if code := f.postAlert(fmt.Sprintf("user%05d@flood.example", i)); code != http.StatusNoContent {
				t.Fatalf("alert %d answered %d", i, code)
			}
		}
	}

	t.Run("discovery off", func(t *testing.T) {
		f := newFixture(t, "  discover_addresses: false\naddresses: [alice@example.com]\n")
		before := seriesCount(t, f)
		post(t, f, 1000)
		if grew := seriesCount(t, f) - before; grew >= 100 {
			t.Errorf("1,000 alerts for distinct addresses added %d series, want fewer than 100", grew)
		}
		if got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")]; got != 1000 {
			t.Errorf("untracked alerts = %v, want 1000", got)
		}
	})

	t.Run("discovery on", func(t *testing.T) {
		f := newFixture(t, "  max_discovered_addresses: 100\nrefresh: {interval: 1m, me_interval: 1m}\naddresses: [alice@example.com]\n")
		post(t, f, 2000)
		samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
		if got := discoveredOf(f.exp); got != 100 {
			t.Errorf("%d discovered addresses, want the limit 100", got)
		}
		if got := samples[testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_limit")]; got != 1900 {
			t.Errorf("alerts refused by the limit = %v, want 1900", got)
		}
		// 101 addresses at 59 reads a minute (60 less /me): about 103 s,
		// where 2,001 would have taken 33 minutes.
		if cycle := samples[testkit.Series("breach_refresh_cycle_seconds")]; cycle > 110 {
			t.Errorf("round length %v s, want it bounded by the discovery limit (about 103 s)", cycle)
		}
	})
}

// discoveredOf counts the discovered addresses e watches.
func discoveredOf(e *Exporter) int {
	n := 0
	for _, entry := range e.watchlist.View().Entries {
		if entry.Address.Discovered {
			n++
		}
	}
	return n
}
