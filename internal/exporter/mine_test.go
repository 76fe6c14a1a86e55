// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// An alert the store confirmed and then lost before any replica read it
// back (the store emptied right after the publish's answer, before any
// other command of the replica reached it) is applied by the replica that
// accepted it, from its memory, and carried by its lineage: a replica that
// starts from the store afterwards counts it too. Before, no replica ever
// applied it: the one that accepted it counted 1 of 2 for good, and so did
// every replica that started later.
func TestAlertTheStoreLostBeforeItWasReadBackIsKept(t *testing.T) {
	s := newStoreSetup(t)
	one, l := s.linked(t, "one", time.Second)
	s.verified(t, one)
	alertsCounted(t, one, "a@example.com", 0, 1) // the publish's script is loaded
	ctx := context.Background()
	flushed := make(chan error, 1)
	l.onSent(func(chunk []byte) {
		if !bytes.Contains(chunk, []byte("breach_exporter:seen:")) {
			return
		}
		l.sent = nil // once (sent runs with l.sending held)
		flushed <- s.emptyOnceAdded(ctx, 2)
	})
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
			return s.redis.FlushAll(ctx).Err()
		case time.Now().After(deadline):
			return fmt.Errorf("the store holds %d seen keys after 5 s, want %d", len(keys), n)
		}
		time.Sleep(time.Millisecond) // polls the store, which the relay holds nothing of
	}
}
