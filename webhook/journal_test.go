// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"errors"
	"net/http"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// journalFunc is a Journal whose Commit is a function.
type journalFunc func(a watchlist.AcceptedAlert, apply func()) error

func (f journalFunc) Commit(a watchlist.AcceptedAlert, apply func()) error { return f(a, apply) }

// An alert the journal cannot make durable is answered 503 and changes
// nothing: not counted, not remembered, so the sender's retry is accepted.
func TestAlertNotDurableIs503(t *testing.T) {
	f := newFixture(t, settings{Addresses: []string{"bob@example.com"}})
	var records []watchlist.AcceptedAlert
	failing := true
	f.h.journal = journalFunc(func(a watchlist.AcceptedAlert, apply func()) error {
		if failing {
			return errors.New("disk full")
		}
		records = append(records, a)
		apply()
		return nil
	})
	body := alertBody("first")
	if rec := f.post(body, testSecret); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d, want 503 with Retry-After", rec.Code)
	}
	if f.outcomeCount(outcomeUnavailable) != 1 || f.outcomeCount(outcomeAccepted) != 0 || f.alertCount("bob@example.com", "index", "warning") > 0 {
		t.Fatal("a 503 alert was counted")
	}
	failing = false
	f.expectOutcome(body, outcomeAccepted)
	if len(records) != 1 || records[0].Address != "bob@example.com" || records[0].Delta.NewDatabases != 1 {
		t.Fatalf("journal records %+v", records)
	}
	f.expectOutcome(body, outcomeDuplicate)

	// What the journal held comes back through Replay in a new handler:
	// counted, and its body a duplicate.
	g := newFixture(t, settings{Addresses: []string{"bob@example.com"}})
	for _, a := range records {
		g.h.Replay(a)
	}
	if g.outcomeCount(outcomeAccepted) != 1 || g.alertCount("bob@example.com", "index", "warning") != 1 {
		t.Fatal("a replayed alert was not counted")
	}
	g.expectOutcome(body, outcomeDuplicate)
}
