// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// A reload puts the acknowledgements file in force and warns about
// entries for addresses not watched; a bad file fails the reload with its
// name and line and keeps the acknowledgements in force.
func TestReloadAcknowledgements(t *testing.T) {
	f := newFixture(t, "addresses: [alice@example.com]\n")
	testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == 1 })

	cfg, acks := filepath.Join(f.dir, "config.yml"), filepath.Join(f.dir, "acks.yml")
	original, _ := os.ReadFile(cfg)
	good := "acknowledgements:\n  - address: alice@example.com\n    handled_at: 2026-11-22T07:00:00Z\n    by: oncall\n" +
		"  - address: gone@example.com\n    handled_at: 2026-11-22T07:00:00Z\n    by: oncall\n"
	testkit.WriteFile(t, acks, good)
	testkit.WriteFile(t, cfg, string(original)+"acknowledgements_file: acks.yml\n")
	if err := f.exp.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	series := testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", "alice@example.com", "source", "combolist", "by", "oncall", "comment", "")
	handled := float64(time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC).Unix())
	if got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[series]; got != handled {
		t.Errorf("%s = %v, want %v", series, got, handled)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "line 5: the entry's address is not watched") {
		t.Errorf("no warning for the unwatched address in the logs:\n%s", logs)
	}

	testkit.WriteFile(t, acks, strings.Replace(good, "by: oncall", "by: oncall\n    when: now", 1))
	err := f.exp.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), acks+": line 2: ") || !strings.Contains(err.Error(), `unknown key "when" at line 5`) {
		t.Fatalf("reload with a bad acknowledgements file: %v, want the file, line 2 and the key", err)
	}
	samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
	if got := samples[testkit.Series("breach_exporter_config_last_reload_successful")]; got != 0 {
		t.Errorf("reload gauge = %v after a failed reload", got)
	}
	if got := samples[series]; got != handled {
		t.Errorf("after the failed reload %s = %v, want the acknowledgement in force, %v", series, got, handled)
	}
}

// A change of the acknowledgements file is in force without a SIGHUP: the
// file watch reloads (a ConfigMap update, in Kubernetes).
func TestAcknowledgementsFileChangeReloads(t *testing.T) {
	if testing.Short() {
		t.Skip("the watch's 1 s debounce is real time: the full run checks it")
	}
	acks := filepath.Join(t.TempDir(), "acks.yml")
	testkit.WriteFile(t, acks, "acknowledgements: []\n")
	f := newFixture(t, "addresses: [alice@example.com]\nacknowledgements_file: "+acks+"\n")
	testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == 1 })

	testkit.WriteFile(t, acks, "acknowledgements:\n  - address: alice@example.com\n    handled_at: 2026-11-22T07:00:00Z\n    by: oncall\n")
	series := testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", "alice@example.com", "source", "combolist", "by", "oncall", "comment", "")
	handled := float64(time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC).Unix())
	// The watch debounces in real time (filewatch.Debounce), then reloads.
	testkit.Eventually(t, "the acknowledgement in force", func() bool {
		return testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[series] == handled
	})
	samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
	if got := samples[testkit.Series("breach_exporter_file_watch_reloads_total")]; got != 1 {
		t.Errorf("breach_exporter_file_watch_reloads_total = %v, want 1", got)
	}
	if got := samples[testkit.Series("breach_exporter_config_last_reload_successful")]; got != 1 {
		t.Errorf("reload gauge = %v after the watched reload", got)
	}
}
