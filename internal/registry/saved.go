package registry

import (
	"cmp"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Saved is what the registry keeps across a restart: what it cannot get
// back cheaply. Not the alert counts: Prometheus handles counter resets.
type Saved struct {
	Account Account
	Entries []SavedEntry // in schedule order
}

// SavedEntry is one address's saved state.
type SavedEntry struct {
	Address     breach.Address // Alias is not kept: the config says it
	State       string
	Sources     []breach.SourceState
	LastRefresh time.Time
	LastAttempt time.Time
	Failures    int
}

// Generation counts the changes worth saving; it only grows.
func (r *Registry) Generation() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.generation
}

// Save returns what the registry keeps across a restart, and the
// generation it reflects.
func (r *Registry) Save() (Saved, uint64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := Saved{Account: r.account, Entries: make([]SavedEntry, 0, len(r.entries))}
	for _, e := range r.entries {
		s.Entries = append(s.Entries, SavedEntry{
			Address:     breach.Address{Email: e.Address.Email, Discovered: e.Address.Discovered},
			State:       e.State,
			Sources:     e.Sources,
			LastRefresh: e.LastRefresh,
			LastAttempt: e.Schedule.LastAttempt,
			Failures:    e.Schedule.Failures,
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

// Restore fills an empty registry from s before the first Sync, which then
// drops what the config no longer lists and the discovered addresses beyond
// its limit. The account's plan is kept; whether the API is up is for the
// next /me to say. It returns how many addresses were restored.
func (r *Registry) Restore(s Saved) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.account = Account{Plan: s.Account.Plan}
	n := 0
	for _, se := range s.Entries {
		k := se.Address.Key()
		if r.entries[k] != nil {
			continue
		}
		if se.Address.Discovered {
			r.discovered++
		}
		e := r.newEntry(se.Address)
		e.State, e.Sources, e.LastRefresh = se.State, se.Sources, se.LastRefresh
		r.touch(e)
		e.Schedule.LastAttempt, e.Schedule.Failures = se.LastAttempt, se.Failures
		r.entries[k] = e
		n++
	}
	r.generation++
	return n
}
