// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

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
		if bytes.Contains(bytes.ToLower(chunk), []byte("xread")) {
			<-reads // one does not read its alert back
		}
	}, nil)
	linkOne.cut(true) // no read of the stream left waiting in the store
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

// notHeld takes this replica's own alerts, applied lately or in mine,
// that the loaded state's duplicate memory lacks, each once, and none
// older than the memory's window.
func TestNotHeldSkipsWhatTheCheckpointCounted(t *testing.T) {
	r := applier(t)
	now := time.Now()
	alert := func(b byte, at time.Time) watchlist.AcceptedAlert {
		return watchlist.AcceptedAlert{Digest: [32]byte{b}, At: at}
	}
	r.recent.add(alert(1, now))                   // counted by the checkpoint's writer
	r.recent.add(alert(2, now))                   // lost
	r.recent.add(alert(3, now.Add(-2*time.Hour))) // past the window
	r.mine.add("9-0", alert(4, now))
	r.mine.add("8-0", alert(2, now)) // the same body again
	got := r.notHeld([]breach.RememberedWebhook{{Digest: [32]byte{1}, At: now}}, time.Hour, now)
	if len(got) != 2 || got[0].Digest[0] != 2 || got[1].Digest[0] != 4 {
		t.Errorf("passed again %v, want the alerts 2 and 4", got)
	}
}

// An alert passed again that the store answers with an entry at or
// before the position loaded is the loaded state's already: not applied
// again; one after it waits for the stream.
func TestAlertPassedAgainIsNotAppliedTwice(t *testing.T) {
	r := applier(t)
	r.name = "me"
	r.last = "10-0"
	r.keepMine([]forwarded{{again: true}, {again: true}}, []string{"9-0", "11-0"}, r.mineEpoch())
	if len(r.recent.alerts) != 0 || r.mine.has("9-0") || !r.mine.has("11-0") {
		t.Errorf("applied %d, 9-0 held %v, 11-0 held %v; want none applied, 11-0 held", len(r.recent.alerts), r.mine.has("9-0"), r.mine.has("11-0"))
	}
}
