// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"crypto/sha256"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// A replica that loads the store's checkpoint in place of its state (a
// resync: another lineage won, or a gap) drops what its state held that
// the checkpoint does not. For the events of others that is right: the
// checkpoint's lineage is the one the replicas settle on. For this
// replica's own alerts it is not: it answered 204 for them, and when the
// store lost their entries (an emptied store, an older save) before the
// checkpoint's writer read them, no replica counts them any more. So the
// resync passes them to the store again, once: those in mine (confirmed,
// not applied yet) and those it applied lately (recent), unless the
// checkpoint's duplicate memory (persist.State.Seen, the writer's
// remembered webhook digests) holds their digest: the writer counted
// them already. That memory may be empty in a checkpoint, so the store's
// answer decides the rest: a re-sent alert whose seen key survived is
// answered with its entry's ID, which, after the position loaded, the
// stream brings or keepMine applies once, and at or before it the loaded
// state's writer read (keepMine skips it); one whose key is gone with
// its entry is added anew, and every replica applies it. Its
// 204 was counted when it was first passed (forwarded.again).

// recentOwn is this replica's alerts it applied lately, oldest first, at
// most maxMine: what a resync checks against the loaded checkpoint.
// Under replicas.applying.
type recentOwn struct {
	alerts []watchlist.AcceptedAlert
}

func (o *recentOwn) add(a watchlist.AcceptedAlert) {
	if len(o.alerts) >= maxMine {
		o.alerts = o.alerts[len(o.alerts)-maxMine/2:] // amortised: no copy per alert
	}
	o.alerts = append(o.alerts, a)
}

func (o *recentOwn) reset() { o.alerts = nil }

// notHeld is this replica's own alerts (applied lately, then those in
// mine in stream order) that a loaded state whose duplicate memory is
// seen does not hold, once each, accepted within ttl of now (older ones
// the checkpoint's memory may have forgotten: sending them again could
// count them twice). Called with applying held, before mine's reset.
func (r *replicas) notHeld(seen []breach.RememberedWebhook, ttl time.Duration, now time.Time) []watchlist.AcceptedAlert {
	held := make(map[[sha256.Size]byte]bool, len(seen))
	for _, s := range seen {
		held[s.Digest] = true
	}
	var out []watchlist.AcceptedAlert
	keep := func(a watchlist.AcceptedAlert) {
		if !held[a.Digest] && now.Sub(a.At) < ttl {
			held[a.Digest] = true
			out = append(out, a)
		}
	}
	for _, a := range r.recent.alerts {
		keep(a)
	}
	for _, id := range r.mine.ids() {
		keep(r.mine.alerts[id])
	}
	return out
}

// reforward passes again alerts a resync dropped (notHeld's).
func (r *replicas) reforward(again []watchlist.AcceptedAlert) {
	if len(again) == 0 {
		return
	}
	fs := make([]forwarded, len(again))
	for i, a := range again {
		fs[i] = forwarded{alert: a, again: true}
	}
	r.push(fs...)
	level.Warn(r.logger).Log("msg", "The store's checkpoint loaded in place of this replica's state lacks alerts this replica accepted (the store lost them before its writer read them); passing them to the store again", "alerts", len(again))
}
