// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// startOn runs an exporter with the receiver on and its state in
// storage; its last snapshot at the end may fail (the tests below take
// the folder away) and is the test's to check.
func startOn(t *testing.T, storage string) (*Exporter, *prometheus.Registry, error) {
	t.Helper()
	api := testkit.NewStandIn(t, nil)
	api.Refuse()
	dir := t.TempDir()
	writeConfig(t, dir, api.BaseURL(), "addresses: []\n")
	r, err := tryStartExporter(t, Options{
		ConfigFile:       filepath.Join(dir, "config.yml"),
		Clock:            clockwork.NewFakeClock(),
		Webhook:          true,
		StoragePath:      storage,
		SnapshotInterval: time.Minute,
	})
	if err != nil {
		return nil, nil, err
	}
	r.closeMayFail = true
	return r.exp, r.reg, nil
}

func post(exp *Exporter, address string) int {
	rec := httptest.NewRecorder()
	exp.WebhookHandler().ServeHTTP(rec, signed(alertFor(address)))
	return rec.Code
}

func refused(t *testing.T, reg prometheus.Gatherer) float64 {
	t.Helper()
	// What BreachWebhookAlertsRefused reads.
	return testkit.Samples(t, reg)["breach_exporter_state_journal_failures_total{}"]
}

// The state folder moved away (mv data data.old; mkdir data), or the
// path replaced by a symlink to another folder: alerts are refused (503,
// counted where BreachWebhookAlertsRefused looks) rather than answered and
// kept where the next start on the path never looks; the snapshot is
// refused too. The path naming the folder again resumes both.
func TestMovedStorageFolderRefusesAlerts(t *testing.T) {
	base := t.TempDir()
	storage, moved := filepath.Join(base, "data"), filepath.Join(base, "data.old")
	exp, reg, err := startOn(t, storage)
	if err != nil {
		t.Fatal(err)
	}
	if code := post(exp, "a@example.com"); code != http.StatusNoContent {
		t.Fatalf("before the move: %d", code)
	}
	if err := os.Rename(storage, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(storage, 0o700); err != nil {
		t.Fatal(err)
	}
	if code := post(exp, "b@example.com"); code != http.StatusServiceUnavailable {
		t.Fatalf("after the move: %d, want 503", code)
	}
	if err := exp.Save(); err == nil {
		t.Error("a snapshot into the moved folder counted as written")
	}
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(storage); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, storage); err != nil {
		t.Fatal(err)
	}
	if code := post(exp, "c@example.com"); code != http.StatusServiceUnavailable {
		t.Fatalf("with the path a symlink to another folder: %d, want 503", code)
	}
	if got := refused(t, reg); got != 2 {
		t.Errorf("refused alerts counted: %v, want 2", got)
	}
	for _, d := range []string{storage, other} {
		if entries, _ := os.ReadDir(d); len(entries) != 0 {
			t.Errorf("%s holds %v: the exporter wrote outside its folder", d, entries)
		}
	}
	// Back where it was: accepted again, and the snapshot written.
	if err := os.Remove(storage); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(moved, storage); err != nil {
		t.Fatal(err)
	}
	if code := post(exp, "b@example.com"); code != http.StatusNoContent {
		t.Fatalf("with the folder back: %d", code)
	}
	if err := exp.Save(); err != nil {
		t.Errorf("a snapshot with the folder back: %v", err)
	}
}

// One exporter per folder, however its lock file or the folder itself is
// removed: a second exporter is refused after `rm data/lock`, naming the
// folder; after `rm -rf data; mkdir data` the running exporter refuses
// alerts instead of writing into the new folder, which a second exporter
// may take.
func TestStorageLockHolds(t *testing.T) {
	storage := filepath.Join(t.TempDir(), "data")
	first, reg, err := startOn(t, storage)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(storage, "lock")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := startOn(t, storage); err == nil || !strings.Contains(err.Error(), storage) {
		t.Fatalf("a second exporter after rm data/lock: %v", err)
	}
	if err := os.RemoveAll(storage); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(storage, 0o700); err != nil {
		t.Fatal(err)
	}
	if code := post(first, "a@example.com"); code != http.StatusServiceUnavailable {
		t.Fatalf("the first exporter after rm -rf data; mkdir data: %d, want 503", code)
	}
	if got := refused(t, reg); got != 1 {
		t.Errorf("refused alerts counted: %v, want 1", got)
	}
	second, _, err := startOn(t, storage)
	if err != nil {
		t.Fatalf("a second exporter on the new folder: %v", err)
	}
	if code := post(second, "a@example.com"); code != http.StatusNoContent {
		t.Fatalf("the second exporter: %d", code)
	}
	if code := post(first, "b@example.com"); code != http.StatusServiceUnavailable {
		t.Fatalf("the first exporter beside the second: %d, want 503", code)
	}
}
