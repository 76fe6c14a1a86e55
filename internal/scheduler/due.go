// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"container/heap"
	"math"
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
	x.waiting.by, x.ready.by, x.urgent.by, x.held.by = byDue, byRead, byTicket, byDeferral
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
			it.in.remove(it)
			delete(x.byKey, k)
			x.gone = append(x.gone, k)
		}
		return
	}
	if it == nil {
		it = &dueItem{key: k}
		x.byKey[k] = it
	} else {
		it.in.remove(it)
	}
	it.sch = sch
	x.place(it, now).push(it)
}

// deferUntil holds an address until until: another replica's claim holds
// it.
func (x *dueIndex) deferUntil(k string, until, now time.Time) {
	if it := x.byKey[k]; it != nil {
		it.in.remove(it)
		it.deferred = until
		x.place(it, now).push(it)
	}
}

// place computes its due time and returns the heap it belongs in as of
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
			it := h.slots[0].it
			to := x.place(it, now)
			if to == h {
				break
			}
			h.remove(it)
			to.push(it)
		}
	}
}

// rebuild places every address again: they were read again, or the
// interval changed.
func (x *dueIndex) rebuild(now time.Time) {
	heaps := []*dueHeap{&x.waiting, &x.ready, &x.urgent, &x.held}
	for _, h := range heaps {
		h.slots = h.slots[:0]
	}
	for _, it := range x.byKey {
		h := x.place(it, now)
		it.in, it.pos = h, len(h.slots)
		h.slots = append(h.slots, h.slotOf(it))
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
	return x.urgent.slots[0].it.key, true
}

// firstHeld is the held refresh that may be tried again first, and when.
func (x *dueIndex) firstHeld() (string, time.Time, bool) {
	if x.held.Len() == 0 {
		return "", time.Time{}, false
	}
	it := x.held.slots[0].it
	return it.key, it.deferred, true
}

// oldest is the address to read next, and when it may go (not before
// earliest): a due one least recently attempted, or else the one due first.
func (x *dueIndex) oldest(earliest time.Time) (string, time.Time, bool) {
	if x.ready.Len() > 0 {
		return x.ready.slots[0].it.key, earliest, true
	}
	if x.waiting.Len() > 0 {
		it := x.waiting.slots[0].it
		return it.key, later(earliest, it.due), true
	}
	return "", time.Time{}, false
}

// dueHeap is a container/heap of index items that know their place. Each
// slot holds its item's sort keys, so that sifting through a heap of
// 100,000 reads one array rather than 100,000 items scattered in memory.
type dueHeap struct {
	slots []dueSlot
	by    dueOrder
}

type dueSlot struct {
	keys [3]int64 // compared in order
	it   *dueItem
}

// dueOrder says what a heap's slots are sorted by.
type dueOrder int

const (
	byDue      dueOrder = iota // when due, then as byRead
	byRead                     // least recently attempted, then order added
	byTicket                   // the refresh asked for first
	byDeferral                 // the deferral that ends first
)

func (h *dueHeap) slotOf(it *dueItem) dueSlot {
	read := [3]int64{nanos(it.sch.LastAttempt), int64(it.sch.Order)}
	switch h.by {
	case byDue:
		return dueSlot{[3]int64{nanos(it.due), read[0], read[1]}, it}
	case byRead:
		return dueSlot{read, it}
	case byTicket:
		return dueSlot{[3]int64{int64(it.sch.Urgent)}, it}
	default:
		return dueSlot{[3]int64{nanos(it.deferred)}, it}
	}
}

// nanos orders times as Before does; the zero time (never) first.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

func (h *dueHeap) push(it *dueItem)   { heap.Push(h, h.slotOf(it)) }
func (h *dueHeap) remove(it *dueItem) { heap.Remove(h, it.pos) }

func (h *dueHeap) Len() int { return len(h.slots) }
func (h *dueHeap) Less(i, j int) bool {
	a, b := &h.slots[i].keys, &h.slots[j].keys
	if a[0] != b[0] {
		return a[0] < b[0]
	}
	if a[1] != b[1] {
		return a[1] < b[1]
	}
	return a[2] < b[2]
}

func (h *dueHeap) Swap(i, j int) {
	h.slots[i], h.slots[j] = h.slots[j], h.slots[i]
	h.slots[i].it.pos, h.slots[j].it.pos = i, j
}

func (h *dueHeap) Push(v any) {
	sl := v.(dueSlot)
	sl.it.in, sl.it.pos = h, len(h.slots)
	h.slots = append(h.slots, sl)
}

func (h *dueHeap) Pop() any {
	n := len(h.slots) - 1
	sl := h.slots[n]
	h.slots[n] = dueSlot{}
	h.slots = h.slots[:n]
	return sl
}
