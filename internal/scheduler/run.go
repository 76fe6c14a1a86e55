// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Run sends requests, one at a time, until ctx is done or a reload removed
// the account. It is the only goroutine that calls the account's Client, so
// the budget has a single owner.
func (s *Scheduler) Run(ctx context.Context) {
	defer s.closeClient()
	for ctx.Err() == nil {
		bundle := s.config.Load()
		acct := bundle.Account(s.account)
		if acct == nil {
			level.Info(s.logger).Log("msg", "The account is no longer configured; its requests stop")
			return
		}
		s.changed = s.watchlist.Changed(s.account)
		s.updateCycle(bundle, acct)
		now := s.clock.Now()
		st := settingsOf(bundle, acct)
		j, at := s.next(now, st)
		s.forgetShared(ctx)
		if at.After(now) {
			if !s.wait(ctx, at, s.earliest(now, st)) {
				return
			}
			// Re-plan even when the timer fired: a Refresh, a discovery or
			// a reload may have changed what should go next.
			continue
		}
		if s.shared != nil {
			var ok bool
			if j, ok = s.takeShared(ctx, acct, st); !ok {
				continue
			}
		}
		s.send(ctx, bundle, acct, j)
	}
}

// wait blocks until the clock reaches until, and reports false when ctx is
// done. A change of the watchlist (an alert, a discovery, a reload) may put
// another request first, but none can go out before earliest: so a change
// re-plans at once only when the budget is idle, and otherwise shortens the
// wait to earliest and re-plans then, once, however many changes come in
// between.
func (s *Scheduler) wait(ctx context.Context, until, earliest time.Time) bool {
	// A change that came while a request was in flight is taken before
	// starting the timer, so a wait never outlasts a change it missed.
	select {
	case <-s.changed:
		if !earliest.After(s.clock.Now()) {
			return true
		}
		until = earlier(until, earliest)
	default:
	}
	for {
		// During a 401 pause the timer also wakes every tokenPoll, to
		// look for a new token.
		wake, polling := until, s.authUntil.After(s.clock.Now())
		if polling {
			wake = earlier(until, s.clock.Now().Add(tokenPoll))
		}
		t := s.clock.NewTimer(s.clock.Until(wake))
		select {
		case <-t.Chan():
			if !polling || !wake.Before(until) || s.tokenChanged() {
				return true
			}
		case <-s.changed:
			t.Stop()
			if !earliest.After(s.clock.Now()) {
				return true
			}
			until = earlier(until, earliest)
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// tokenChanged reads the token again during a 401 pause and ends the pause
// when the token in force is no longer the rejected one: rotated in its
// file, or brought by a reload. A file that cannot be read (half written,
// say) keeps the pause; the retry at its end reports why.
func (s *Scheduler) tokenChanged() bool {
	acct := s.config.Load().Account(s.account)
	if acct == nil {
		return true // gone: Run returns
	}
	token := acct.Token
	_ = token.Reread()
	if token.Get() == s.rejected {
		return false
	}
	s.authUntil = time.Time{}
	level.Info(s.logger).Log("msg", "The token changed during the pause after a 401; retrying now")
	return true
}

// earliest is when the next request may go out at the soonest: after the
// spacing since the last one, and after any pause.
func (s *Scheduler) earliest(now time.Time, st settings) time.Time {
	earliest := later(later(now, s.pauseUntil), s.authUntil)
	// With replicas the store's budget spaces the requests of all of them.
	if !s.lastSend.IsZero() && s.shared == nil {
		earliest = later(earliest, s.lastSend.Add(spacing(st.rpm)))
	}
	return earliest
}

// next picks the request that should go out next and the earliest time it
// may: a request retried after a 429 or 401 first, then Refresh'ed addresses
// in the order asked (every other slot at most while other reads are due),
// then /me when due, then the address read least recently once its interval
// (or error backoff) has passed. It asks the due-time index (due.go), not
// every address.
func (s *Scheduler) next(now time.Time, st settings) (job, time.Time) {
	earliest := s.earliest(now, st)
	if r := s.retry; r != nil {
		if r.me {
			return *r, earliest
		}
		if _, ok := s.watchlist.Email(s.account, r.key); ok {
			return job{key: r.key}, earliest
		}
		s.retry = nil // a reload removed it during the pause
	}
	s.due.update(s.watchlist, s.account, st.interval, now)

	oldestKey, oldestAt, haveOldest := s.due.oldest(earliest)
	// Refreshes take at most every other slot while other reads are due, so
	// a storm of alerts cannot starve addresses never read or long stale.
	if k, ok := s.due.firstUrgent(); ok && !(s.lastUrgent && haveOldest && !oldestAt.After(earliest)) {
		return job{urgent: true, key: k}, earliest
	}
	// A zero lastMe (not sent yet) makes /me due at once.
	meAt := later(earliest, s.lastMe.Add(meEvery(st)))
	j, at := job{key: oldestKey}, oldestAt
	if !haveOldest || !oldestAt.Before(meAt) {
		j, at = job{me: true}, meAt
	}
	// A refresh another replica holds goes once its holder is done.
	if k, heldAt, ok := s.due.firstHeld(); ok && later(earliest, heldAt).Before(at) {
		return job{urgent: true, key: k}, later(earliest, heldAt)
	}
	return j, at
}

// readyAt is when an address may be read again: interval after its last
// attempt, or sooner when that attempt failed (its backoff is capped at the
// interval).
func readyAt(sch watchlist.Schedule, interval time.Duration) time.Time {
	if sch.LastAttempt.IsZero() {
		return time.Time{}
	}
	wait := interval
	if sch.Failures > 0 {
		// The shift is bounded so that a long outage cannot overflow it.
		wait = min(wait, addressBackoffMin<<min(sch.Failures-1, 16))
	}
	return sch.LastAttempt.Add(wait)
}

// readBefore orders addresses least recently attempted first, never-read
// ones first of all, in the order they were added.
func readBefore(a, b watchlist.Schedule) bool {
	if !a.LastAttempt.Equal(b.LastAttempt) {
		return a.LastAttempt.Before(b.LastAttempt)
	}
	return a.Order < b.Order
}

// send makes one request and records what it taught us.
func (s *Scheduler) send(ctx context.Context, bundle *config.Bundle, acct *config.AccountBundle, j job) {
	var email string
	if !j.me {
		var ok bool
		if email, ok = s.watchlist.Email(s.account, j.key); !ok {
			if s.shared != nil {
				// Not read: a replica that still watches it need not
				// wait for the lease.
				s.releaseShared(j, 0)
			}
			return // removed (or moved to another account) since next() picked it
		}
	}
	sent := s.clock.Now()
	if s.shared != nil {
		// Ready again after the interval unless the outcome says sooner.
		readyIn := settingsOf(bundle, acct).interval
		if j.me {
			readyIn = meEvery(settingsOf(bundle, acct))
		}
		defer func() { s.releaseShared(j, readyIn) }()
		s.readyIn = &readyIn
		defer func() { s.readyIn = nil }()
	}
	s.lastSend = sent
	s.lastUrgent = j.urgent
	s.retry = nil
	if j.me {
		s.lastMe = sent
	} else {
		s.watchlist.Started(j.key, sent)
	}

	var (
		me       api.Me
		breaches api.Breaches
		rl       breach.RateLimit
		err      error
	)
	client := s.clientOf(bundle, acct)
	logger := log.With(s.logger, "endpoint", api.EndpointMe)
	if j.me {
		me, rl, err = client.Me(ctx)
	} else {
		logger = log.With(s.logger, "endpoint", api.EndpointBreaches, "address", s.watchlist.Label(j.key))
		breaches, rl, err = client.Breaches(ctx, email)
	}
	if ctx.Err() != nil {
		s.setReadyIn(0) // another replica reads it at once
		return          // shutting down: the outcome says nothing about the API
	}
	done := s.clock.Now()
	level.Debug(logger).Log("msg", "API request", "outcome", outcome(err), "duration", done.Sub(sent))

	s.followRateLimit(acct, rl, done, logger)
	if s.pauseAll(acct, j, err, done, logger) {
		return
	}
	if j.me {
		s.recordMe(me, err, logger)
		return
	}
	s.recordBreaches(settingsOf(bundle, acct), j, breaches, err, done, logger)
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
func (s *Scheduler) followRateLimit(acct *config.AccountBundle, rl breach.RateLimit, now time.Time, logger log.Logger) {
	if !rl.HasLimit && !rl.HasRemaining && rl.Reset.IsZero() {
		return
	}
	s.out.SetRateLimit(s.account, rl)
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
	s.pauseShared(acct, now, until)
	level.Debug(logger).Log("msg", "No requests left in this rate-limit window; waiting for its reset", "until", until)
}

// pauseAll handles the errors that concern the key rather than the address
// or call: a 429 or a 401 stops every request for a while, and the same
// request goes first afterwards. It reports whether err was one of them.
// This is the one place a 401 is handled: the client reported it, the
// token file is re-read here, and every request pauses.
func (s *Scheduler) pauseAll(acct *config.AccountBundle, j job, err error, now time.Time, logger log.Logger) bool {
	var apiErr *api.Error
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.Kind {
	case api.KindRateLimited:
		until := apiErr.RetryAt
		if !until.After(now) {
			until = nextMinute(now)
		}
		until = earlier(until, now.Add(maxPause)).Add(s.jitter(resetJitter))
		level.Warn(logger).Log("msg", "Rate limited by the API; pausing all requests until the window resets", "until", until)
		// A 429 on /me leaves breach_api_up alone: it says nothing about
		// whether the API works, and the retry goes first once the window
		// resets.
		s.pauseUntil = later(s.pauseUntil, until)
		s.pauseShared(acct, now, until)
	case api.KindUnauthorized:
		// The backoff keeps a revoked token from spending the budget; a
		// token rotated in the file ends it (now, or by tokenChanged
		// during the pause).
		s.authBackoff = min(max(2*s.authBackoff, authBackoffMin), authBackoffMax)
		rejected := acct.Token.Get()
		if s.rereadToken(acct, logger) {
			level.Warn(logger).Log("msg", "The API rejected the token; retrying with the new one", "err", err)
		} else {
			s.authUntil, s.rejected = now.Add(s.authBackoff), rejected
			level.Warn(logger).Log("msg", "The API rejected the token; pausing all requests until the token file changes", "retry_in", s.authBackoff, "err", err)
		}
		// A rejected token makes the whole API unusable, whichever endpoint
		// said so; /me may not be sent again until the token works.
		s.out.SetAccount(s.account, "", false)
	default:
		return false
	}
	s.retry = &j
	s.setReadyIn(0) // whichever replica sends it next
	return true
}

// rereadToken reads the token file after a 401 and reports whether it held
// a new token.
func (s *Scheduler) rereadToken(acct *config.AccountBundle, logger log.Logger) bool {
	switch err := acct.Token.Reread(); {
	case err == nil:
		level.Info(logger).Log("msg", "Picked up a new token from the token file")
		return true
	case errors.Is(err, config.ErrSameToken):
		level.Warn(logger).Log("msg", "The API rejected the token and "+err.Error())
	default:
		level.Error(logger).Log("msg", "The token could not be re-read; keeping the old one", "err", err)
	}
	return false
}

func (s *Scheduler) recordMe(me api.Me, err error, logger log.Logger) {
	if err != nil {
		s.out.SetAccount(s.account, "", false)
		level.Warn(logger).Log("msg", "API identity check failed", "err", err)
		return
	}
	s.authBackoff = 0
	s.out.SetAccount(s.account, me.Plan, true)
	// Once per change of plan: the service delivers webhooks to some plans
	// only, and a receiver waiting for none is worth knowing about.
	if s.webhook && me.Plan != s.warnedPlan && breach.PlanWithoutWebhooks(me.Plan) {
		level.Warn(s.logger).Log("msg", "A webhook secret is configured but the service delivers webhooks only to the pro and business plans", "plan", me.Plan)
	}
	s.warnedPlan = me.Plan
}

// recordBreaches stores an answer (200, 403, 404). Any other error keeps the
// cached values and backs off this address only.
func (s *Scheduler) recordBreaches(st settings, j job, b api.Breaches, err error, now time.Time, logger log.Logger) {
	kind, _ := api.KindOf(err)
	var failedBefore int
	switch {
	case err == nil:
		failedBefore = s.out.Answered(s.account, j.key, breach.Verified, b.Sources, s.lastSend, now)
	case kind == api.KindUnverified:
		failedBefore = s.out.Answered(s.account, j.key, breach.Unverified, nil, s.lastSend, now)
	case kind == api.KindNotMonitored && s.out.Drop(s.account, j.key):
		// A discovered address the account does not monitor was never one
		// of its addresses: an alert made it up, so it goes at once.
		level.Info(logger).Log("msg", "The API does not monitor this discovered address; no longer watching it")
	case kind == api.KindNotMonitored:
		failedBefore = s.out.Answered(s.account, j.key, breach.NotMonitored, nil, s.lastSend, now)
	default:
		s.addressFailed(st, j, err, logger)
		return
	}
	s.authBackoff = 0
	if failedBefore > 0 {
		level.Info(logger).Log("msg", "Reading the address works again", "failed_attempts", failedBefore)
	}
}

// addressFailed backs off one address. It warns when the address starts
// failing, not on every retry: with the API down, every address fails.
func (s *Scheduler) addressFailed(st settings, j job, err error, logger log.Logger) {
	sch, ok := s.out.Failed(s.account, j.key, s.lastSend)
	if !ok {
		return // a reload removed it while the request was in flight
	}
	retryIn := readyAt(sch, st.interval).Sub(sch.LastAttempt)
	s.setReadyIn(retryIn)
	lvl := level.Debug
	if sch.Failures == 1 {
		lvl = level.Warn
	}
	lvl(logger).Log("msg", "Reading the address failed; keeping its last values and backing off", "err", err,
		"failed_attempts", sch.Failures, "retry_in", retryIn)
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
