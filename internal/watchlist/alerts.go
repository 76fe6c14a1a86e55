// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"cmp"
	"crypto/sha256"
	"maps"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// AlertFamily says which alert series an AlertCount belongs to.
type AlertFamily uint8

// The alert families, each a series per address and source (and label).
const (
	AlertsBySeverity AlertFamily = iota // breach_alerts_total; Label is the severity
	NewDatabases                        // sum of len(delta.new_source_dbs)
	ExposedFields                       // one per newly exposed field; Label is the field
	NewPlaintext                        // alerts with delta.has_new_plaintext
	LastObserved                        // the newest observed_at, Unix seconds
)

// AlertCount is one alert series of an address.
type AlertCount struct {
	Family AlertFamily
	Source string
	Label  string // severity or field; empty for the other families
	Value  float64
}

func (a AlertCount) key() alertKey { return alertKey{a.Family, a.Source, a.Label} }

type alertKey struct {
	family        AlertFamily
	source, label string
}

func (k alertKey) compare(o alertKey) int {
	return cmp.Or(cmp.Compare(k.family, o.family), cmp.Compare(k.source, o.source), cmp.Compare(k.label, o.label))
}

// Alerts are the counts of the accepted alerts for one address, sorted by
// family, source and label. A value handed out is never modified: each
// alert builds a new one, one slice, so that a busy receiver allocates
// little per alert.
type Alerts struct {
	counts []AlertCount
}

// Counts returns the series in order; the caller must not modify them.
func (a *Alerts) Counts() []AlertCount {
	if a == nil {
		return nil
	}
	return a.counts
}

// Value is one series' value and whether it exists.
func (a *Alerts) Value(f AlertFamily, source, label string) (float64, bool) {
	if a == nil {
		return 0, false
	}
	k := alertKey{f, source, label}
	i, ok := slices.BinarySearchFunc(a.counts, k, func(c AlertCount, k alertKey) int { return c.key().compare(k) })
	if !ok {
		return 0, false
	}
	return a.counts[i].Value, true
}

// AlertDelta is what one accepted alert adds. Its values are bounded here
// (bounds.go) before they become label values.
type AlertDelta struct {
	Source, Severity string
	NewDatabases     int
	ExposedFields    []string
	NewPlaintext     bool
	// ObservedAt moves the address's last-observed time forward; zero
	// leaves it alone (an observed_at too far in the future).
	ObservedAt time.Time
	// AcceptedAt is when the exporter accepted the alert, on its own
	// clock: a critical one's moment for the acknowledgements
	// (FeedMoments.Critical).
	AcceptedAt time.Time
}

// AlertOutcome says where an alert was counted.
type AlertOutcome int

const (
	AlertTracked    AlertOutcome = iota // under its watched address
	AlertDiscovered                     // the address was added, then counted under it
	AlertUntracked                      // not watched, and discovery is off: not counted here
	AlertRefused                        // not watched, and the discovery limit is reached
	// AlertOtherAccount: watched, but in another account than the one
	// whose secret verified the alert; not counted for the address.
	AlertOtherAccount
	// AlertRemovedAccount: the account whose secret verified the alert is
	// not one Sync named (a reload removed it since); not counted here.
	AlertRemovedAccount
)

// RecordAlert counts an alert the named account's secret verified under
// its address and queues the address for a re-read. An address not watched
// yet is added as discovered, in that account, while the discovery limit
// Sync set allows (and the account is one Sync named); otherwise the alert
// is not counted here and the caller counts it without a label. So is an
// alert for another account's address (one account's secret must not move
// another's counts), and one of an account Sync did not name. Values past their bounds are counted as dropped and
// left out of the address's counts.
func (r *List) RecordAlert(account, email string, d AlertDelta) AlertOutcome {
	return r.recordAlert(account, email, d, true)
}

// RecordSharedAlert is RecordAlert for an alert another replica accepted
// (refresh false): it is counted here as there, but the re-read is the
// accepting replica's, so that it happens once.
func (r *List) RecordSharedAlert(account, email string, d AlertDelta, refresh bool) AlertOutcome {
	return r.recordAlert(account, email, d, refresh)
}

func (r *List) recordAlert(account, email string, d AlertDelta, refresh bool) AlertOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	account = breach.Address{Account: account}.AccountName()
	k := breach.Key(email)
	e, outcome := r.placeAlert(account, k)
	switch outcome {
	case AlertTracked:
	case AlertDiscovered:
		e = r.newEntry(breach.Address{Email: email, Discovered: true, Account: account})
		r.noteAcknowledgements(e, d.AcceptedAt)
		r.add(k, e)
		r.discovered++
		r.generation++
	default:
		return outcome
	}
	if d, ok, noSeverity := r.bounds.boundAlert(d); ok {
		e.Alerts = e.Alerts.add(d, noSeverity)
		if d.Severity == breach.Critical && !noSeverity {
			m := e.Feeds[d.Source]
			if d.AcceptedAt.After(m.Critical) {
				m.Critical, m.CriticalObserved = d.AcceptedAt, d.ObservedAt
				e.Feeds = maps.Clone(e.Feeds)
				if e.Feeds == nil {
					e.Feeds = map[string]FeedMoments{}
				}
				e.Feeds[d.Source] = m
			}
		}
		r.touch(e)
	}
	if refresh {
		r.markUrgent(k, e)
	}
	return outcome
}

// placeAlert is where an alert the account (a name) verified for the
// address key would count: under its entry (AlertTracked), under a new one
// (AlertDiscovered, e nil), or without an address label. Called with mu
// held.
func (r *List) placeAlert(account, k string) (e *Entry, _ AlertOutcome) {
	e, ok := r.entries[k]
	switch {
	// An account a reload removed since its secret verified the alert
	// (the journal replays it, another replica still has the account)
	// has no address to count it under, and discovers nothing.
	case r.known(account) == nil:
		return nil, AlertRemovedAccount
	case ok && e.Address.Account != account:
		return nil, AlertOtherAccount
	case ok:
		return e, AlertTracked
	case r.discoveryLimit <= 0:
		return nil, AlertUntracked
	case r.discovered >= r.discoveryLimit:
		return nil, AlertRefused
	}
	return nil, AlertDiscovered
}

// AlertOutcomeFor is the outcome RecordAlert would have now, changing
// nothing.
func (r *List) AlertOutcomeFor(account, email string) AlertOutcome {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, outcome := r.placeAlert(breach.Address{Account: account}.AccountName(), breach.Key(email))
	return outcome
}

// Discovered reports whether key is a watched address an alert added.
func (r *List) Discovered(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[key]
	return ok && e.Address.Discovered
}

// Drop stops watching a discovered address, with all its data: the service
// says (404) it does not monitor it, so it was never a real address of the
// account. A configured address is kept: the config asks for it.
func (r *List) Drop(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok || !e.Address.Discovered {
		return false
	}
	r.remove(key, e)
	r.discovered--
	r.generation++
	return true
}

// add returns a's counts plus d, leaving a as it was; with noSeverity the
// alert is not counted by severity.
func (a *Alerts) add(d AlertDelta, noSeverity bool) *Alerts {
	n := &Alerts{counts: make([]AlertCount, len(a.Counts()), len(a.Counts())+4+len(d.ExposedFields))}
	copy(n.counts, a.Counts())
	if !noSeverity {
		n.series(AlertsBySeverity, d.Source, d.Severity).Value++
	}
	// Both series exist from the feed's first alert on, so that increase()
	// sees their next change.
	n.series(NewDatabases, d.Source, "").Value += float64(d.NewDatabases)
	n.series(NewPlaintext, d.Source, "").Value += boolCount(d.NewPlaintext)
	for _, f := range d.ExposedFields {
		n.series(ExposedFields, d.Source, f).Value++
	}
	if !d.ObservedAt.IsZero() {
		last := n.series(LastObserved, d.Source, "")
		last.Value = max(last.Value, float64(d.ObservedAt.UnixMilli())/1000)
	}
	return n
}

// series returns one series, inserted in order at 0 when new. Only for an
// Alerts not handed out yet; the pointer is good until the next insert.
func (a *Alerts) series(family AlertFamily, source, label string) *AlertCount {
	k := alertKey{family, source, label}
	i, ok := slices.BinarySearchFunc(a.counts, k, func(c AlertCount, k alertKey) int { return c.key().compare(k) })
	if !ok {
		a.counts = slices.Insert(a.counts, i, AlertCount{Family: family, Source: source, Label: label})
	}
	return &a.counts[i]
}

func boolCount(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// AcceptedAlert is what a restart needs of an accepted alert to count it again
// and remember its body: its journal record.
type AcceptedAlert struct {
	Digest  [sha256.Size]byte
	At      time.Time // when it was accepted, for the duplicate memory
	Account string    // whose secret verified it; empty is breach.DefaultAccount
	Address string
	Delta   AlertDelta
}
