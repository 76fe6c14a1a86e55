// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// fakeShared stands in for the store: a budget spaced on the fake clock,
// and claims that another replica may hold.
type fakeShared struct {
	clock clockwork.Clock

	mu       sync.Mutex
	tat      time.Time
	reserves int
	held     map[string]bool // items another replica holds
}

func (f *fakeShared) Reserve(_ context.Context, _ string, spacing time.Duration) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	slot := later(f.tat, now)
	f.tat = slot.Add(spacing)
	f.reserves++
	return slot.Sub(now), nil
}

func (f *fakeShared) Pause(context.Context, string, time.Duration) error { return nil }

func (f *fakeShared) Claim(_ context.Context, _, item string, _ time.Duration, _ bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.held[item], nil
}

func (f *fakeShared) Release(context.Context, string, string, time.Duration) error { return nil }

func (f *fakeShared) hold(email string, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[itemOf(job{key: breach.Key(email)})] = held
}

// A refresh of an address another replica holds (its read in flight, or
// the replica dead with its lease running) waits for that claim while this
// replica goes on with the other due reads, and is read once the claim is
// gone.
func TestSharedRefreshHeldElsewhereDoesNotStall(t *testing.T) {
	h := newHarness(t, Settings{Addresses: emails(100), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	shared := &fakeShared{clock: h.clock, held: map[string]bool{}}
	h.s.shared = shared
	h.start().advance(5 * time.Second)

	const alerted = "user000@example.com"
	shared.hold(alerted, true)
	h.reg.Refresh(alerted) // Run waits for its slot: no re-plan to wait for
	before := len(h.api.log())
	h.advance(20 * time.Second)
	if n := len(h.api.log()) - before; n < 15 {
		t.Fatalf("%d reads in the 20 s another replica held the refreshed address, want the others read meanwhile", n)
	}

	shared.hold(alerted, false)
	h.advance(10 * time.Second)
	if n := len(h.api.callsTo(alerted)); n != 2 {
		t.Fatalf("the refreshed address was read %d times, want again once the other replica's claim is gone", n)
	}
}
