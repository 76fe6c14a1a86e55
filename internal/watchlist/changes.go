// SPDX-License-Identifier: Apache-2.0

package watchlist

// The scheduler keeps its own index of when each address is due, and
// follows the schedules through this feed: a plan then costs the changes
// since the one before, not a walk over every address (at 100,000
// addresses a walk took milliseconds, up to eight times a budget slot).

// scheduleChanges are an account's changes not handed to its scheduler
// yet: the addresses whose schedule changed or that came or went, or all
// of them at once.
type scheduleChanges struct {
	keys map[string]struct{}
	// all: the set was replaced (Sync) or the changes outgrew it; the
	// scheduler reads every address again, which costs what the changes
	// would have.
	all bool
}

// note records that the schedule of the account's address k changed, or
// that it came or went. Called with r.mu held for writing.
func (a *account) note(k string) {
	c := &a.changes
	if c.all {
		return
	}
	if c.keys == nil {
		c.keys = map[string]struct{}{}
	}
	c.keys[k] = struct{}{}
	// Bounded: an account whose scheduler does not drain (gone, or not
	// started) keeps at most as many keys as it has addresses, plus a few.
	if len(c.keys) > len(a.entries)+64 {
		a.noteAll()
	}
}

// noteAll records that every address of the account may have changed.
func (a *account) noteAll() { a.changes = scheduleChanges{all: true} }

// scheduleChanged notes a change of e, watched under k, in its account.
// Called with r.mu held for writing.
func (r *List) scheduleChanged(k string, e *Entry) {
	if a := r.accounts[e.Address.Account]; a != nil {
		a.note(k)
	}
}

// ScheduleChanges hands the named account's schedule changes since the
// last call to f: each address whose schedule changed or that came (watched
// true, with its schedule) or went (false). It reports all instead, without
// calling f, when they are too many to list or the set was replaced (a Sync,
// or an account the last Sync did not name): the caller then reads every
// address (Plan). The account's one scheduler calls it before each plan; f
// must not call back into the watchlist.
func (r *List) ScheduleChanges(account string, f func(key string, sch Schedule, watched bool)) (all bool) {
	if r.noScheduleChanges(account) {
		return false // the usual plan: a scrape copying the entries does not hold it up
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.accounts[account]
	if a == nil {
		return true
	}
	c := &a.changes
	if c.all {
		a.changes = scheduleChanges{}
		return true
	}
	for k := range c.keys {
		if e, ok := a.entries[k]; ok {
			f(k, e.Schedule, true)
		} else {
			f(k, Schedule{}, false)
		}
	}
	clear(c.keys) // kept for the next changes: a plan allocates nothing
	return false
}

// noScheduleChanges reports whether the named account has no changes to
// hand over, under the read lock only.
func (r *List) noScheduleChanges(account string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a := r.accounts[account]
	return a != nil && !a.changes.all && len(a.changes.keys) == 0
}
