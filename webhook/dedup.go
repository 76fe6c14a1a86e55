// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

type digest = [sha256.Size]byte

// dedup remembers body digests for a window, in insertion order, so expiry
// and eviction both take from the front. Memory is bounded by the entry cap
// (about 100 bytes per entry with map overhead: ~10 MB at 100k). The window
// and the cap are the config's, passed on every check, so a reload applies
// to the next one.
type dedup struct {
	mu     sync.Mutex
	seenAt map[digest]time.Time
	// pending holds bodies accepted but not yet durable: a copy arriving
	// meanwhile is a duplicate, a snapshot does not hold them, and a failed
	// commit forgets them so the sender's retry is accepted.
	pending map[digest]struct{}
	order   []dedupEntry // insertion order; order[head:] is live
	head    int
	changes uint64 // entries remembered so far, for savers to see a change
}

type dedupEntry struct {
	key digest
	at  time.Time
}

func newDedup() *dedup {
	return &dedup{seenAt: make(map[digest]time.Time), pending: make(map[digest]struct{})}
}

// check reports whether key was remembered within window or is pending;
// when it was not and reserve is true, it is pending from now on, until
// remember or release. One call under one lock, so two concurrent copies
// of a body cannot both pass.
func (d *dedup) check(key digest, now time.Time, reserve bool, window time.Duration, maxEntries int) (seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prune(now, window, maxEntries)
	if _, ok := d.seenAt[key]; ok {
		return true
	}
	if _, ok := d.pending[key]; ok {
		return true
	}
	if reserve {
		d.pending[key] = struct{}{}
	}
	return false
}

// remember moves key from pending (if there) to the memory, evicting the
// oldest past maxEntries.
func (d *dedup) remember(key digest, at time.Time, maxEntries int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, key)
	if _, ok := d.seenAt[key]; ok {
		return
	}
	for len(d.seenAt) >= max(maxEntries, 1) {
		d.popFront()
	}
	d.seenAt[key] = at
	d.order = append(d.order, dedupEntry{key: key, at: at})
	d.changes++
}

// release forgets a pending key whose commit failed.
func (d *dedup) release(key digest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.pending, key)
}

// prune drops expired entries and, after a shrink, the oldest over the cap.
// Entries are appended with the clock's time under the lock, so the front
// is always the oldest.
func (d *dedup) prune(now time.Time, window time.Duration, maxEntries int) {
	for d.head < len(d.order) {
		front := d.order[d.head]
		if now.Sub(front.at) < window && len(d.seenAt) <= maxEntries {
			break
		}
		d.popFront()
	}
}

func (d *dedup) popFront() {
	delete(d.seenAt, d.order[d.head].key)
	d.order[d.head] = dedupEntry{}
	d.head++
	// Reclaim the consumed prefix once it is the larger half, so the slice
	// stays within twice the live entries without copying on every pop.
	if d.head > len(d.order)/2 {
		d.order = append(d.order[:0], d.order[d.head:]...)
		d.head = 0
	}
}

// Remembered returns the bodies remembered, oldest first, and a count that
// grows with every body remembered, so a saver can tell whether anything
// changed. Entries past the window are dropped at the next check.
func (h *Handler) Remembered() ([]breach.RememberedWebhook, uint64) {
	d := h.dedup
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]breach.RememberedWebhook, 0, len(d.order)-d.head)
	for _, e := range d.order[d.head:] {
		out = append(out, breach.RememberedWebhook{Digest: e.key, At: e.at})
	}
	return out, d.changes
}

// RememberedChanges is the count Remembered returns, without copying the
// bodies: a saver checks it first.
func (h *Handler) RememberedChanges() uint64 {
	h.dedup.mu.Lock()
	defer h.dedup.mu.Unlock()
	return h.dedup.changes
}

// Restore remembers bodies accepted before a restart, oldest first, so a
// replay of one after the restart is a duplicate. Call it before serving.
func (h *Handler) Restore(entries []breach.RememberedWebhook) {
	d := h.dedup
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range entries {
		if _, ok := d.seenAt[e.Digest]; ok {
			continue
		}
		d.seenAt[e.Digest] = e.At
		d.order = append(d.order, dedupEntry{key: e.Digest, at: e.At})
	}
}
