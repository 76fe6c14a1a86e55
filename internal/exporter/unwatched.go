// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Each replica reads its address files on its own, and a change reaches
// them at different moments (a ConfigMap reaches pods one after the
// other): for a while one replica watches an address that another does
// not watch yet. The stream brings the first one's answers and alerts for
// it to every replica. One that does not watch the address holds them
// (bounded), and applies them when its own files bring the address
// (adopt). It then serves the answer at once,
// rather than "pending" until the address's next read a round later, and
// counts the alert under the address as the others did.
//
// An alert is held only for an address the stream brought an answer for
// (one that another replica watches), only while it would count without
// an address label here, and at most holdRounds × refresh.files_interval:
// past that the address did not come, and the alert counts as it would
// have at once. While alerts are held, this replica writes no checkpoint:
// its state lacks them. A restart meanwhile loses what is held (it is in
// no snapshot); the answers come back with the address's next read.

const (
	// maxHeldAnswers and maxHeldAnswerBytes (the events' sizes) bound the
	// answers held, the latest per address: past them the oldest goes
	// (breach_exporter_store_unwatched_answers_dropped_total).
	maxHeldAnswers     = 10_000
	maxHeldAnswerBytes = 16 << 20
	// maxHeldAlerts and maxHeldAlertBytes bound the alerts held: past
	// them the oldest counts as it would have at once.
	maxHeldAlerts     = 10_000
	maxHeldAlertBytes = 16 << 20
	// holdRounds × refresh.files_interval is how long an alert is held:
	// every replica reads its files at least once an interval, even
	// without file events.
	holdRounds = 2
)

// held is what the stream brought for addresses this replica does not
// watch. It is the replicas' and used under their applying lock.
type held struct {
	answers     map[string]heldAnswer // by address key: the latest answer
	order       []string              // the keys of answers, oldest first
	answerBytes int
	alerts      []heldAlert // oldest first
	alertBytes  int
	hold        time.Duration // how long an alert is held
	// complete tells that the state take last copied held no alert: only
	// such a state is a checkpoint.
	complete bool
	now      func() time.Time
	dropped  prometheus.Counter
}

type heldAnswer struct {
	o    outcomeEvent
	size int // of the event's data
}

type heldAlert struct {
	alert watchlist.AcceptedAlert
	size  int // of the event's data
	since time.Time
}

func newHeld() held {
	return held{
		answers: map[string]heldAnswer{},
		hold:    holdRounds * 5 * time.Minute,
		now:     time.Now,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_unwatched_answers_dropped_total",
			Help: "Answers the stream brought for addresses this replica does not watch (yet), let go past the limit of 10,000 (or 16 MiB) held: such an address, once watched here, waits for its next read.",
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

// holdAlert holds an alert (its event's data size bytes) that another
// replica accepted for an address that replica watches (the stream
// brought an answer for it) and this one does not, while it would count
// without an address label here; the duplicate memory takes it at once.
// It reports whether it held the alert. (An alert that discovers the
// address here needs no holding: the replica that accepted it reads the
// address again, and that answer comes.) Called with applying held.
func (r *replicas) holdAlert(a watchlist.AcceptedAlert, mine bool, size int) bool {
	r.expireHeld()
	if _, polled := r.held.answers[breach.Key(a.Address)]; mine || r.hook == nil || !polled {
		return false
	}
	switch r.watchlist.AlertOutcomeFor(a.Account, a.Address) {
	case watchlist.AlertUntracked, watchlist.AlertRefused:
	default:
		return false
	}
	h := &r.held
	r.hook.Remember(a)
	h.alerts = append(h.alerts, heldAlert{alert: a, size: size, since: h.now()})
	h.alertBytes += size
	for len(h.alerts) > maxHeldAlerts || h.alertBytes > maxHeldAlertBytes {
		r.releaseOldest()
	}
	return true
}

// releaseOldest applies the oldest alert held. Called with applying held.
func (r *replicas) releaseOldest() {
	h := &r.held
	r.hook.ApplyShared(h.alerts[0].alert, false)
	h.alertBytes -= h.alerts[0].size
	h.alerts[0] = heldAlert{}
	h.alerts = h.alerts[1:]
}

// expireHeld counts the alerts held past the hold as they would have
// counted at once. Called with applying held.
func (r *replicas) expireHeld() {
	h := &r.held
	for len(h.alerts) > 0 && h.now().Sub(h.alerts[0].since) >= h.hold {
		r.releaseOldest()
	}
	if len(h.alerts) == 0 {
		h.alerts = nil // let the array go
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

// holdingAlerts reports whether alerts are held: this replica's state then
// lacks them, and is no checkpoint. Called with applying held.
func (r *replicas) holdingAlerts() bool { return len(r.held.alerts) > 0 }

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
	h.hold = holdRounds * filesInterval
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
		if r.watchlist.AlertOutcomeFor(a.alert.Account, a.alert.Address) == watchlist.AlertTracked {
			r.hook.ApplyShared(a.alert, false)
			h.alertBytes -= a.size
		} else {
			alerts = append(alerts, a)
		}
	}
	h.alerts = alerts
	r.expireHeld()
}
