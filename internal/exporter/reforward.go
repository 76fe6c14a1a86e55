// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// When the store loses events (a FLUSHALL, a restart from an older save,
// a failover to a replica that lacked them), the replicas hold different
// parts of what it had: one read an entry just before the loss and
// another had not yet; one's own alert was confirmed and lost before any
// other read it. The lineage rule (converge.go) settles them on one
// replica's state, and the others load it in place of theirs (a resync).
// For the events of the API that is right: an answer a state lacks is
// asked again. For an alert it is not: it was answered 204 once, and
// nobody sends it again.
//
// So a replica keeps its own alerts the store confirmed lately (ownAlerts,
// the last appliedWindow), and after a resync, once it has read the
// stream up to its end again, passes to the store again, once, each one
// the loaded state does not count: its digest is not among the state's
// applied digests (applied.go), which the checkpoint carries, and it is
// newer than their horizon, before which the state may have forgotten
// what it counted. Every replica then applies it from the stream once;
// one whose state counts it already skips it as a copy. Alerts of a
// replica that stopped before the resync are not passed again: the
// limit docs/replicas.md states.

// maxOwn bounds ownAlerts (about 500 bytes each): at 10,000 alerts in
// less than appliedWindow, the oldest of them are not passed again after
// a resync (docs/replicas.md says so).
const maxOwn = 10_000

// ownAlerts is this replica's alerts the store confirmed, with the IDs it
// gave them, oldest first: those of the last appliedWindow, at most
// maxOwn. check: a state was loaded in place of this replica's since
// reforward last looked. Under replicas.applying.
type ownAlerts struct {
	list  []ownAlert
	check bool
}

type ownAlert struct {
	id    string
	at    eventID // id's numbers, compared at every add
	alert watchlist.AcceptedAlert
}

func (o *ownAlerts) add(id string, a watchlist.AcceptedAlert) {
	at := idOf(id)
	cutoff := at.windowStart()
	n := 0
	for n < len(o.list) && cutoff.after(o.list[n].at) {
		n++
	}
	o.drop(n)
	if len(o.list) >= maxOwn {
		o.drop(len(o.list) - maxOwn + 1)
	}
	o.list = append(o.list, ownAlert{id: id, at: at, alert: a})
}

// drop forgets the n oldest, copying the rest to the front only when
// they are fewer than those dropped: amortised, no copy per alert.
func (o *ownAlerts) drop(n int) {
	if n == 0 {
		return
	}
	if rest := len(o.list) - n; rest < n {
		copy(o.list, o.list[n:])
		clear(o.list[rest:])
		o.list = o.list[:rest]
		return
	}
	clear(o.list[:n])
	o.list = o.list[n:]
}

// reforward passes again this replica's own alerts that its state, loaded
// from a checkpoint since it last looked, does not count, once it holds
// every event of the store's stream (head): until then the stream may
// still bring them. A synced round calls it.
func (r *replicas) reforward(head sharedstore.Head) {
	r.applying.Lock()
	if !r.own.check || sharedstore.Before(r.last, head.Last) {
		r.applying.Unlock()
		return
	}
	r.own.check = false
	held := make(map[string]bool, len(r.held.alerts))
	for _, h := range r.held.alerts {
		held[h.id] = true
	}
	var again []forwarded
	kept := r.own.list[:0]
	for _, o := range r.own.list {
		switch {
		case r.applied.has(o.alert.Digest), r.applied.mayCount(o.id), r.mine.has(o.id), held[o.id]:
			// Counted; or maybe counted, and forgotten; or published
			// since the state was loaded, which the stream brings; or
			// held through the resync for an address not watched yet,
			// counted when its hold ends (unwatched.go).
			kept = append(kept, o)
		default:
			again = append(again, forwarded{alert: o.alert, again: true})
		}
	}
	clear(r.own.list[len(kept):])
	r.own.list = kept // those passed again come back with their new IDs
	r.applying.Unlock()
	if len(again) == 0 {
		return
	}
	r.push(again...)
	level.Warn(r.logger).Log("msg", "The state loaded from the store's checkpoint lacks alerts this replica accepted (the store lost them before that state's writer read them); passing them to the store again", "alerts", len(again))
}
