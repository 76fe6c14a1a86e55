package registry

import (
	"maps"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Alerts are the counts of the accepted alerts for one address. A value
// handed out is never modified: each alert builds a new one.
type Alerts struct {
	Counts        map[[2]string]float64 // by {source, severity}: breach_alerts_total
	NewDatabases  map[string]float64    // by source: sum of len(delta.new_source_dbs)
	ExposedFields map[[2]string]float64 // by {source, field}
	NewPlaintext  map[string]float64    // by source: alerts with delta.has_new_plaintext
	LastObserved  map[string]time.Time  // by source: the newest observed_at
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
}

// AlertOutcome says where an alert was counted.
type AlertOutcome int

const (
	AlertTracked    AlertOutcome = iota // under its watched address
	AlertDiscovered                     // the address was added, then counted under it
	AlertUntracked                      // not watched, and discovery is off: not counted here
	AlertRefused                        // not watched, and the discovery limit is reached
)

// RecordAlert counts an accepted alert under its address and queues the
// address for a re-read. An address not watched yet is added as discovered
// while the discovery limit Sync set allows; otherwise the alert is not
// counted here and the caller counts it without a label. Values past their
// bounds are counted as dropped and left out of the address's counts.
func (r *Registry) RecordAlert(email string, d AlertDelta) AlertOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := breach.Key(email)
	outcome := AlertTracked
	e, ok := r.entries[k]
	if !ok {
		switch {
		case r.discoveryLimit <= 0:
			return AlertUntracked
		case r.discovered >= r.discoveryLimit:
			return AlertRefused
		}
		e = r.newEntry(breach.Address{Email: email, Discovered: true})
		r.entries[k] = e
		r.discovered++
		r.generation++
		outcome = AlertDiscovered
	}
	if d, ok, noSeverity := r.bounds.boundAlert(d); ok {
		e.Alerts = e.Alerts.add(d, noSeverity)
		r.touch(e)
	}
	r.markUrgent(e)
	return outcome
}

// Discovered is how many watched addresses came from alerts.
func (r *Registry) Discovered() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.discovered
}

// Drop stops watching a discovered address, with all its data: the service
// says (404) it does not monitor it, so it was never a real address of the
// account. A configured address is kept: the config asks for it.
func (r *Registry) Drop(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok || !e.Address.Discovered {
		return false
	}
	delete(r.entries, key)
	r.discovered--
	r.generation++
	r.signal()
	return true
}

// add returns a's counts plus d, leaving a as it was; with noSeverity the
// alert is not counted by severity.
func (a *Alerts) add(d AlertDelta, noSeverity bool) *Alerts {
	n := &Alerts{}
	if a != nil {
		n.Counts = maps.Clone(a.Counts)
		n.NewDatabases = maps.Clone(a.NewDatabases)
		n.ExposedFields = maps.Clone(a.ExposedFields)
		n.NewPlaintext = maps.Clone(a.NewPlaintext)
		n.LastObserved = maps.Clone(a.LastObserved)
	} else {
		n.Counts = map[[2]string]float64{}
		n.NewDatabases = map[string]float64{}
		n.ExposedFields = map[[2]string]float64{}
		n.NewPlaintext = map[string]float64{}
		n.LastObserved = map[string]time.Time{}
	}
	if !noSeverity {
		n.Counts[[2]string{d.Source, d.Severity}]++
	}
	// Both series exist from the feed's first alert on, so that increase()
	// sees their next change.
	n.NewDatabases[d.Source] += float64(d.NewDatabases)
	n.NewPlaintext[d.Source] += boolCount(d.NewPlaintext)
	for _, f := range d.ExposedFields {
		n.ExposedFields[[2]string{d.Source, f}]++
	}
	if !d.ObservedAt.IsZero() && d.ObservedAt.After(n.LastObserved[d.Source]) {
		n.LastObserved[d.Source] = d.ObservedAt
	}
	return n
}

func boolCount(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
