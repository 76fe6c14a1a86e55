// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"cmp"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Saved is what the watchlist keeps across a restart: what it cannot get
// back cheaply, and the alert counts, which a restart must neither lose
// nor, with the journal replayed on top, count twice.
type Saved struct {
	Accounts []SavedAccount // by name
	Entries  []SavedEntry   // in schedule order
}

// SavedAccount is what an account keeps across a restart: its plan (whether
// its key works is for the next /me to say).
type SavedAccount struct {
	Name string
	Plan string
}

// SavedEntry is one address's saved state.
type SavedEntry struct {
	Address     breach.Address // Alias is not kept: the config says it
	State       string
	Sources     []breach.SourceState
	LastRefresh time.Time
	LastAttempt time.Time
	Failures    int
	Alerts      []AlertCount // sorted by family, source and label
	// The moments the acknowledgements are decided on (Entry.Feeds and
	// Entry.Acknowledged): the exporter cannot see them again.
	Feeds        map[string]FeedMoments
	Acknowledged map[acknowledge.Key]time.Time
}

// Generation counts the changes worth saving; it only grows.
func (r *List) Generation() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.generation
}

// Save returns what the watchlist keeps across a restart, and the
// generation it reflects.
func (r *List) Save() (Saved, uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := Saved{Accounts: make([]SavedAccount, 0, len(r.accounts)), Entries: make([]SavedEntry, 0, len(r.entries))}
	for name, a := range r.accounts {
		s.Accounts = append(s.Accounts, SavedAccount{Name: name, Plan: a.info.Plan})
	}
	slices.SortFunc(s.Accounts, func(a, b SavedAccount) int { return cmp.Compare(a.Name, b.Name) })
	for _, e := range r.entries {
		s.Entries = append(s.Entries, SavedEntry{
			Address:      breach.Address{Email: e.Address.Email, Discovered: e.Address.Discovered, Account: e.Address.Account},
			State:        e.State,
			Sources:      e.Sources,
			LastRefresh:  e.LastRefresh,
			LastAttempt:  e.Schedule.LastAttempt,
			Failures:     e.Schedule.Failures,
			Alerts:       e.Alerts.Counts(),
			Feeds:        e.Feeds,
			Acknowledged: e.Acknowledged,
		})
	}
	// Schedule order, so a restore keeps never-read addresses in the order
	// they were added.
	orders := make(map[string]uint64, len(r.entries))
	for k, e := range r.entries {
		orders[k] = e.Schedule.Order
	}
	slices.SortFunc(s.Entries, func(a, b SavedEntry) int {
		return cmp.Compare(orders[a.Address.Key()], orders[b.Address.Key()])
	})
	return s, r.generation
}

// Restore fills an empty watchlist from s before the first Sync, which then
// drops what the config no longer lists, the discovered addresses beyond
// its limit and those of accounts gone. Each account's plan is kept;
// whether its key works is for the next /me to say. An entry without an
// account (an older snapshot) is DefaultAccount's.
//
// A snapshot is input like any other: a damaged disk, a hand edit or an
// older exporter's bug must not get past the bounds the live paths keep.
// Its values go through the same caps and vocabularies (what they drop is
// counted), and times more than breach.MaxFutureSkew after now (a clock
// that ran ahead) are clamped to now; such an address is read first.
func (r *List) Restore(s Saved, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restore(s, now)
}

// restore is Restore with r.mu held.
func (r *List) restore(s Saved, now time.Time) {
	for _, sa := range s.Accounts {
		r.accountOf(sa.Name).info = Account{Plan: r.bounds.boundPlan(sa.Plan)}
	}
	for _, se := range s.Entries {
		k := se.Address.Key()
		if r.entries[k] != nil {
			continue
		}
		if se.Address.Discovered {
			r.discovered++
		}
		e := r.newEntry(se.Address)
		e.State, e.Sources, e.LastRefresh = se.State, r.bounds.boundSources(se.Sources), se.LastRefresh
		e.Schedule.LastAttempt, e.Schedule.Failures = se.LastAttempt, se.Failures
		if breach.InFuture(e.LastRefresh, now) || breach.InFuture(e.Schedule.LastAttempt, now) {
			if e.LastRefresh.After(now) {
				e.LastRefresh = now
			}
			e.Schedule.LastAttempt = time.Time{}
			r.markUrgent(k, e)
		}
		e.Alerts = r.restoreAlerts(se.Alerts, now)
		e.Feeds, e.Acknowledged = r.restoreMoments(se, e.Sources, now)
		r.touch(e)
		r.add(k, e)
	}
	r.generation++
}

// restoreMoments takes the saved moments of the acknowledgements within
// the bounds: feeds past the sources' vocabulary are left out, moments more
// than breach.MaxFutureSkew after now are clamped to now, and a feed with
// no saved moment (a snapshot from before they were kept) is seen for the
// first time now.
func (r *List) restoreMoments(se SavedEntry, sources []breach.SourceState, now time.Time) (map[string]FeedMoments, map[acknowledge.Key]time.Time) {
	clamp := func(t time.Time) time.Time {
		if breach.InFuture(t, now) {
			return now
		}
		return t
	}
	var feeds map[string]FeedMoments
	for source, m := range se.Feeds {
		source = breach.LabelValue(source, breach.MaxSourceBytes)
		if !r.bounds.sources.admit(source) {
			r.bounds.dropped[LabelSource]++
			continue
		}
		if feeds == nil {
			feeds = map[string]FeedMoments{}
		}
		m.ChangeSeen, m.Critical = clamp(m.ChangeSeen), clamp(m.Critical)
		feeds[source] = m
	}
	feeds, _ = seeFeeds(feeds, sources, now)
	var acks map[acknowledge.Key]time.Time
	for k, t := range se.Acknowledged {
		if acks == nil {
			acks = map[acknowledge.Key]time.Time{}
		}
		acks[k] = clamp(t)
	}
	return feeds, acks
}

// restoreAlerts bounds saved alert counts as RecordAlert bounds alerts: a
// source past its vocabulary drops the series, a severity or field past
// its own drops that series alone; a last-observed time ahead of now is
// clamped to now.
func (r *List) restoreAlerts(counts []AlertCount, now time.Time) *Alerts {
	b := r.bounds
	b.mu.Lock()
	defer b.mu.Unlock()
	a := &Alerts{}
	for _, c := range counts {
		var ok bool
		if c.Source, ok = b.admit(LabelSource, b.sources, c.Source, breach.MaxSourceBytes); !ok {
			continue
		}
		switch c.Family {
		case AlertsBySeverity:
			if c.Label, ok = b.admit(LabelSeverity, b.severities, c.Label, breach.MaxValueBytes); !ok {
				continue
			}
		case ExposedFields:
			if c.Label, ok = b.admit(LabelField, b.fields, c.Label, breach.MaxFieldBytes); !ok {
				continue
			}
		case LastObserved:
			if limit := float64(now.Add(breach.MaxFutureSkew).UnixMilli()) / 1000; c.Value > limit {
				c.Value = float64(now.UnixMilli()) / 1000
			}
		}
		// Values cut to the same prefix add up, as the live path counts them
		// under one series.
		s := a.series(c.Family, c.Source, c.Label)
		if c.Family == LastObserved {
			s.Value = max(s.Value, c.Value)
		} else {
			s.Value += c.Value
		}
	}
	if len(a.counts) == 0 {
		return nil
	}
	return a
}
