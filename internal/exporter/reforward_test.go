// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// readsOf tells the stream's reads (sharedstore's readScript, whose first
// argument is an exclusive start, "(id") among what a link sends.
func readsOf(chunk []byte) bool { return bytes.Contains(chunk, []byte("\r\n(")) }

// The store restarts from an older save right after it confirmed an
// alert to one replica that had not read it back yet; another replica,
// which holds an earlier alert the save lacks too, starts a new lineage
// and moves it past that alert's ID with an alert of its own; the first
// then loads that lineage's checkpoint in place of its state. Before, it
// dropped its own alert with mine: answered 204, counted on no replica.
// Now it passes it to the store again, and every replica counts it once.
func TestAlertAResyncDroppedIsPassedAgain(t *testing.T) {
	s := newOwnStoreSetup(t)
	one, linkOne := s.linked(t, "one", time.Hour) // no checkpoint of its own
	two, linkTwo := s.linked(t, "two", time.Second)
	logsOnFailure(t, one, two)
	s.verified(t, one)
	s.verified(t, two)
	s.checkpointed(t)
	ctx := context.Background()
	old, err := s.redis.HGet(ctx, checkpointKey, "lineage").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.redis.Save(ctx).Err(); err != nil { // the older save
		t.Fatal(err)
	}
	alertsCounted(t, one, "c@example.com", 0, 1)
	c := alertsOf("c@example.com")
	testkit.Eventually(t, "the earlier alert counted on two", func() bool { return two.scrape(t)[c] == 1 })

	reads := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(reads) }) })
	linkOne.onSend(func(chunk []byte) {
		if readsOf(chunk) {
			<-reads // one does not read its alert back
		}
	}, nil)
	linkOne.cut(true) // no read of the stream left in flight
	linkOne.cut(false)
	linkTwo.cut(true) // nor does two
	postAlerts(t, "a@example.com", 0, 1, one)
	accepted := testkit.Series("breach_webhook_requests_total", "outcome", "accepted")
	testkit.Eventually(t, "the store confirmed the alert to one", func() bool { return one.scrape(t)[accepted] == 2 })
	linkOne.cut(true)
	s.store.Stop() // without saving: it starts again from the older save
	s.store.Start()

	linkTwo.cut(false)
	testkit.Eventually(t, "two started a new lineage", func() bool {
		l, err := s.redis.HGet(ctx, checkpointKey, "lineage").Result()
		return err == nil && l != old
	})
	alertsCounted(t, two, "b@example.com", 0, 1)
	s.checkpointed(t) // past the lost alert's ID, without it

	linkOne.cut(false) // its rounds see the other lineage; its reads still wait
	resyncs := testkit.Series("breach_exporter_store_resyncs_total", "reason", "lineage")
	testkit.Eventually(t, "one loaded the new lineage's checkpoint", func() bool { return one.scrape(t)[resyncs] == 1 })
	release.Do(func() { close(reads) })

	a := alertsOf("a@example.com")
	testkit.Eventually(t, "the alert answered 204 counted on the other replica", func() bool { return two.scrape(t)[a] == 1 })
	s.waitConverged(t, one, two)
	m := one.scrape(t)
	if m[a] != 1 || m[alertsOf("b@example.com")] != 1 || m[c] != 1 {
		t.Errorf("the replica that accepted it counts %v, %v and %v, want 1 each", m[a], m[alertsOf("b@example.com")], m[c])
	}
	if m[accepted] != 2 {
		t.Errorf("its 204 counted as %v accepted requests, want 2 (one per body)", m[accepted])
	}
}

// Three replicas take alerts while the store is emptied three times:
// each time they settle on one replica's state, and the others pass again
// their own alerts it lacks. Every alert answered 204 is counted exactly
// once on every replica: none lost, none twice (the checkpoint carries the
// digests its state counts, so an alert the loaded state counts is not
// passed again, and a copy is skipped).
func TestAlertsCountOnceAcrossRepeatedFlushes(t *testing.T) {
	s := newOwnStoreSetup(t)
	rs := []*replica{s.replica(t, "one"), s.replica(t, "two"), s.replica(t, "three")}
	logsOnFailure(t, rs...)
	for _, r := range rs {
		s.verified(t, r)
	}
	const perAddress, flushes = 60, 3
	ctx := context.Background()
	for f := range flushes {
		for _, address := range s.addresses {
			postAlerts(t, address, f*perAddress/flushes, perAddress/flushes/2, rs...)
		}
		if err := s.redis.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, address := range s.addresses {
			postAlerts(t, address, f*perAddress/flushes+perAddress/flushes/2, perAddress/flushes/2, rs...)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range rs {
				m := r.scrape(t)
				for _, address := range s.addresses {
					t.Logf("replica %d: %s %v", i, address, m[alertsOf(address)])
				}
			}
		}
	})
	testkit.Eventually(t, fmt.Sprintf("%d alerts per address counted on every replica", perAddress), func() bool {
		for _, r := range rs {
			m := r.scrape(t)
			for _, address := range s.addresses {
				if m[alertsOf(address)] < perAddress {
					return false
				}
			}
		}
		return true
	})
	for i, r := range rs {
		s.waitConverged(t, r, rs[0])
		m := r.scrape(t)
		for _, address := range s.addresses {
			if got := m[alertsOf(address)]; got != perAddress {
				t.Errorf("replica %d counts %v alerts for %s, want %d", i, got, address, perAddress)
			}
		}
	}
}

// logsOnFailure logs what the replicas logged when t fails.
func logsOnFailure(t *testing.T, rs ...*replica) {
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range rs {
				t.Logf("replica %d logged:\n%s", i, r.logs.String())
			}
		}
	})
}

// An own alert for an address not watched here yet, held through a resync
// (rebaseHeld), is counted when its hold ends: reforward does not pass it
// again, which counted it twice on this replica. The store lost it and
// this replica applied it from mine, then loaded a checkpoint past it
// that lacks it.
func TestReforwardLeavesAnOwnHeldAlert(t *testing.T) {
	w := watchlist.New()
	w.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	hook, err := webhook.NewHandler(prometheus.NewRegistry(), webhook.Options{Config: config.NewCurrent(&config.Bundle{Config: &config.Config{}}),
		Watchlist: w, Clock: clockwork.NewRealClock(), Logger: log.NewNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r := applier(t)
	r.watchlist, r.hook, r.held, r.name = w, hook, newHeld(), "two"
	r.waiting, r.wake = prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"}), make(chan struct{}, 1)
	now := time.Now()
	r.held.now = func() time.Time { return now }
	a := watchlist.AcceptedAlert{Digest: sha256.Sum256([]byte("a")), At: now, Address: unanswered,
		Delta: watchlist.AlertDelta{Source: "combolist", Severity: "critical"}}
	id := func(ms int64) string { return sharedstore.IDAt(now.Add(time.Duration(ms) * time.Millisecond)) }

	r.applying.Lock()
	r.last = id(-1000)
	r.mine.add(id(0), a)
	r.own.add(id(0), a)
	r.applyLost(id(0)) // the store lost it: applied from mine, held
	var writer appliedDigests
	writer.add(sha256.Sum256([]byte("another")), id(500))
	r.last = id(500) // the resync
	r.mine.reset()
	r.applied.restore(writer.wire(id(500)), id(500), now)
	r.own.check = true
	r.rebaseHeld(id(500))
	held := len(r.held.alerts)
	r.applying.Unlock()
	if held != 1 {
		t.Fatalf("%d alerts held through the resync, want 1", held)
	}
	r.reforward(sharedstore.Head{Last: id(500)})
	if n := r.waitingCount(); n != 0 {
		t.Errorf("passed %d alerts again, want none: the one held is counted when its hold ends", n)
	}
}
