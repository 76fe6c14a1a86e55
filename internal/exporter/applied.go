// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"crypto/sha256"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
)

// maxApplied bounds appliedDigests: about 2 MB. A copy of an entry older
// than the last maxApplied alerts applied is not recognised.
const maxApplied = 20_000

// appliedDigests is the digests of the alerts this replica applied from
// the stream since its state was last replaced, the newest maxApplied. An
// alert entry whose digest is among them is a copy, counted once already:
// the same body published again after the store lost its seen: key (a
// retry, a journal replayed after a crash), or an entry copied whole by
// someone who can write to the store, whose signature verifies all the
// same. A checkpoint that replaces the state may not hold what they
// counted, so they go with it (reset, beside mine's). Under
// replicas.applying.
type appliedDigests struct {
	set   map[[sha256.Size]byte]struct{}
	order [][sha256.Size]byte // a ring of set's members, oldest at next
	next  int
}

// add reports whether d is new, and keeps it.
func (a *appliedDigests) add(d [sha256.Size]byte) bool {
	if a.set == nil {
		a.set = map[[sha256.Size]byte]struct{}{}
	}
	if _, ok := a.set[d]; ok {
		return false
	}
	if len(a.order) < maxApplied {
		a.order = append(a.order, d)
	} else {
		delete(a.set, a.order[a.next])
		a.order[a.next] = d
		a.next = (a.next + 1) % maxApplied
	}
	a.set[d] = struct{}{}
	return true
}

func (a *appliedDigests) reset() {
	clear(a.set)
	a.order, a.next = nil, 0
}

// copied counts and logs (at most once a minute) an alert entry skipped
// as a copy of one applied already.
func (r *replicas) copied(ev sharedstore.Event) {
	r.dropped.Inc()
	if suppressed, ok := r.logs.Allow("copied"); ok {
		level.Warn(r.logger).Log("msg", "Skipped an alert entry of the store that copies one this replica applied already: counted once", "id", breach.LabelValue(ev.ID, breach.MaxValueBytes), ratelog.SuppressedKey, suppressed)
	}
}
