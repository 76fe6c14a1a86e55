// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
)

// maxApplied bounds appliedDigests: about 1 MB. A copy of an entry older
// than the last maxApplied entries applied is not recognised.
const maxApplied = 20_000

// appliedWindow is how far back, in the store's time, the checkpoint
// carries the digests applied (at most maxCheckpointApplied of them), and
// so how far back a replica passes again its own alerts that a state
// loaded in place of its own lacks (reforward.go). The replicas' states
// differ only in the events around a loss of the store's (what one read
// and another had not yet, what was confirmed and lost before anyone
// read it), seconds apart; ten minutes leaves room for a store that
// answers slowly while it reloads.
const appliedWindow = 10 * time.Minute

// maxCheckpointApplied bounds the digests a checkpoint carries: 23 bytes
// each, about 300 KB in the checkpoint's extra at most.
const maxCheckpointApplied = 10_000

// appliedKey is a digest as the memory of applied entries keeps it: 16
// bytes tell 20,000 entries apart with no collision in practice, and
// halve what the checkpoint carries.
type appliedKey [16]byte

func keyOf(d [sha256.Size]byte) appliedKey { return appliedKey(d[:16]) }

// appliedDigests is the digests of the alerts the replica's state counts
// (and of the answers and failures it applied: outcomeDigest), with the
// stream IDs they were applied at, the newest maxApplied. An entry whose
// digest is among them is a copy, applied once already:
// the same body published again after the store lost its seen: key (a
// retry, a journal replayed after a crash, an alert passed again after a
// resync: reforward.go), or an entry copied whole by someone who can
// write to the store, whose signature verifies all the same.
//
// It is part of the replicated state: a checkpoint carries its newest
// part (wire), and a state loaded from one takes it (restore), so that
// every replica skips the same copies, and a replica that loads another's
// state can tell which of its own alerts that state counts. horizon says
// what it may have forgotten: an alert applied at or before it may be
// counted though its digest is not here. Under replicas.applying.
type appliedDigests struct {
	set     map[appliedKey]struct{}
	order   []appliedAt // a ring of set's members, oldest at next
	next    int
	horizon eventID
}

type appliedAt struct {
	key appliedKey
	at  eventID
}

// eventID is a stream ID as its two numbers: the memory compares one for
// every alert it forgets once full, and every member at each checkpoint,
// without formatting or parsing a string. The zero value is none: "" and
// a malformed ID, which sharedstore.After puts before every other, alike.
type eventID struct{ ms, seq uint64 }

func idOf(id string) eventID {
	ms, seq, _ := sharedstore.ParseID(id)
	return eventID{ms, seq}
}

func (e eventID) after(o eventID) bool { return e.ms > o.ms || e.ms == o.ms && e.seq > o.seq }

func (e eventID) String() string {
	if e == (eventID{}) {
		return ""
	}
	return strconv.FormatUint(e.ms, 10) + "-" + strconv.FormatUint(e.seq, 10)
}

// windowStart is the first ID of appliedWindow before e; none when e is
// not that far from the epoch.
func (e eventID) windowStart() eventID {
	w := uint64(appliedWindow.Milliseconds())
	if e.ms < w {
		return eventID{}
	}
	return eventID{ms: e.ms - w}
}

// aheadOf is the first ID of the millisecond as far ahead of now as a
// clock may be: the horizon of a state that may count anything up to now.
func aheadOf(now time.Time) eventID {
	return eventID{ms: uint64(max(now.Add(breach.MaxFutureSkew).UnixMilli(), 0))}
}

// add reports whether d is new, and keeps it as applied at event id.
func (a *appliedDigests) add(d [sha256.Size]byte, id string) bool {
	return a.addKey(keyOf(d), idOf(id))
}

func (a *appliedDigests) addKey(k appliedKey, id eventID) bool {
	if a.set == nil {
		a.set = map[appliedKey]struct{}{}
	}
	if _, ok := a.set[k]; ok {
		return false
	}
	e := appliedAt{key: k, at: id}
	if len(a.order) < maxApplied {
		a.order = append(a.order, e)
	} else {
		old := a.order[a.next]
		delete(a.set, old.key)
		a.forget(old.at)
		a.order[a.next] = e
		a.next = (a.next + 1) % maxApplied
	}
	a.set[k] = struct{}{}
	return true
}

// forget moves the horizon to id when it is past it.
func (a *appliedDigests) forget(id eventID) {
	if id.after(a.horizon) {
		a.horizon = id
	}
}

// has reports whether the state applied the entry of digest d: counted
// it, or holds it for an address not watched yet, or skipped it.
func (a *appliedDigests) has(d [sha256.Size]byte) bool {
	_, ok := a.set[keyOf(d)]
	return ok
}

// mayCount reports whether the state may count an alert applied at event
// id though its digest is not kept: at or before the horizon.
func (a *appliedDigests) mayCount(id string) bool {
	return !idOf(id).after(a.horizon)
}

// oldestFirst calls f with the members, oldest first, until it returns
// false.
func (a *appliedDigests) oldestFirst(f func(appliedAt) bool) {
	for i := range a.order {
		if !f(a.order[(a.next+i)%len(a.order)]) {
			return
		}
	}
}

// appliedWire is the checkpoint's form of appliedDigests: the horizon,
// and per alert, oldest first, its appliedKey and its event ID's
// milliseconds and sequence number as unsigned varints, in base64.
type appliedWire struct {
	After   string `json:"after,omitempty"`
	Entries string `json:"entries,omitempty"`
}

// wire is what a checkpoint at event last carries: the digests applied
// within appliedWindow before it, the newest maxCheckpointApplied; the
// horizon moves past those left out. One applied at an ID past last (a
// stream that went back: a failover to a primary whose clock lags) is
// left out too, since a loader refuses a wire that names an event past
// the checkpoint's.
func (a *appliedDigests) wire(last string) *appliedWire {
	end := idOf(last)
	cutoff := end.windowStart()
	after := a.horizon
	skip := max(len(a.order)-maxCheckpointApplied, 0)
	var buf []byte
	i := 0
	a.oldestFirst(func(e appliedAt) bool {
		i++
		if i <= skip || cutoff.after(e.at) || e.at.after(end) {
			if e.at.after(after) {
				after = e.at
			}
			return true
		}
		buf = append(buf, e.key[:]...)
		buf = binary.AppendUvarint(buf, e.at.ms)
		buf = binary.AppendUvarint(buf, e.at.seq)
		return true
	})
	return &appliedWire{After: after.String(), Entries: base64.StdEncoding.EncodeToString(buf)}
}

// errAppliedWire is a checkpoint's applied digests that cannot be its
// writer's.
var errAppliedWire = errors.New("the checkpoint's applied digests are not well formed")

// restore replaces the memory with that of a state loaded from a
// checkpoint at event at: w, nil in a checkpoint of a release before it.
// w comes from the store: one that is not well formed, names an event
// past the state's, or a horizon past both the state's and this clock's
// reach (which would stop every alert being passed again for good), is
// as none. A state whose digests are not known may count any alert up to
// its position, and one at no position any alert up to now (and as far
// ahead as a clock may be): the horizon says so. w's horizon may lie past
// at (restoreLocal's, written by a replica that started from its own
// snapshot): it only passes fewer alerts again for a while.
func (a *appliedDigests) restore(w *appliedWire, at string, now time.Time) {
	a.empty()
	end := idOf(at)
	if w != nil && validHorizon(w.After, end, now) && a.decode(w, end) == nil {
		a.horizon = idOf(w.After)
		return
	}
	a.empty()
	a.horizon = end
	if end == (eventID{}) {
		a.horizon = aheadOf(now)
	}
}

// restoreLocal starts the memory for a state from this replica's own
// snapshot, which carries no digests, at its position stream: nil, a
// state that counts nothing yet.
func (a *appliedDigests) restoreLocal(local *persist.State, now time.Time) {
	a.empty()
	switch {
	case local == nil:
		a.horizon = eventID{}
	case local.Stream != "":
		a.horizon = idOf(local.Stream)
	default:
		a.horizon = aheadOf(now)
	}
}

func (a *appliedDigests) empty() {
	clear(a.set)
	clear(a.order)
	a.order, a.next = a.order[:0], 0
}

// validHorizon reports whether h could be a horizon of a state at event
// at: none, or a stream ID no later than at or than restoreLocal's.
func validHorizon(h string, at eventID, now time.Time) bool {
	if h == "" {
		return true
	}
	ms, seq, ok := sharedstore.ParseID(h)
	id := eventID{ms, seq}
	return ok && (!id.after(at) || !id.after(aheadOf(now)))
}

func (a *appliedDigests) decode(w *appliedWire, at eventID) error {
	if base64.StdEncoding.DecodedLen(len(w.Entries)) > maxCheckpointApplied*(len(appliedKey{})+2*binary.MaxVarintLen64) {
		return errAppliedWire
	}
	b, err := base64.StdEncoding.DecodeString(w.Entries)
	if err != nil {
		return errAppliedWire
	}
	for len(b) > 0 {
		if len(b) < len(appliedKey{}) {
			return errAppliedWire
		}
		k := appliedKey(b[:len(appliedKey{})])
		b = b[len(appliedKey{}):]
		ms, n := binary.Uvarint(b)
		if n <= 0 {
			return errAppliedWire
		}
		b = b[n:]
		seq, n := binary.Uvarint(b)
		if n <= 0 {
			return errAppliedWire
		}
		b = b[n:]
		id := eventID{ms, seq}
		if id.after(at) || len(a.order) >= maxCheckpointApplied {
			return errAppliedWire
		}
		a.addKey(k, id)
	}
	return nil
}

// outcomeDigest is the digest an answer's or a failure's entry is known
// by among the applied: its kind and data, which hold the request's time
// and so differ for every request. The other outcomes (an account's
// /me, a drop, a rate limit) may legitimately repeat the same data: a
// copy of one of them states again what the API said last.
func outcomeDigest(kind string, data []byte) ([sha256.Size]byte, bool) {
	if kind != eventAnswered && kind != eventFailed {
		return [sha256.Size]byte{}, false
	}
	h := sha256.New()
	h.Write([]byte("outcome\x00" + kind + "\x00"))
	h.Write(data)
	return [sha256.Size]byte(h.Sum(nil)), true
}

// copied counts and logs (at most once a minute) an entry skipped as a
// copy of one applied already.
func (r *replicas) copied(ev sharedstore.Event) {
	r.dropped.Inc()
	if suppressed, ok := r.logs.Allow("copied"); ok {
		level.Warn(r.logger).Log("msg", "Skipped an entry of the store that copies one this replica applied already: applied once", "kind", breach.LabelValue(ev.Kind, breach.MaxValueBytes), "id", breach.LabelValue(ev.ID, breach.MaxValueBytes), ratelog.SuppressedKey, suppressed)
	}
}
