// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// An alert the store confirmed and then lost before any replica read it
// back (the store emptied right after the publish's answer, while the
// replica's connections were cut a moment before: no read of the stream
// waited in the store) is applied by the replica that accepted it, from
// its memory, and carried by its lineage: a replica that starts from the
// store afterwards counts it too. Before, no replica ever applied it: the
// one that accepted it counted 1 of 2 for good, and so did every replica
// that started later.
func TestAlertTheStoreLostBeforeItWasReadBackIsKept(t *testing.T) {
	s := newStoreSetup(t)
	one, l := s.linked(t, "one", time.Second)
	s.verified(t, one)
	alertsCounted(t, one, "a@example.com", 0, 1) // the publish's script is loaded
	ctx := context.Background()
	flushed := make(chan error, 1)
	emptied := make(chan struct{})
	publish := []byte("breach_exporter:seen:")
	l.onSend(func(chunk []byte) {
		lower := bytes.ToLower(chunk)
		if !bytes.Contains(chunk, publish) && (bytes.Contains(lower, []byte("xread")) || bytes.Contains(lower, []byte("eval"))) {
			<-emptied // reads and scripts wait until the store lost the alert
		}
	}, func(chunk []byte) {
		if bytes.Contains(chunk, publish) {
			l.sent = nil // once (sent runs with l.passing held)
			flushed <- s.emptyOnceAdded(ctx, 2)
			close(emptied)
		}
	})
	l.cut(true) // no read of the stream left waiting in the store
	l.cut(false)
	postAlerts(t, "a@example.com", 1, 1, one)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	a := alertsOf("a@example.com")
	testkit.Eventually(t, "the replica that accepted it counts the alert the store lost", func() bool { return one.scrape(t)[a] == 2 })
	two := s.replica(t, "two")
	s.waitConverged(t, two, one)
	if v := two.scrape(t)[a]; v != 2 {
		t.Errorf("a replica that started after the loss counts %v alerts, want 2", v)
	}
}

// emptyOnceAdded waits until the store holds seen keys of n alerts (the
// publish's script adds the entry and its key in one step), then empties
// the store, as a restart without persistence does.
func (s *storeSetup) emptyOnceAdded(ctx context.Context, n int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		keys, err := s.redis.Keys(ctx, "breach_exporter:seen:*").Result()
		switch {
		case err != nil:
			return err
		case len(keys) >= n:
			return s.redis.FlushDB(ctx).Err()
		case time.Now().After(deadline):
			return fmt.Errorf("the store holds %d seen keys after 5 s, want %d", len(keys), n)
		}
		time.Sleep(time.Millisecond) // polls the store, which the relay holds nothing of
	}
}

// mine keeps its IDs in stream order, as numbers ("9-0" before "10-0"),
// whatever order they come in; first skips those applied.
func TestMineIsInStreamOrder(t *testing.T) {
	m := newMineSet()
	for _, id := range []string{"10-0", "9-0", "10-1", "11-0"} {
		m.add(id, watchlist.AcceptedAlert{})
	}
	if got := m.ids(); !slices.Equal(got, []string{"9-0", "10-0", "10-1", "11-0"}) {
		t.Fatalf("ids %q, want stream order", got)
	}
	m.take("10-0")
	if _, ok := m.take("9-0"); !ok || m.first() != "10-1" {
		t.Errorf("after taking 9-0 and 10-0, first is %q, want 10-1", m.first())
	}
}

// The three ways an own alert the store lost is found: an entry after it
// comes without it; a round finds the stream never gave its ID; the
// stream passed it before the publish's answer. Each applies it (it
// leaves mine, and the position is at least its ID), and an alert the
// stream still holds is not taken for lost.
func TestLostOwnAlertsAreApplied(t *testing.T) {
	r := applier(t)
	r.name = "me"
	r.last = "5-0"
	r.keepMine([]forwarded{{}, {}}, []string{"6-0", "7-0"}, r.mineEpoch())
	r.apply(sharedstore.Event{ID: "8-0", Kind: eventAccount, Data: []byte("x")})
	if r.unapplied() || r.last != "8-0" {
		t.Fatalf("after an entry past them: unapplied %v, position %s; want both applied, at 8-0", r.unapplied(), r.last)
	}

	r.keepMine([]forwarded{{}}, []string{"9-0"}, r.mineEpoch())
	held := r.mine.ids()
	if r.settleLost(held, sharedstore.Head{Stream: true, LastGiven: "9-0"}) || !r.unapplied() {
		t.Fatal("an alert the stream gave was taken for lost")
	}
	if !r.settleLost(held, sharedstore.Head{Stream: false}) || r.unapplied() || r.last != "9-0" {
		t.Fatalf("an emptied store: unapplied %v, position %s; want applied, at 9-0", r.unapplied(), r.last)
	}

	r.apply(sharedstore.Event{ID: "10-0", Kind: eventAccount, Data: []byte("x")})
	epoch := r.mineEpoch()
	r.keepMine([]forwarded{{}}, []string{"9-5"}, epoch)
	if r.unapplied() || r.last != "10-0" {
		t.Errorf("an alert the stream passed before its answer: unapplied %v, position %s", r.unapplied(), r.last)
	}
	r.mine.reset() // a resync meanwhile: what the stream passed is the state's
	r.keepMine([]forwarded{{}}, []string{"9-6"}, epoch)
	if r.unapplied() {
		t.Error("after a resync an alert the stream passed is kept as unapplied")
	}
}
