// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// ackSeries is the series of a page acknowledgement by Ada of address's
// combolist feed.
func ackSeries(address, comment string) string {
	return testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", address, "source", "combolist", "by", "Ada", "comment", comment)
}

// servesPageAck reports whether r serves Ada's acknowledgement of address
// with comment, in the series and in the list the page reads.
func servesPageAck(t *testing.T, r *replica, address, comment string) bool {
	_, served := r.scrape(t)[ackSeries(address, comment)]
	a, listed := r.exp.Config().Load().Acknowledgements.For(breach.Key(address), "combolist")
	return served && listed && a.Page && a.By == "Ada" && a.Comment == comment
}

// withdrawnEverywhere reports whether no replica serves a page
// acknowledgement of address, in the series or the list.
func withdrawnEverywhere(t *testing.T, address string, rs ...*replica) bool {
	for _, r := range rs {
		if _, ok := r.exp.Config().Load().Acknowledgements.For(breach.Key(address), "combolist"); ok {
			return false
		}
		for series := range r.scrape(t) {
			if strings.HasPrefix(series, "breach_source_acknowledged_timestamp_seconds{") && strings.Contains(series, address) {
				return false
			}
		}
	}
	return true
}

// waitServed waits until every replica serves the acknowledgement, and
// logs how long it took from since.
func waitServed(t *testing.T, since time.Time, address, comment string, rs ...*replica) {
	t.Helper()
	testkit.Eventually(t, "every replica serves the page's acknowledgement of "+address, func() bool {
		for _, r := range rs {
			if !servesPageAck(t, r, address, comment) {
				return false
			}
		}
		return true
	})
	t.Logf("%s: served by %d replicas %v after the change", address, len(rs), time.Since(since))
}

// An acknowledgement made on one replica's page is served by every replica
// through the store, and a withdrawal on another is gone from every one; a
// replica started on an empty folder, with the stream trimmed past the
// change, has it from the checkpoint.
func TestPageAcknowledgementsAreShared(t *testing.T) {
	s := newStoreSetup(t)
	one, two := s.replica(t, "one"), s.replica(t, "two")
	s.verified(t, one)
	s.verified(t, two)

	start := time.Now()
	if err := one.exp.Acknowledge("a@example.com", "combolist", "Ada", "reset"); err != nil {
		t.Fatal(err)
	}
	waitServed(t, start, "a@example.com", "reset", one, two)

	start = time.Now()
	if done, err := two.exp.Withdraw("a@example.com", "combolist"); !done || err != nil {
		t.Fatalf("Withdraw on the other replica = %v, %v", done, err)
	}
	testkit.Eventually(t, "the withdrawal on every replica", func() bool { return withdrawnEverywhere(t, "a@example.com", one, two) })
	t.Logf("withdrawn on both %v after the change", time.Since(start))

	if err := two.exp.Acknowledge("b@example.com", "combolist", "Ada", "rotated"); err != nil {
		t.Fatal(err)
	}
	waitServed(t, time.Now(), "b@example.com", "rotated", one, two)
	s.checkpointed(t)
	// The stream no longer holds the change: only the checkpoint does.
	if err := s.redis.XTrimMaxLen(context.Background(), eventsKey, 0).Err(); err != nil {
		t.Fatal(err)
	}
	three := s.replica(t, "three")
	waitServed(t, time.Now(), "b@example.com", "rotated", three)
	if servesPageAck(t, three, "a@example.com", "reset") {
		t.Error("the withdrawn acknowledgement came back on a replica started from the checkpoint")
	}
}

// A change made while the store is frozen is answered at once, in force on
// the replica that took it, and served by every replica once the store is
// back. One made while the store is down, followed by a crash of the
// replica that took it, is not lost: kept in its state folder, it is
// published when the replica starts again, into a store restarted empty.
func TestPageAcknowledgementWhileTheStoreIsAway(t *testing.T) {
	s := newOwnStoreSetup(t)
	one, two := s.replica(t, "one"), s.replica(t, "two")
	s.verified(t, one)
	s.verified(t, two)

	s.store.Pause()
	start := time.Now()
	err := one.exp.Acknowledge("c@example.com", "combolist", "Ada", "frozen")
	t.Logf("answered in %v with the store frozen", time.Since(start))
	served := servesPageAck(t, one, "c@example.com", "frozen")
	s.store.Resume()
	if err != nil || !served {
		t.Fatalf("Acknowledge with the store frozen = %v, served here %v; want it taken and in force: it is kept here until the store answers", err, served)
	}
	waitServed(t, start, "c@example.com", "frozen", one, two)

	s.store.Stop()
	start = time.Now()
	if err := one.exp.Acknowledge("d@example.com", "combolist", "Ada", "down"); err != nil {
		t.Fatalf("Acknowledge with the store down = %v", err)
	}
	one.crash()
	s.store.Start()
	again := startReplica(t, s.dir, filepath.Join(s.dir, "one"))
	waitServed(t, start, "d@example.com", "down", again, two)
	waitServed(t, start, "c@example.com", "frozen", again, two)
}

// What a replica reads of the page from the store is held to what the file
// takes: bounds on by and comment, a valid address and feed, a known
// version, and a handled_at ahead of the clock clamped to it.
func TestPageChangesFromTheStoreAreChecked(t *testing.T) {
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	good := pageWire{V: 1, ID: "page-1", Address: "a@example.com", Source: "combolist", HandledAt: now, By: "Ada"}
	for name, mutate := range map[string]func(*pageWire){
		"long by":         func(w *pageWire) { w.By = string(make([]byte, acknowledge.MaxByBytes+1)) },
		"long comment":    func(w *pageWire) { w.Comment = string(make([]byte, acknowledge.MaxCommentBytes+1)) },
		"no by":           func(w *pageWire) { w.By = "" },
		"not an address":  func(w *pageWire) { w.Address = "nobody" },
		"unknown feed":    func(w *pageWire) { w.Source = "telepathy" },
		"later version":   func(w *pageWire) { w.V = 2 },
		"no handled_at":   func(w *pageWire) { w.HandledAt = time.Time{} },
		"long ID":         func(w *pageWire) { w.ID = string(make([]byte, maxChangeID+1)) },
		"withdraw a feed": func(w *pageWire) { w.Withdraw, w.Source = true, "telepathy" },
	} {
		w := good
		mutate(&w)
		data, _ := json.Marshal(w)
		if _, err := decodePageChange(data, now); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
	w := good
	w.HandledAt = now.Add(time.Hour)
	data, _ := json.Marshal(w)
	c, err := decodePageChange(data, now)
	if err != nil || !c.Entry.HandledAt.Equal(now) {
		t.Errorf("a handled_at an hour ahead = %v, %v; want it clamped to now", c.Entry.HandledAt, err)
	}
}

// A checkpoint's list is bounded: past persist.MaxPageEntries, and its
// invalid entries, are skipped and counted; a checkpoint without a list (a
// release before it) leaves the list held.
func TestCheckpointPageListIsChecked(t *testing.T) {
	r := &replicas{logger: log.NewNopLogger(), dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "invalid"}), page: newPageShare()}
	held := []acknowledge.Entry{{Address: "z@example.com", By: "Ada", HandledAt: time.Now().UTC(), Page: true}}
	r.page.entries = held
	r.restorePage(&checkpointExtra{}, time.Now())
	if len(r.page.entries) != 1 {
		t.Fatalf("a checkpoint without a list replaced the list held: %v", r.page.entries)
	}
	now := time.Now()
	list := []pageWire{
		{V: 1, Address: "a@example.com", HandledAt: now, By: "Ada"},
		{V: 1, Address: "a@example.com", HandledAt: now, By: "Bob"}, // the same feed: the last
		{V: 1, Address: "nobody", HandledAt: now, By: "Ada"},
	}
	r.restorePage(&checkpointExtra{Page: &list}, now)
	if len(r.page.entries) != 1 || r.page.entries[0].By != "Bob" {
		t.Errorf("list = %v, want Bob's alone", r.page.entries)
	}
	if got := testutil.ToFloat64(r.dropped); got != 1 {
		t.Errorf("invalid entries counted %v, want 1", got)
	}
}
