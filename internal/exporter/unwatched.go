// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"slices"
	"time"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Each replica reads its address files on its own, and a change reaches
// them at different moments (a ConfigMap reaches pods one after the
// other): for a while one replica watches an address that another does
// not watch yet. The stream brings the first one's answers and alerts for
// it to every replica. One that does not watch the address holds them
// (bounded), and applies them when its own files bring the address
// (adopt). It then serves the answer at once, rather than "pending" until
// the address's next read a round later, and counts the alert under the
// address as the others did.
//
// Every alert that would count without an address label here (discovery
// off, or its limit reached) is held, whichever replica accepted it, this
// one included, and whether or not an answer for its address came: a new
// address's alert may come before any replica read the address, and
// nothing here tells a new address from one that never comes. The hold
// runs from the alert's acceptance (the same moment on every replica and
// across a restart) for refresh.files_interval plus configSkew; past it
// the address did not come, and the alert counts as it would have at once.
// So an alert for an address nobody watches counts without a label that
// much later, on every replica alike.
//
// What is held is in no state: a checkpoint (and the local snapshot) hold
// the state without the alerts held, and the checkpoint's extra names
// their events (heldExtra). A replica that loads a checkpoint (a start, a
// resync) reads back from the stream (rederive) those events, and the
// alerts of the last hold for the addresses the checkpoint's state counts
// but its own files lack yet (its sync drops them with their counts: the
// writer's files had them first). It applies them as if they came now:
// under the address if its files have it, held otherwise, and not at all
// once their hold is over (it counted them before its restart, or, new,
// counts what comes from now on; its untracked counts are its own).
// Through a resync it keeps what it held (rebaseHeld). So an alert is
// counted once per replica through a restart or a resync, and no
// checkpoint waits for the hold to end (a steady trickle of such alerts
// would hold them back for good). The held answers are not read back:
// the checkpoint's entry for such an address is held in their place
// (holdLoaded), so that a replica that loaded it, at its start or in a
// resync, serves the address's answer at once when its files bring it.

const (
	// maxHeldAnswers and maxHeldAnswerBytes (the events' sizes) bound the
	// answers held, the latest per address: past them the oldest goes
	// (breach_exporter_store_unwatched_answers_dropped_total).
	maxHeldAnswers     = 10_000
	maxHeldAnswerBytes = 16 << 20
	// maxHeldAlerts and maxHeldAlertBytes bound the alerts held: past
	// them the oldest counts as it would have at once
	// (breach_exporter_store_unwatched_alerts_overflow_total).
	maxHeldAlerts     = 10_000
	maxHeldAlertBytes = 16 << 20
	// configSkew is how much later a change of the address files may
	// reach one replica than another: a ConfigMap mounted as a volume is
	// updated at the kubelet's next sync of the pod (--sync-frequency,
	// 1 minute by default) plus its cache's delay (a watch by default:
	// seconds), so pods see it 60-90 s apart. Added to it,
	// refresh.files_interval: a replica reads its files at the latest an
	// interval after they changed, even without a file event.
	configSkew = 2 * time.Minute
)

// held is what the stream brought for addresses this replica does not
// watch. It is the replicas' and used under their applying lock.
type held struct {
	answers     map[string]heldAnswer // by address key: the latest answer
	order       []string              // the keys of answers, oldest first
	answerBytes int
	alerts      []heldAlert // in the stream's order
	alertBytes  int
	// after is the event before the first of alerts: a replica that
	// loads a checkpoint reads them back from there.
	after string
	hold  time.Duration // how long an alert is held, from its acceptance
	// loaded are the addresses of the checkpoint a start loaded, until
	// catchUp reads back what it needs (rederive).
	loaded []watchlist.SavedEntry
	skew   time.Duration // configSkew; shorter in tests
	now    func() time.Time

	dropped  prometheus.Counter
	overflow prometheus.Counter
}

type heldAnswer struct {
	o    outcomeEvent
	size int // of the event's data
}

type heldAlert struct {
	alert watchlist.AcceptedAlert
	id    string // its event's
	after string // the event before it
	mine  bool   // accepted here: applied, it reads the address again
	// counted: the state a checkpoint replaced this replica's with counts
	// it already (rebaseHeld).
	counted bool
	size    int // of the event's data
}

func newHeld() held {
	return held{
		answers: map[string]heldAnswer{},
		hold:    5*time.Minute + configSkew,
		skew:    configSkew,
		now:     time.Now,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_unwatched_answers_dropped_total",
			Help: "Answers the stream brought for addresses this replica does not watch (yet), let go past the limit of 10,000 (or 16 MiB) held: such an address, once watched here, waits for its next read.",
		}),
		overflow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_unwatched_alerts_overflow_total",
			Help: "Alerts the stream brought for addresses this replica does not watch (yet), counted without an address label before their hold ended, past the limit of 10,000 (or 16 MiB) held: if the address comes here, this replica's counts for it lack them.",
		}),
	}
}

// holdAnswer holds an answer (its event's data size bytes) for an address
// this replica does not watch, and reports whether it did. Called with
// applying held.
func (r *replicas) holdAnswer(kind string, o outcomeEvent, size int) bool {
	r.expireHeld()
	if kind != eventAnswered {
		return false
	}
	if _, watched := r.watchlist.ScheduleOf(o.Key); watched {
		return false
	}
	h := &r.held
	if old, ok := h.answers[o.Key]; ok {
		h.answerBytes -= old.size
	} else {
		h.order = append(h.order, o.Key)
	}
	h.answers[o.Key] = heldAnswer{o: o, size: size}
	h.answerBytes += size
	for len(h.answers) > maxHeldAnswers || h.answerBytes > maxHeldAnswerBytes {
		key := h.order[0]
		h.order = h.order[1:]
		if a, ok := h.answers[key]; ok {
			delete(h.answers, key)
			h.answerBytes -= a.size
			h.dropped.Inc()
		}
	}
	return true
}

// holdAlert holds an alert of the stream's event id (its data size bytes;
// after, the event before it) that would count without an address label
// here, until its hold ends; mine tells that this replica accepted it.
// The duplicate memory takes it at once. It reports whether it held the
// alert. Called with applying held.
func (r *replicas) holdAlert(a watchlist.AcceptedAlert, mine bool, id, after string, size int) bool {
	r.expireHeld()
	h := &r.held
	if r.hook == nil || !h.now().Before(a.At.Add(h.hold)) {
		return false
	}
	switch r.watchlist.AlertOutcomeFor(a.Account, a.Address) {
	case watchlist.AlertUntracked, watchlist.AlertRefused:
	default:
		return false
	}
	r.hook.Remember(a)
	if len(h.alerts) == 0 {
		h.after = after
	}
	h.alerts = append(h.alerts, heldAlert{alert: a, id: id, after: after, mine: mine, size: size})
	h.alertBytes += size
	for len(h.alerts) > maxHeldAlerts || h.alertBytes > maxHeldAlertBytes {
		r.releaseOldest()
		h.overflow.Inc()
	}
	return true
}

// releaseOldest applies the oldest alert held. Called with applying held.
func (r *replicas) releaseOldest() {
	h := &r.held
	if a := h.alerts[0]; !a.counted {
		r.hook.ApplyShared(a.alert, a.mine)
	}
	h.alertBytes -= h.alerts[0].size
	h.alerts[0] = heldAlert{}
	h.alerts = h.alerts[1:]
	if len(h.alerts) > 0 {
		h.after = h.alerts[0].after
	}
}

// expireHeld counts the alerts held past the hold as they would have
// counted at once. Only the first in the stream's order is looked at, so
// that each call costs little: one behind it whose hold ends sooner
// (accepted earlier, published later, as after a store outage) waits for
// it. Called with applying held.
func (r *replicas) expireHeld() {
	h := &r.held
	for len(h.alerts) > 0 && !h.now().Before(h.alerts[0].alert.At.Add(h.hold)) {
		r.releaseOldest()
	}
	if len(h.alerts) == 0 {
		h.alerts, h.after = nil, "" // let the array go
	} else {
		h.after = h.alerts[0].after
	}
}

// releaseExpired is expireHeld for the exporter's snapshot tick, so that
// a quiet stream does not keep alerts past the hold.
func (r *replicas) releaseExpired() {
	if r == nil {
		return
	}
	r.applying.Lock()
	defer r.applying.Unlock()
	r.expireHeld()
}

// heldExtra is the checkpoint's account of the alerts held (take): the
// event before the first, and their events' IDs. Called with applying
// held.
func (r *replicas) heldExtra() (after string, ids []string) {
	if len(r.held.alerts) == 0 {
		return "", nil
	}
	ids = make([]string, 0, len(r.held.alerts))
	for _, a := range r.held.alerts {
		if !a.counted { // the state counts it
			ids = append(ids, a.id)
		}
	}
	return r.held.after, ids
}

// rebaseHeld keeps, once a checkpoint's state up to event k replaced
// this replica's, the alerts held of events up to k: the stream brings
// those after k again. One whose address that state counts alerts under
// was counted there (its writer watched the address): adopt lets it go if
// this replica's files have the address, and holds it on if they do not
// (the sync then dropped the address and its counts with it). Called with
// applying held, after expireHeld ran on the state before.
func (r *replicas) rebaseHeld(k string) {
	h := &r.held
	kept := h.alerts[:0]
	for _, a := range h.alerts {
		if sharedstore.After(a.id, k) {
			h.alertBytes -= a.size
			continue
		}
		a.counted = r.watchlist.AlertOutcomeFor(a.alert.Account, a.alert.Address) == watchlist.AlertTracked
		kept = append(kept, a)
	}
	clear(h.alerts[len(kept):])
	h.alerts = kept
	r.expireHeld() // sets after
}

// readBackMargin widens the stretch of the stream read back for addresses
// (readBack) by how far the clocks of the replicas that accepted the
// alerts may be from this one's.
const readBackMargin = time.Minute

// readBack is what a replica that loaded a checkpoint up to event k reads
// back from the stream (rederive): the alerts the checkpoint's writer held
// (ids), which its state lacks, and, for the addresses that state counts
// but this replica's files lack (addresses, by key), the alerts of the
// last hold: the sync dropped those addresses with their counts, which
// the others keep (the writer's files had them first).
type readBack struct {
	ids       map[string]bool
	addresses map[string]bool
	held      map[string]bool // the events held here already (rebaseHeld)
	from      string          // the event before the first to read
}

// holdLoaded holds, as an answer the stream brought, the answer of each of
// a loaded checkpoint's addresses that this replica's files lack (its
// sync dropped them): the checkpoint's state is that of the stream up to
// its event, so the answer is one the stream brought there, and is
// checked as the stream's are. One the stream brought since (held
// already, sent later) stays. Called once the replica's files are
// synced.
func (r *replicas) holdLoaded(loaded []watchlist.SavedEntry) {
	now := time.Now()
	r.applying.Lock()
	defer r.applying.Unlock()
	for _, se := range loaded {
		key := se.Address.Key()
		o := outcomeEvent{Account: se.Address.Account, Key: key, Sent: clamp(se.LastAttempt, now), At: clamp(se.LastRefresh, now), State: se.State, Sources: se.Sources}
		if checkOutcome(eventAnswered, o, now) != nil {
			continue // never answered, or not as the stream would bring it
		}
		if old, ok := r.held.answers[key]; ok && !old.o.Sent.Before(o.Sent) {
			continue
		}
		data, err := encodeOutcome(o)
		if err != nil || len(data) > maxEventBytes {
			continue // no event could have brought it
		}
		r.holdAnswer(eventAnswered, o, len(data))
	}
}

// rederive applies what readBack names, read back from the stream up to
// k, the checkpoint's ID, as if it came now: under its address if this
// replica's files have it, held otherwise, and not at all once its hold
// is over. loaded are the checkpoint's addresses, x its extra; the
// answers of those this replica's files lack are held (holdLoaded).
func (r *replicas) rederive(ctx context.Context, k string, x *checkpointExtra, loaded []watchlist.SavedEntry) {
	r.holdLoaded(loaded)
	if r.hook == nil {
		return
	}
	b := r.readBackOf(x, loaded)
	if len(b.ids) == 0 && len(b.addresses) == 0 {
		return
	}
	now, found := time.Now(), 0
	after := b.from
	err := r.shared.Scan(ctx, after, k, func(ev sharedstore.Event) {
		prev := after
		after = ev.ID
		if r.reapply(ev, prev, now, &b) {
			found++
		}
	})
	r.applying.Lock()
	r.sortHeld()
	r.applying.Unlock()
	if err != nil || found < len(b.ids) {
		level.Warn(r.logger).Log("msg", "Could not read back every alert the store's checkpoint does not count yet; those missing are not counted here", "held", len(b.ids), "found", found, "err", err)
	}
}

// readBackOf is what rederive reads back after loading a checkpoint with
// extra x and addresses loaded, once this replica's files are synced.
// IDs in x that are not of the stream, out of order or more than a
// replica holds make its list invalid: it is skipped and counted.
func (r *replicas) readBackOf(x *checkpointExtra, loaded []watchlist.SavedEntry) readBack {
	b := readBack{ids: map[string]bool{}, addresses: map[string]bool{}, held: map[string]bool{}}
	r.applying.Lock()
	for _, a := range r.held.alerts {
		b.held[a.id] = true
	}
	start := sharedstore.IDAt(r.held.now().Add(-r.held.hold - readBackMargin))
	r.applying.Unlock()
	switch {
	case x == nil || len(x.Held) == 0:
	case !validHeld(x):
		r.dropped.Inc()
		level.Warn(r.logger).Log("msg", "Skipped the list of held alerts of the store's checkpoint: not IDs of its stream in order, or too many", "held", len(x.Held))
	default:
		for _, id := range x.Held {
			if !b.held[id] {
				b.ids[id] = true
			}
		}
		b.from = x.HeldAfter
	}
	for _, se := range loaded {
		if _, watched := r.watchlist.ScheduleOf(se.Address.Key()); !watched {
			b.addresses[se.Address.Key()] = true
		}
	}
	if len(b.addresses) > 0 && (len(b.ids) == 0 || sharedstore.Before(start, b.from)) {
		b.from = start
	}
	return b
}

// reapply is rederive's for one event (prev, the one before it), and
// reports whether it is one of b's ids. Of the others, only an alert for
// one of b's addresses is held; none is counted at once (this replica
// counted it before a restart, if at all).
func (r *replicas) reapply(ev sharedstore.Event, prev string, now time.Time, b *readBack) bool {
	listed := b.ids[ev.ID]
	if ev.Kind != eventAlert || len(ev.Data) > maxEventBytes || b.held[ev.ID] || !listed && len(b.addresses) == 0 {
		return false
	}
	a, err := decodeAlert(ev.Data, now)
	if err != nil || !listed && !b.addresses[breach.Key(a.Address)] {
		return false
	}
	r.applying.Lock()
	defer r.applying.Unlock()
	if !r.held.now().Before(a.At.Add(r.held.hold)) {
		return listed // counted before a restart, or past its hold
	}
	mine := ev.Origin == r.name
	if !r.holdAlert(a, mine, ev.ID, prev, len(ev.Data)) && listed &&
		r.watchlist.AlertOutcomeFor(a.Account, a.Address) == watchlist.AlertTracked {
		r.hook.ApplyShared(a, mine)
	}
	return listed
}

// sortHeld puts the alerts held in the stream's order, which a
// checkpoint's list of them keeps, after rederive added to those kept
// through a resync. Called with applying held.
func (r *replicas) sortHeld() {
	h := &r.held
	slices.SortFunc(h.alerts, func(a, b heldAlert) int {
		switch {
		case sharedstore.Before(a.id, b.id):
			return -1
		case sharedstore.After(a.id, b.id):
			return 1
		}
		return 0
	})
	r.expireHeld() // sets after
}

// validHeld reports whether x's held alerts could be the stream's: at
// most maxHeldAlerts IDs, after HeldAfter, in order, none after the
// checkpoint's.
func validHeld(x *checkpointExtra) bool {
	if len(x.Held) > maxHeldAlerts {
		return false
	}
	prev := x.HeldAfter
	for _, id := range x.Held {
		if (prev != "" && !sharedstore.After(id, prev)) || sharedstore.After(id, x.ID) || !sharedstore.After(id, "0-0") {
			return false
		}
		prev = id
	}
	return true
}

// adoptAnswer applies the answer held for key, now that the address is
// watched here, unless the stream has brought a newer one since (an
// attempt after the answer's), and reports whether it no longer holds
// it. Called with applying held.
func (r *replicas) adoptAnswer(key string) bool {
	h := &r.held
	a, ok := h.answers[key]
	if !ok {
		return false
	}
	sch, watched := r.watchlist.ScheduleOf(key)
	if !watched {
		return false
	}
	if sch.LastAttempt.Before(a.o.Sent) {
		r.applyOutcome(eventAnswered, a.o)
	}
	delete(h.answers, key)
	h.answerBytes -= a.size
	return true
}

// adopt applies what is held for the addresses this replica watches now,
// after its watchlist was synced to files that may have brought some;
// filesInterval is refresh.files_interval, which sets the hold.
func (r *replicas) adopt(filesInterval time.Duration) {
	if r == nil {
		return
	}
	r.applying.Lock()
	defer r.applying.Unlock()
	h := &r.held
	h.hold = filesInterval + h.skew
	kept := h.order[:0]
	for _, key := range h.order {
		if _, ok := h.answers[key]; ok && !r.adoptAnswer(key) {
			kept = append(kept, key)
		}
	}
	clear(h.order[len(kept):])
	h.order = kept
	var alerts []heldAlert
	for _, a := range h.alerts {
		if r.watchlist.AlertOutcomeFor(a.alert.Account, a.alert.Address) != watchlist.AlertTracked {
			a.counted = false // the sync dropped the address and its counts
			alerts = append(alerts, a)
			continue
		}
		if !a.counted {
			r.hook.ApplyShared(a.alert, a.mine)
		}
		h.alertBytes -= a.size
	}
	h.alerts = alerts
	r.expireHeld()
}
