// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
)

// Counting each body accepted once across the replicas. The store answers
// that an alert a replica passes is a duplicate when it holds the body
// already: another replica added it first (counted accepted there), or
// this replica's own folder did, in a try whose answer was lost (a
// timeout, then the retry) or by the process before a crash, which counted
// it in counts the crash lost, and now replays it from the journal. The
// stream tells which: an alert event's origin carries the folder mark of
// the replica that added it (replicaName). So a duplicate answer counts
// accepted when an alert event of this folder holds the body, and
// duplicate when none shows up within dupWait. The sum of
// breach_webhook_requests_total{outcome="accepted"} over the replicas
// then counts each body once, through timeouts, restarts and crashes.

const (
	// dupWait is how long a duplicate answer waits for this folder's event
	// of the body before it counts as a duplicate.
	dupWait = 5 * time.Second
	// maxOwnAdded bounds the bodies remembered as this folder's.
	maxOwnAdded = 10_000
)

// dupAccount decides the duplicate answers.
type dupAccount struct {
	mu       sync.Mutex
	own      map[[sha256.Size]byte]bool      // bodies of this folder's alert events
	awaiting map[[sha256.Size]byte]time.Time // duplicate answers not decided yet
	since    string                          // the local snapshot's stream position: a replay's alerts come after it
	replayed bool                            // the journal replayed alerts at start
}

// ownEvent notes an alert event of this folder, and reports whether a
// duplicate answer for it waited: it counts accepted then.
func (p *dupAccount) ownEvent(digest [sha256.Size]byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.awaiting[digest]; ok {
		delete(p.awaiting, digest)
		return true
	}
	if p.own == nil || len(p.own) >= maxOwnAdded {
		p.own = map[[sha256.Size]byte]bool{}
	}
	p.own[digest] = true
	return false
}

// duplicate takes a duplicate answer: true when it counts accepted at once
// (this folder's event of it was seen), false when it waits.
func (p *dupAccount) duplicate(digest [sha256.Size]byte, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own[digest] {
		delete(p.own, digest)
		return true
	}
	if p.awaiting == nil {
		p.awaiting = map[[sha256.Size]byte]time.Time{}
	}
	p.awaiting[digest] = now
	return false
}

// expired returns how many duplicate answers waited past dupWait, and
// forgets them.
func (p *dupAccount) expired(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for d, at := range p.awaiting {
		if now.Sub(at) >= dupWait {
			delete(p.awaiting, d)
			n++
		}
	}
	return n
}

// counted passes the store's answer for one forwarded alert to the
// receiver's counts.
func (r *replicas) counted(id string, digest [sha256.Size]byte) {
	if r.hook == nil {
		return
	}
	if id != "" || r.dups.duplicate(digest, time.Now()) {
		r.hook.Forwarded(true)
	}
}

// inspect notes an alert event of this folder.
func (r *replicas) inspect(ev sharedstore.Event, digest [sha256.Size]byte) {
	if markOf(ev.Origin) == "" || markOf(ev.Origin) != markOf(r.name) {
		return
	}
	if r.dups.ownEvent(digest) && r.hook != nil {
		r.hook.Forwarded(true)
	}
}

// settleDuplicates counts the duplicate answers that waited long enough.
func (r *replicas) settleDuplicates() {
	if r.hook == nil {
		return
	}
	for range r.dups.expired(time.Now()) {
		r.hook.Forwarded(false)
	}
}

// scanReplayed reads the alert events from the local snapshot's position
// up to the start state's (after), which catching up does not apply, for
// the replayed alerts an earlier process on this folder added. The rest
// are seen as they are applied.
func (r *replicas) scanReplayed(ctx context.Context, after string) {
	if !r.dups.replayed || (r.dups.since != "" && !sharedstore.Before(r.dups.since, after)) {
		return
	}
	now := time.Now()
	_, err := r.shared.Read(ctx, orZero(r.dups.since), orZero(after), func(ev sharedstore.Event) {
		if ev.Kind != eventAlert || len(ev.Data) > maxEventBytes {
			return
		}
		if a, err := decodeAlert(ev.Data, now); err == nil {
			r.inspect(ev, a.Digest)
		}
	})
	if err != nil {
		level.Warn(r.logger).Log("msg", "Could not read which replayed alerts this folder's last process passed to the store; they count as duplicates", "err", err)
	}
}
