// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The scheduler's side: it plans over every entry's Schedule and records
// what each request taught it. Methods taking a key ignore an address that
// is no longer watched: a reload may remove it while its request is in
// flight.

// Plan calls f for every watched address of the named account under the
// read lock; f must not keep the entry or call back into the watchlist.
// The scheduler reads them all only when ScheduleChanges cannot list what
// changed.
func (r *List) Plan(account string, f func(key string, e *Entry)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a := r.accounts[account]
	if a == nil {
		return
	}
	for k, e := range a.entries {
		f(k, e)
	}
}

// Email returns the email of a watched address of the named account, as it
// is sent to the API; false when the address is not watched or is another
// account's (a reload moved it): a key reads its own account's addresses
// only.
func (r *List) Email(account, key string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[key]
	if !ok || e.Address.Account != account {
		return "", false
	}
	return e.Address.Email, true
}

// Watches reports whether email (matched by breach.Key) is watched.
func (r *List) Watches(email string) bool { return r.watches(breach.Key(email)) }

// Label returns the address label of a watched address, for logs; for an
// address no longer watched, the label it would have as a discovered one
// under the mode in force, so a log never shows more than the labels do.
func (r *List) Label(key string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.entries[key]; ok {
		return e.Label
	}
	return r.labels.Label(breach.Address{Email: key, Discovered: true})
}

// Started records that a request for the address goes out now. A pending
// Refresh is cleared: one arriving while the request is in flight may be
// about a change the request does not see, so it queues again.
func (r *List) Started(key string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[key]; ok {
		e.Schedule.LastAttempt = at
		e.Schedule.Urgent = 0
		r.scheduleChanged(key, e)
		r.generation++
	}
}

// Attempted records that a replica sent a request for the address at at
// (a later one than this replica knew of). Unlike Started, it leaves a
// pending Refresh: that one is this replica's to send.
func (r *List) Attempted(key string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.entries[key]; ok && at.After(e.Schedule.LastAttempt) {
		e.Schedule.LastAttempt = at
		r.scheduleChanged(key, e)
		r.generation++
	}
}

// ScheduleOf returns a watched address's place in the schedule.
func (r *List) ScheduleOf(key string) (Schedule, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[key]
	if !ok {
		return Schedule{}, false
	}
	return e.Schedule, true
}

// Answered records a 200 (Verified, with its sources, bounded as in
// bounds.go) or a 403/404 (Unverified/NotMonitored: the feed series go,
// since the service no longer vouches for them) and ends any backoff. It
// returns how many attempts had failed before.
//
// An answer may list hundreds of thousands of database names: bounding it
// and counting its news take time linear in its size, and all of it is done
// before the exclusive lock is taken, which is held only to swap the
// results in, so scrapes and alerts never wait for a large answer.
func (r *List) Answered(key, state string, sources []breach.SourceState, at time.Time) (failedBefore int) {
	if !r.watches(key) {
		return 0 // a reload removed it while the request was in flight
	}
	if sources != nil {
		sources = r.bounds.boundSources(sources)
	}
	for {
		// The news are counted against the answer the entry holds now,
		// under the read lock only for as long as it takes to look it up:
		// its Sources are never modified, so they may be read unlocked.
		r.mu.RLock()
		e, ok := r.entries[key]
		var before Entry
		if ok {
			before = *e
		}
		r.mu.RUnlock()
		if !ok {
			return 0
		}
		var news News
		if state == breach.Verified && before.State == breach.Verified {
			news = newsBetween(before.Sources, sources)
		}

		r.mu.Lock()
		if r.entries[key] != e || e.answers != before.answers {
			// Another answer was recorded, or a reload removed (and
			// perhaps re-added) the address, while the news were
			// counted: they were counted against an answer that is no
			// longer the one replaced, so count again against the one
			// there now. Only another Answered for the same address (the
			// scheduler sends one request per address at a time) or a
			// reload moves it, and each retry follows one that went
			// through, so answers always progress.
			r.mu.Unlock()
			continue
		}
		failedBefore = e.Schedule.Failures
		e.News.NewDatabases += news.NewDatabases
		e.News.SensitiveFields += news.SensitiveFields
		e.State, e.Sources, e.LastRefresh = state, sources, at
		e.Feeds, _ = seeFeeds(e.Feeds, sources, at)
		if failedBefore > 0 {
			e.Schedule.Failures = 0
			r.scheduleChanged(key, e) // its backoff ends
		}
		e.answers++
		r.generation++
		r.touch(e)
		r.mu.Unlock()
		return failedBefore
	}
}

func (r *List) watches(key string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.entries[key]
	return ok
}

// Failed records a failed read and returns the address's schedule after it.
// The cached values stay.
func (r *List) Failed(key string) (Schedule, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok {
		return Schedule{}, false
	}
	e.Schedule.Failures++
	r.scheduleChanged(key, e)
	r.generation++
	return e.Schedule, true
}

// Refresh moves a watched address (matched by breach.Key) to the head of
// the queue. Repeated calls before its request goes out make one request.
// It reports whether the address is watched.
func (r *List) Refresh(email string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := breach.Key(email)
	e, ok := r.entries[k]
	if ok {
		r.markUrgent(k, e)
	}
	return ok
}

// markUrgent queues e, watched under k, first unless it is already
// queued; an address already waiting needs no re-plan. Called with r.mu
// held.
func (r *List) markUrgent(k string, e *Entry) {
	if e.Schedule.Urgent != 0 {
		return
	}
	r.tickets++
	e.Schedule.Urgent = r.tickets
	if a := r.accounts[e.Address.Account]; a != nil {
		a.note(k)
		signal(a)
	}
}
