package webhook

import (
	"crypto/sha256"
	"sync"
	"time"
)

type digest = [sha256.Size]byte

// dedup remembers body digests for a window, in insertion order, so expiry
// and eviction both take from the front. Memory is bounded by the entry cap
// (about 100 bytes per entry with map overhead: ~10 MB at 100k). The window
// and the cap are the config's, passed on every check, so a reload applies
// to the next one.
type dedup struct {
	mu      sync.Mutex
	seenAt  map[digest]time.Time
	order   []dedupEntry // insertion order; order[head:] is live
	head    int
	changes uint64 // entries remembered so far, for savers to see a change
}

type dedupEntry struct {
	key digest
	at  time.Time
}

func newDedup() *dedup {
	return &dedup{seenAt: make(map[digest]time.Time)}
}

// checkAndRemember reports whether key was remembered within window; when
// it was not and remember is true, it is remembered from now on, evicting
// the oldest past maxEntries. One call under one lock, so two concurrent
// copies of a body cannot both pass.
func (d *dedup) checkAndRemember(key digest, now time.Time, remember bool, window time.Duration, maxEntries int) (seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prune(now, window, maxEntries)
	if _, ok := d.seenAt[key]; ok {
		return true
	}
	if remember {
		if len(d.seenAt) >= maxEntries {
			d.popFront()
		}
		d.seenAt[key] = now
		d.order = append(d.order, dedupEntry{key: key, at: now})
		d.changes++
	}
	return false
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

// Remembered is one body the receiver remembers having accepted.
type Remembered struct {
	Digest [sha256.Size]byte
	At     time.Time
}

// Remembered returns the bodies remembered, oldest first, and a count that
// grows with every body remembered, so a saver can tell whether anything
// changed. Entries past the window are dropped at the next check.
func (h *Handler) Remembered() ([]Remembered, uint64) {
	d := h.dedup
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Remembered, 0, len(d.order)-d.head)
	for _, e := range d.order[d.head:] {
		out = append(out, Remembered{Digest: e.key, At: e.at})
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
func (h *Handler) Restore(entries []Remembered) {
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
