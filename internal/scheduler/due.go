// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"container/heap"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// dueIndex is the scheduler's index of its account's addresses by when
// each may go next, kept in step with the watchlist's schedules through
// watchlist.ScheduleChanges. A plan costs O(log n) per change since the one
// before, so a budget slot costs the same at 1,000 and 100,000 addresses;
// only a Sync, a reload that changes refresh.interval, or changes past the
// number of addresses cost a pass over all of them, as they already do in
// the watchlist.
//
// Each address sits in one of four heaps:
//   - waiting: not urgent, not due yet; by the time it becomes due;
//   - ready: not urgent and due (by now); least recently attempted first,
//     as the service should see them;
//   - urgent: refreshes; in the order they were asked for;
//   - held: refreshes another replica's claim holds (replicas only); by
//     when they may be tried again.
//
// Time moves addresses from waiting to ready and from held to urgent, each
// once per change of its schedule.
type dueIndex struct {
	byKey    map[string]*dueItem
	interval time.Duration // the one the due times were computed with
	waiting  dueHeap
	ready    dueHeap
	urgent   dueHeap
	held     dueHeap
	// gone are the addresses removed since takeGone, for the store's
	// ready times (replicas only); reloads counts the reads of every
	// address.
	gone    []string
	reloads int
}

// dueItem is one address in the index.
type dueItem struct {
	key string
	sch watchlist.Schedule
	// deferred: another replica held it when this one tried to claim it;
	// it waits until then (replicas only).
	deferred time.Time
	due      time.Time // when it may be read: readyAt, and deferred
	in       *dueHeap  // the heap that holds it
	pos      int       // its place in in
}

func newDueIndex() *dueIndex {
	x := &dueIndex{byKey: map[string]*dueItem{}}
	x.waiting.less = func(a, b *dueItem) bool {
		if !a.due.Equal(b.due) {
			return a.due.Before(b.due)
		}
		return readBefore(a.sch, b.sch)
	}
	x.ready.less = func(a, b *dueItem) bool { return readBefore(a.sch, b.sch) }
	x.urgent.less = func(a, b *dueItem) bool { return a.sch.Urgent < b.sch.Urgent }
	x.held.less = func(a, b *dueItem) bool { return a.deferred.Before(b.deferred) }
	return x
}

// update takes in the watchlist's changes and what time made due, as of
// now, with interval in force.
func (x *dueIndex) update(w *watchlist.List, account string, interval time.Duration, now time.Time) {
	all := w.ScheduleChanges(account, func(k string, sch watchlist.Schedule, watched bool) {
		x.set(k, sch, watched, now)
	})
	if all {
		x.reload(w, account)
	}
	if all || interval != x.interval {
		x.interval = interval
		x.rebuild(now)
	}
	x.advance(now)
}

// reload reads every address of the account again; those it keeps keep
// their deferral. The caller rebuilds the heaps.
func (x *dueIndex) reload(w *watchlist.List, account string) {
	x.reloads++
	old := x.byKey
	x.byKey = make(map[string]*dueItem, len(old))
	w.Plan(account, func(k string, e *watchlist.Entry) {
		it := old[k]
		if it == nil {
			it = &dueItem{key: k}
		}
		it.sch = e.Schedule
		x.byKey[k] = it
	})
	for k := range old {
		if x.byKey[k] == nil {
			x.gone = append(x.gone, k)
		}
	}
}

// set records an address's schedule, or that it is gone.
func (x *dueIndex) set(k string, sch watchlist.Schedule, watched bool, now time.Time) {
	it := x.byKey[k]
	if !watched {
		if it != nil {
			heap.Remove(it.in, it.pos)
			delete(x.byKey, k)
			x.gone = append(x.gone, k)
		}
		return
	}
	if it == nil {
		it = &dueItem{key: k}
		x.byKey[k] = it
	} else {
		heap.Remove(it.in, it.pos)
	}
	it.sch = sch
	heap.Push(x.place(it, now), it)
}

// defer holds an address until until: another replica's claim holds it.
func (x *dueIndex) deferUntil(k string, until, now time.Time) {
	if it := x.byKey[k]; it != nil {
		heap.Remove(it.in, it.pos)
		it.deferred = until
		heap.Push(x.place(it, now), it)
	}
}

// place computes it's due time and returns the heap it belongs in as of
// now.
func (x *dueIndex) place(it *dueItem, now time.Time) *dueHeap {
	if it.sch.Urgent != 0 {
		if it.deferred.After(now) {
			return &x.held
		}
		return &x.urgent
	}
	it.due = later(readyAt(it.sch, x.interval), it.deferred)
	if it.due.After(now) {
		return &x.waiting
	}
	return &x.ready
}

// advance moves what became due by now: waiting addresses to ready, held
// refreshes to urgent.
func (x *dueIndex) advance(now time.Time) {
	for _, h := range []*dueHeap{&x.waiting, &x.held} {
		for h.Len() > 0 {
			it := h.items[0]
			to := x.place(it, now)
			if to == h {
				break
			}
			heap.Pop(h)
			heap.Push(to, it)
		}
	}
}

// rebuild places every address again: the interval changed.
func (x *dueIndex) rebuild(now time.Time) {
	heaps := []*dueHeap{&x.waiting, &x.ready, &x.urgent, &x.held}
	for _, h := range heaps {
		h.items = h.items[:0]
	}
	for _, it := range x.byKey {
		h := x.place(it, now)
		it.in, it.pos = h, len(h.items)
		h.items = append(h.items, it)
	}
	for _, h := range heaps {
		heap.Init(h)
	}
}

// takeGone returns the addresses removed since the last call.
func (x *dueIndex) takeGone() []string {
	gone := x.gone
	x.gone = nil
	return gone
}

// items are the store's names (itemOf) of every address, and of /me.
func (x *dueIndex) items() map[string]bool {
	items := make(map[string]bool, len(x.byKey)+1)
	items[meItem] = true
	for k := range x.byKey {
		items[itemOf(job{key: k})] = true
	}
	return items
}

// firstUrgent is the refresh asked for first that no claim holds.
func (x *dueIndex) firstUrgent() (string, bool) {
	if x.urgent.Len() == 0 {
		return "", false
	}
	return x.urgent.items[0].key, true
}

// firstHeld is the held refresh that may be tried again first, and when.
func (x *dueIndex) firstHeld() (string, time.Time, bool) {
	if x.held.Len() == 0 {
		return "", time.Time{}, false
	}
	it := x.held.items[0]
	return it.key, it.deferred, true
}

// oldest is the address to read next, and when it may go (not before
// earliest): a due one least recently attempted, or else the one due first.
func (x *dueIndex) oldest(earliest time.Time) (string, time.Time, bool) {
	if x.ready.Len() > 0 {
		return x.ready.items[0].key, earliest, true
	}
	if x.waiting.Len() > 0 {
		it := x.waiting.items[0]
		return it.key, later(earliest, it.due), true
	}
	return "", time.Time{}, false
}

// dueHeap is a container/heap of index items that know their place.
type dueHeap struct {
	items []*dueItem
	less  func(a, b *dueItem) bool
}

func (h *dueHeap) Len() int           { return len(h.items) }
func (h *dueHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *dueHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos, h.items[j].pos = i, j
}

func (h *dueHeap) Push(v any) {
	it := v.(*dueItem)
	it.in, it.pos = h, len(h.items)
	h.items = append(h.items, it)
}

func (h *dueHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	return it
}
