package webhook

import (
	"crypto/sha256"
	"sync"
	"time"
)

type digest = [sha256.Size]byte

// dedup remembers body digests for a window, in insertion order, so expiry
// and eviction both take from the front. Memory is bounded by maxEntries
// (about 100 bytes per entry with map overhead: ~10 MB at 100k).
type dedup struct {
	mu      sync.Mutex
	seenAt  map[digest]time.Time
	order   []dedupEntry // insertion order; order[head:] is live
	head    int
	window  time.Duration
	maximum int
}

type dedupEntry struct {
	key digest
	at  time.Time
}

func newDedup(window time.Duration, maxEntries int) *dedup {
	return &dedup{seenAt: make(map[digest]time.Time), window: window, maximum: maxEntries}
}

// resize applies new limits, expiring or evicting at once what they exclude.
func (d *dedup) resize(window time.Duration, maxEntries int, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.window, d.maximum = window, maxEntries
	d.prune(now)
}

// checkAndRemember reports whether key was remembered within the window;
// when it was not and remember is true, it is remembered from now on. One
// call under one lock, so two concurrent copies of a body cannot both pass.
func (d *dedup) checkAndRemember(key digest, now time.Time, remember bool) (seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prune(now)
	if _, ok := d.seenAt[key]; ok {
		return true
	}
	if remember {
		if len(d.seenAt) >= d.maximum {
			d.popFront()
		}
		d.seenAt[key] = now
		d.order = append(d.order, dedupEntry{key: key, at: now})
	}
	return false
}

func (d *dedup) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.seenAt)
}

// prune drops expired entries and, after a shrink, the oldest over the cap.
// Entries are appended with the clock's time under the lock, so the front
// is always the oldest.
func (d *dedup) prune(now time.Time) {
	for d.head < len(d.order) {
		front := d.order[d.head]
		if now.Sub(front.at) < d.window && len(d.seenAt) <= d.maximum {
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
