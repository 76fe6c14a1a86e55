package watchlist

import (
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The scheduler's side: it plans over every entry's Schedule and records
// what each request taught it. Methods taking a key ignore an address that
// is no longer watched: a reload may remove it while its request is in
// flight.

// Plan calls f for every watched address under the read lock; f must not
// keep the entry or call back into the watchlist.
func (r *List) Plan(f func(key string, e *Entry)) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for k, e := range r.entries {
		f(k, e)
	}
}

// Email returns the email of a watched address, as it is sent to the API.
func (r *List) Email(key string) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.entries[key]
	if !ok {
		return "", false
	}
	return e.Address.Email, true
}

// Watches reports whether email (matched by breach.Key) is watched.
func (r *List) Watches(email string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.entries[breach.Key(email)]
	return ok
}

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
		r.generation++
	}
}

// Answered records a 200 (Verified, with its sources, bounded as in
// bounds.go) or a 403/404 (Unverified/NotMonitored: the feed series go,
// since the service no longer vouches for them) and ends any backoff. It
// returns how many attempts had failed before.
func (r *List) Answered(key, state string, sources []breach.SourceState, at time.Time) (failedBefore int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	if !ok {
		return 0
	}
	failedBefore = e.Schedule.Failures
	if sources != nil {
		sources = r.bounds.boundSources(sources)
	}
	if state == breach.Verified && e.State == breach.Verified {
		e.News.add(e.Sources, sources)
	}
	e.State, e.Sources, e.LastRefresh = state, sources, at
	e.Feeds, _ = seeFeeds(e.Feeds, sources, at)
	e.Schedule.Failures = 0
	r.generation++
	r.touch(e)
	return failedBefore
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
	r.generation++
	return e.Schedule, true
}

// Refresh moves a watched address (matched by breach.Key) to the head of
// the queue. Repeated calls before its request goes out make one request.
// It reports whether the address is watched.
func (r *List) Refresh(email string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[breach.Key(email)]
	if ok {
		r.markUrgent(e)
	}
	return ok
}

// markUrgent queues e first unless it is already queued; an address
// already waiting needs no re-plan. Called with r.mu held.
func (r *List) markUrgent(e *Entry) {
	if e.Schedule.Urgent != 0 {
		return
	}
	r.tickets++
	e.Schedule.Urgent = r.tickets
	r.signal()
}
