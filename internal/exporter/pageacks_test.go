// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

const alice = "alice@example.com"

// startAlice runs an exporter with a state folder watching alice, whom the
// API stand-in answers with combolist(1).
func startAlice(t *testing.T) (api *testkit.StandIn, dir, storage string, r *run) {
	t.Helper()
	api = testkit.NewStandIn(t, nil)
	api.AnswerOthers(combolist(1))
	dir, storage = t.TempDir(), filepath.Join(t.TempDir(), "data")
	return api, dir, storage, start(t, dir, storage, api.BaseURL(), "["+alice+"]", "")
}

// An acknowledgement made on the page is in force at once, decided on the
// exporter's clock like the file's (news after it reopens it), kept in the
// state folder across a restart with that decision, and gone for good once
// withdrawn.
func TestPageAcknowledgementSurvivesRestart(t *testing.T) {
	api, dir, storage, r := startAlice(t)
	// The answer applied, not only sent: the feed's series served.
	testkit.AdvanceUntil(t, r.clock, "the first round", 100*time.Millisecond, func() bool {
		return api.Reads(alice) == 1 && strings.Contains(testkit.ScrapeText(t, r.exp.MetricsHandler(r.reg)), `source="combolist"`)
	})

	if err := r.exp.Acknowledge(alice, "combolist", "Ada", "password reset"); err != nil {
		t.Fatal(err)
	}
	series := testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", alice, "source", "combolist", "by", "Ada", "comment", "password reset")
	made := float64(r.clock.Now().Truncate(time.Second).Unix())
	if got, ok := testkit.Scrape(t, r.exp.MetricsHandler(r.reg))[series]; !ok || got != made {
		t.Fatalf("%s = %v (served %v), want %v: the page's acknowledgement in force from its making", series, got, ok, made)
	}

	r.clock.Advance(2 * time.Second)
	rec := httptest.NewRecorder()
	r.exp.WebhookHandler().ServeHTTP(rec, signed(alertFor(alice)))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("webhook = %d", rec.Code)
	}
	if got := testkit.Scrape(t, r.exp.MetricsHandler(r.reg))[series]; got != 0 {
		t.Fatalf("after a critical alert %s = %v, want 0 (reopened by news)", series, got)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	r2 := startAt(t, r.clock, dir, storage, api.BaseURL(), "["+alice+"]", "")
	if got, ok := testkit.Scrape(t, r2.exp.MetricsHandler(r2.reg))[series]; !ok || got != 0 {
		t.Fatalf("after the restart %s = %v (served %v), want the page's entry, still reopened (0)", series, got, ok)
	}
	if done, err := r2.exp.Withdraw(alice, "combolist"); !done || err != nil {
		t.Fatalf("Withdraw = %v, %v", done, err)
	}
	if _, ok := testkit.Scrape(t, r2.exp.MetricsHandler(r2.reg))[series]; ok {
		t.Fatalf("%s still served after the withdrawal", series)
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	r3 := startAt(t, r.clock, dir, storage, api.BaseURL(), "["+alice+"]", "")
	if _, ok := testkit.Scrape(t, r3.exp.MetricsHandler(r3.reg))[series]; ok {
		t.Errorf("%s back after a restart: the withdrawal was not kept", series)
	}
}

// A reload of the file keeps the page's acknowledgements in force.
func TestReloadKeepsPageAcknowledgements(t *testing.T) {
	_, _, _, r := startAlice(t)
	if err := r.exp.Acknowledge(alice, "", "Ada", ""); err != nil {
		t.Fatal(err)
	}
	if err := r.exp.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !r.exp.Config().Load().Acknowledgements.HasPage() {
		t.Error("a reload dropped the page's acknowledgement")
	}
}
