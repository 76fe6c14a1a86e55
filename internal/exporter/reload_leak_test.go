// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Every reload builds a new API client; the one it replaces must not keep
// its keep-alive connection (and the transport's goroutines, and the
// server's) open until the idle timeout: a leak adds one connection's goroutines
// for every reload.
func TestReloadsDoNotLeakConnections(t *testing.T) {
	const reloads = 40
	f := newFixture(t, "addresses: [alice@example.com]\n")
	testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == 1 })
	before := settledGoroutines(t, -1)

	for i := range reloads {
		if err := f.exp.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		// An alert makes the new client read alice at once, so each client
		// opens a connection of its own.
		if code := f.postAlert("alice@example.com"); code != http.StatusNoContent {
			t.Fatalf("signed alert answered %d", code)
		}
		testkit.AdvanceUntil(t, f.clock, "alice's re-read", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == i+2 })
	}
	// One client's connection (two transport goroutines and the server's)
	// may stay; 40 would add about 120.
	after := settledGoroutines(t, before+6)
	t.Logf("goroutines: %d before, %d after %d reloads", before, after, reloads)
	if after > before+6 {
		t.Errorf("goroutines grew from %d to %d over %d reloads", before, after, reloads)
	}
}

// A reload that changes a source's settings stops its goroutine and its
// client's connections before it starts the next; one that drops the
// source takes its series.
func TestReloadsStopHTTPSources(t *testing.T) {
	const reloads = 20
	d := newDirectory(t, `[{"targets": ["alice@example.com"], "labels": {"team": "payments"}}]`)
	f := newFixture(t, fmt.Sprintf("addresses_http: [{url: %q, refresh_interval: 1s}]\n", d.URL))
	before := settledGoroutines(t, -1)
	for i := range reloads {
		writeConfig(t, f.dir, f.api.BaseURL(), fmt.Sprintf("addresses_http: [{url: %q, refresh_interval: %ds}]\n", d.URL, 1+i%2))
		if err := f.exp.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	after := settledGoroutines(t, before+6)
	t.Logf("goroutines: %d before, %d after %d reloads", before, after, reloads)
	if after > before+6 {
		t.Errorf("goroutines grew from %d to %d over %d reloads", before, after, reloads)
	}
	if got := f.exp.watchlist.Len(); got != 1 {
		t.Errorf("%d addresses watched, want alice's list through every reload", got)
	}

	writeConfig(t, f.dir, f.api.BaseURL(), "addresses: [bob@example.com]\n")
	if err := f.exp.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
	if _, ok := samples[testkit.Series("breach_exporter_address_http_up", "url", d.URL)]; ok {
		t.Error("a source the reload removed keeps its series")
	}
	if _, ok := samples[info("alice@example.com", "payments")]; ok {
		t.Error("the removed source's address is still watched")
	}
}

// settledGoroutines polls runtime.NumGoroutine for up to 5 s until it is at
// most want (want < 0: until it stops changing for 100 ms) and returns it.
func settledGoroutines(t *testing.T, want int) int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	last := runtime.NumGoroutine()
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
		n := runtime.NumGoroutine()
		if want >= 0 && n <= want {
			return n
		}
		if want < 0 && n == last {
			stable := true
			for range 5 {
				time.Sleep(20 * time.Millisecond)
				if runtime.NumGoroutine() != n {
					stable = false
					break
				}
			}
			if stable {
				return n
			}
		}
		last = n
	}
	return runtime.NumGoroutine()
}
