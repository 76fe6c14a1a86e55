package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/state"
)

// Run sends requests, one at a time, until ctx is done. It is the only
// goroutine that calls the Client, so the budget has a single owner.
func (s *Scheduler) Run(ctx context.Context) {
	for ctx.Err() == nil {
		now := s.clock.Now()
		j, at := s.next(now)
		if at.After(now) {
			if !s.wait(ctx, at) {
				return
			}
			// Re-plan even when the timer fired: a Refresh, Add or Update
			// may have changed what should go next.
			continue
		}
		s.send(ctx, j)
	}
}

// wait blocks until the clock reaches until, or Refresh, Add or Update pokes.
// It reports false when ctx is done.
func (s *Scheduler) wait(ctx context.Context, until time.Time) bool {
	// A poke that came while a request was in flight is taken before telling
	// a test that Run waits, so the test never acts on a wait that is over.
	select {
	case <-s.wake:
		return true
	default:
	}
	t := s.clock.NewTimer(s.clock.Until(until))
	defer t.Stop()
	if s.idle != nil {
		select {
		case s.idle <- until:
		case <-ctx.Done():
			return false
		}
	}
	select {
	case <-t.Chan():
	case <-s.wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// next picks the request that should go out next and the earliest time it
// may: a request retried after a 429 or 401 first, then Refresh'ed addresses
// in the order asked (every other slot at most while other reads are due),
// then /me when due, then the address read least recently once its Interval
// (or error backoff) has passed.
func (s *Scheduler) next(now time.Time) (job, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	earliest := later(now, s.pauseUntil)
	if !s.lastSend.IsZero() {
		earliest = later(earliest, s.lastSend.Add(spacing(s.settings.RequestsPerMinute)))
	}

	if r := s.retry; r != nil {
		if r.me {
			return *r, earliest
		}
		if a, ok := s.addresses[r.key]; ok {
			return job{key: r.key, email: a.email}, earliest
		}
		s.retry = nil // a reload removed it during the pause
	}

	var urgent, oldest *address
	var urgentKey, oldestKey string
	var oldestAt time.Time
	for k, a := range s.addresses {
		if a.urgent != 0 {
			if urgent == nil || a.urgent < urgent.urgent {
				urgent, urgentKey = a, k
			}
			continue
		}
		at := later(earliest, s.readyAt(a))
		if oldest == nil || at.Before(oldestAt) || at.Equal(oldestAt) && a.readBefore(oldest) {
			oldest, oldestKey, oldestAt = a, k, at
		}
	}
	// Refreshes take at most every other slot while other reads are due, so
	// a storm of alerts cannot starve addresses never read or long stale.
	if urgent != nil && !(s.lastUrgent && oldest != nil && !oldestAt.After(earliest)) {
		return job{urgent: true, key: urgentKey, email: urgent.email}, earliest
	}
	// A zero lastMe (not sent yet) makes /me due at once.
	meAt := later(earliest, s.lastMe.Add(meEvery(s.settings)))
	if oldest == nil || !oldestAt.Before(meAt) {
		return job{me: true}, meAt
	}
	return job{key: oldestKey, email: oldest.email}, oldestAt
}

// readyAt is when a may be read again: Interval after its last attempt, or
// sooner when that attempt failed (its backoff is capped at Interval).
func (s *Scheduler) readyAt(a *address) time.Time {
	if a.lastAttempt.IsZero() {
		return time.Time{}
	}
	wait := s.settings.Interval
	if a.failures > 0 {
		// The shift is bounded so that a long outage cannot overflow it.
		wait = min(wait, addressBackoffMin<<min(a.failures-1, 16))
	}
	return a.lastAttempt.Add(wait)
}

// readBefore orders addresses least recently attempted first, never-read
// ones first of all, in the order they were configured.
func (a *address) readBefore(b *address) bool {
	if !a.lastAttempt.Equal(b.lastAttempt) {
		return a.lastAttempt.Before(b.lastAttempt)
	}
	return a.order < b.order
}

// send makes one request and records what it taught us.
func (s *Scheduler) send(ctx context.Context, j job) {
	sent := s.clock.Now()
	s.lastSend = sent
	s.lastUrgent = j.urgent
	s.retry = nil
	if j.me {
		s.lastMe = sent
	} else {
		s.mu.Lock()
		if a, ok := s.addresses[j.key]; ok {
			a.lastAttempt = sent
			// Cleared at send time: a Refresh arriving while this request is
			// in flight may be about a change the request did not see.
			a.urgent = 0
		}
		s.mu.Unlock()
	}

	var (
		me       api.Me
		breaches api.Breaches
		rl       api.RateLimit
		err      error
	)
	logger := log.With(s.logger, "endpoint", api.EndpointMe)
	if j.me {
		me, rl, err = s.client.Me(ctx)
	} else {
		logger = log.With(s.logger, "endpoint", api.EndpointBreaches, "address", s.label(j.email))
		breaches, rl, err = s.client.Breaches(ctx, j.email)
	}
	if ctx.Err() != nil {
		return // shutting down: the outcome says nothing about the API
	}
	done := s.clock.Now()
	level.Debug(logger).Log("msg", "API request", "outcome", outcome(err), "duration", done.Sub(sent))

	s.followRateLimit(rl, done, logger)
	if s.pauseAll(j, err, done, logger) {
		return
	}
	if j.me {
		s.recordMe(me, err, logger)
		return
	}
	s.recordBreaches(j, breaches, err, done, logger)
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	if k, ok := api.KindOf(err); ok {
		return k.String()
	}
	return "error"
}

// followRateLimit records the rate-limit headers and, when the window's
// budget is used up (by us or anyone else sharing the key), pauses until the
// window resets.
func (s *Scheduler) followRateLimit(rl api.RateLimit, now time.Time, logger log.Logger) {
	if !rl.HasLimit && !rl.HasRemaining && rl.Reset.IsZero() {
		return
	}
	s.store.SetRateLimit(rl)
	if !rl.HasRemaining || rl.Remaining > 0 {
		return
	}
	until := rl.Reset
	switch {
	case until.After(now):
	case until.IsZero():
		until = nextMinute(now) // the spec's windows are fixed Unix minutes
	default:
		return // that window is already over
	}
	until = earlier(until, now.Add(maxPause)).Add(s.jitter(resetJitter))
	s.pauseUntil = later(s.pauseUntil, until)
	level.Debug(logger).Log("msg", "No requests left in this rate-limit window; waiting for its reset", "until", until)
}

// pauseAll handles the errors that concern the key rather than the address
// or call: a 429 or a 401 stops every request for a while, and the same
// request goes first afterwards. It reports whether err was one of them.
func (s *Scheduler) pauseAll(j job, err error, now time.Time, logger log.Logger) bool {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	var until time.Time
	switch apiErr.Kind {
	case api.KindRateLimited:
		until = apiErr.RetryAt
		if !until.After(now) {
			until = nextMinute(now)
		}
		until = earlier(until, now.Add(maxPause)).Add(s.jitter(resetJitter))
		level.Warn(logger).Log("msg", "Rate limited by the API; pausing all requests until the window resets", "until", until)
	case api.KindUnauthorized:
		// The client re-reads the token file after a 401, so a rotated token
		// is picked up on the retry; the backoff only keeps a revoked token
		// from spending the budget.
		s.authBackoff = min(max(2*s.authBackoff, authBackoffMin), authBackoffMax)
		until = now.Add(s.authBackoff)
		level.Warn(logger).Log("msg", "The API rejected the token; pausing all requests", "retry_in", s.authBackoff, "err", err)
		// A rejected token makes the whole API unusable, whichever endpoint
		// said so; /me may not be sent again until the token works.
		s.store.SetAccount("", false)
	default:
		return false
	}
	// A 429 on /me leaves breach_api_up alone: it says nothing about whether
	// the API works, and the retry goes first once the window resets.
	s.pauseUntil = later(s.pauseUntil, until)
	s.retry = &j
	return true
}

func (s *Scheduler) recordMe(me api.Me, err error, logger log.Logger) {
	if err != nil {
		s.store.SetAccount("", false)
		level.Warn(logger).Log("msg", "API identity check failed", "err", err)
		return
	}
	s.authBackoff = 0
	s.store.SetAccount(me.Plan, true)
}

// recordBreaches stores an answer (200, 403, 404). Any other error keeps the
// cached values and backs off this address only.
func (s *Scheduler) recordBreaches(j job, b api.Breaches, err error, now time.Time, logger log.Logger) {
	kind, _ := api.KindOf(err)
	switch {
	case err == nil:
		s.store.SetBreaches(j.email, b, now)
	case kind == api.KindUnverified:
		s.store.SetState(j.email, state.Unverified, now)
	case kind == api.KindNotMonitored:
		s.store.SetState(j.email, state.NotMonitored, now)
	default:
		s.addressFailed(j, err, logger)
		return
	}
	s.authBackoff = 0

	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.addresses[j.key]; ok && a.failures > 0 {
		level.Info(logger).Log("msg", "Reading the address works again", "failed_attempts", a.failures)
		a.failures = 0
	}
}

// addressFailed backs off one address. It warns when the address starts
// failing, not on every retry: with the API down, every address fails.
func (s *Scheduler) addressFailed(j job, err error, logger log.Logger) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.addresses[j.key]
	if !ok {
		return // a reload removed it while the request was in flight
	}
	a.failures++
	retryIn := s.readyAt(a).Sub(a.lastAttempt)
	lvl := level.Debug
	if a.failures == 1 {
		lvl = level.Warn
	}
	lvl(logger).Log("msg", "Reading the address failed; keeping its last values and backing off", "err", err,
		"failed_attempts", a.failures, "retry_in", retryIn)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func nextMinute(t time.Time) time.Time {
	return t.Truncate(time.Minute).Add(time.Minute)
}
