// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"slices"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// An alert this replica passed to the store leaves its journal only once
// this replica applied it: the store confirming the entry is not enough,
// for a store that restarts without persistence (or from an older save,
// or fails over to a replica that lacked it) may lose the entry before
// any replica read it back. Until then the alert is in mine, and no local
// snapshot is written (Exporter.cutState: keep), so its journal record
// stays. Normally the stream brings it back within a millisecond (the
// store's client reads at once after a publish). When the store lost it,
// this replica applies it from mine, in the stream's order where it can:
//
//   - an event applied after it: the stream is read in order, so an own
//     alert before it that it did not bring is gone (applyLostBefore);
//   - a round finds the stream never gave its ID (an emptied store, or
//     one restarted from an older save), once this replica has read all
//     the stream holds (settleLost);
//   - the stream brought events past it before the store's answer named
//     its ID (keepMine).
//
// Its state then holds the alert and its position is at least the
// alert's ID: the store lost events this replica holds, and the lineage
// rule (converge.go) settles the replicas on the one holding the most,
// which carries the alert to the others.

// mineSet is this replica's alerts the store added and this replica has
// not applied yet, by event ID, and their IDs in order (at most maxMine).
// Under replicas.applying.
type mineSet struct {
	alerts map[string]watchlist.AcceptedAlert
	order  []string // IDs in stream order; some may have left alerts
	// applied is this replica's own alert events the stream brought
	// while their publish had not returned yet: keepMine tells them from
	// lost ones.
	applied map[string]bool
	// epoch counts resets: a state replaced meanwhile (a resync) may hold
	// what the stream passed, so keepMine takes nothing for lost then.
	epoch uint64
}

func newMineSet() mineSet {
	return mineSet{alerts: map[string]watchlist.AcceptedAlert{}, applied: map[string]bool{}}
}

func (m *mineSet) add(id string, a watchlist.AcceptedAlert) {
	if len(m.alerts) >= maxMine {
		m.reset()
	}
	if len(m.order) >= maxMine {
		// IDs applied behind one that waits: keep those held only.
		m.order = slices.DeleteFunc(m.order, func(id string) bool { return !m.has(id) })
	}
	m.alerts[id] = a
	at, _ := slices.BinarySearchFunc(m.order, id, compareIDs)
	m.order = slices.Insert(m.order, at, id)
}

// take removes id's alert, if held.
func (m *mineSet) take(id string) (watchlist.AcceptedAlert, bool) {
	a, ok := m.alerts[id]
	if ok {
		delete(m.alerts, id)
		m.trim()
	}
	return a, ok
}

// trim drops the IDs at the front that left alerts.
func (m *mineSet) trim() {
	n := 0
	for n < len(m.order) && !m.has(m.order[n]) {
		n++
	}
	m.order = m.order[n:]
	if len(m.order) == 0 {
		m.order = nil
	}
}

func (m *mineSet) has(id string) bool { _, ok := m.alerts[id]; return ok }

// first is the lowest ID held, "" when none.
func (m *mineSet) first() string {
	m.trim()
	if len(m.order) == 0 {
		return ""
	}
	return m.order[0]
}

func (m *mineSet) reset() {
	clear(m.alerts)
	clear(m.applied)
	m.order = nil
	m.epoch++
}

// mineEpoch is where mine's resets are, for keepMine.
func (r *replicas) mineEpoch() uint64 {
	r.applying.Lock()
	defer r.applying.Unlock()
	return r.mine.epoch
}

// ids is a copy of the IDs held, in order.
func (m *mineSet) ids() []string {
	m.trim()
	return slices.Clone(m.order)
}

func compareIDs(a, b string) int {
	switch {
	case sharedstore.Before(a, b):
		return -1
	case sharedstore.Before(b, a):
		return 1
	}
	return 0
}

// applyLostBefore applies, from mine, this replica's alerts before id that
// the stream passed without bringing. Called with applying held.
func (r *replicas) applyLostBefore(id string) {
	for first := r.mine.first(); first != "" && sharedstore.Before(first, id); first = r.mine.first() {
		r.applyLost(first)
	}
}

// applyLost applies this replica's alert of event id from mine: the store
// lost the entry before this replica read it back. The position moves to
// it when it is past it. Called with applying held.
func (r *replicas) applyLost(id string) {
	prev := r.last
	if sharedstore.After(id, r.last) {
		r.last = id
	}
	r.applyAlert(sharedstore.Event{ID: id, Kind: eventAlert, Origin: r.name}, prev, time.Now())
	if suppressed, ok := r.logs.Allow("lost"); ok {
		level.Warn(r.logger).Log("msg", "The store lost an alert it had confirmed to this replica before the stream brought it back; applied from this replica's memory, and carried to the others by the lineage that holds the most", "id", id, ratelog.SuppressedKey, suppressed)
	}
}

// settleLost applies, from mine, this replica's alerts among held (taken
// before head was read) whose IDs the stream never gave as head shows
// them: the store lost them. It waits until this replica read all the
// stream holds, so that they come after every event before them. It
// reports whether it applied any. Called with applying held.
func (r *replicas) settleLost(held []string, head sharedstore.Head) bool {
	given := head.LastGiven
	if !head.Stream {
		given = "0-0"
	}
	if sharedstore.Before(orZero(r.last), given) {
		return false
	}
	applied := false
	for _, id := range held {
		if r.mine.has(id) && sharedstore.After(id, given) {
			r.applyLost(id)
			applied = true
		}
	}
	return applied
}

// settleLostAt is round's settleLost: the position to go on with, last
// or the last alert settleLost applied.
func (r *replicas) settleLostAt(held []string, head sharedstore.Head, last string) string {
	if len(held) == 0 {
		return last
	}
	r.applying.Lock()
	defer r.applying.Unlock()
	if r.settleLost(held, head) {
		return r.last
	}
	return last
}

// maxMine bounds mine: an event the stream never brings back (trimmed
// past while this replica was cut off) would otherwise stay.
const maxMine = 10_000

// keepMine keeps the alerts the store added that the stream has not
// brought back yet, so that apply takes them as they are. One the stream
// passed already without bringing it is applied now (applyLost), unless
// the state was replaced since epoch (mineEpoch before the publish).
func (r *replicas) keepMine(batch []forwarded, ids []string, epoch uint64) {
	r.applying.Lock()
	defer r.applying.Unlock()
	for i, id := range ids {
		if id != "" {
			r.own.add(id, batch[i].alert)
		}
		switch {
		case id == "" || r.mine.applied[id]:
			continue // a duplicate, or applied already (decoded)
		case sharedstore.After(id, r.last):
			r.mine.add(id, batch[i].alert)
		case r.mine.epoch == epoch:
			r.mine.add(id, batch[i].alert)
			r.applyLost(id)
		default:
			// The state was replaced meanwhile: whether it counts the
			// alert is reforward's to find out.
			r.own.check = true
		}
	}
	clear(r.mine.applied)
}

// unapplied reports whether this replica's alerts the store confirmed
// wait to be applied here. Called with applying held.
func (r *replicas) unapplied() bool { return r.mine.first() != "" }
