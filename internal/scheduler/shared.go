// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// SharedStore is the Redis or Valkey the replicas share
// (*sharedstore.Client): one request budget per API key and claims on the
// work. nil when the exporter runs alone.
type SharedStore interface {
	Reserve(ctx context.Context, key string, spacing, horizon time.Duration) (wait time.Duration, ok bool, err error)
	Pause(ctx context.Context, key string, d time.Duration) error
	Claim(ctx context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error)
	Release(ctx context.Context, scope, item string, readyIn time.Duration) error
	// Forget and Prune remove addresses no longer watched from the ready
	// times: the ones named, or all that keep rejects.
	Forget(ctx context.Context, scope string, items []string) error
	Prune(ctx context.Context, scope string, keep func(item string) bool) error
}

// Outcomes is where the scheduler writes what its requests taught it. It
// has two implementations: local below, the watchlist itself, when the
// exporter runs alone; with a shared store, internal/exporter's replicas
// (replicated.go), which publish to the stream every replica's watchlist
// follows, so that all of them serve the same state.
type Outcomes interface {
	Answered(account, key, state string, sources []breach.SourceState, sent, at time.Time) (failedBefore int)
	// Failed returns the address's schedule after the failure, for its
	// backoff.
	Failed(account, key string, sent time.Time) (watchlist.Schedule, bool)
	Drop(account, key string) bool
	SetAccount(account, plan string, up bool)
	SetRateLimit(account string, rl breach.RateLimit)
}

// local writes outcomes straight into the watchlist.
type local struct{ w *watchlist.List }

func (l local) Answered(_, key, state string, sources []breach.SourceState, _, at time.Time) int {
	return l.w.Answered(key, state, sources, at)
}
func (l local) Failed(_, key string, _ time.Time) (watchlist.Schedule, bool) { return l.w.Failed(key) }
func (l local) Drop(_, key string) bool                                      { return l.w.Drop(key) }
func (l local) SetAccount(account, plan string, up bool)                     { l.w.SetAccount(account, plan, up) }
func (l local) SetRateLimit(account string, rl breach.RateLimit)             { l.w.SetRateLimit(account, rl) }

const (
	// claimMargin is how long a claim holds past the longest request:
	// recording and publishing the outcome (each step bounded by the
	// store's timeouts of a few seconds), then the release.
	claimMargin = 20 * time.Second
	// claimTries bounds the claims one budget slot tries: another replica
	// may hold the address this one planned, before its answer arrives.
	claimTries = 8
	// storeRetry is the pause after the store failed to answer: without
	// the shared budget no request may go out, so polling waits for the
	// store (the replicas keep serving the values they have).
	storeRetry = 2 * time.Second
	meItem     = "me"
	// urgentRetry is how soon a refresh another replica's claim held is
	// tried again.
	urgentRetry = 2 * time.Second
	// budgetHorizon is the furthest ahead a slot of the shared budget is
	// taken, and the longest pause (a 429's, capped at maxPause, plus its
	// jitter). A budget the store lost (a restart or a flush while
	// replicas poll) starts again only after it: by then every slot taken
	// before, and the pause, are over, and no fixed minute holds more than
	// the budget (SharedStore.Reserve).
	budgetHorizon = maxPause + resetJitter
	// pruneTimeout bounds the pass over the store's ready times at start,
	// which pages through one field per address ever read.
	pruneTimeout = 10 * time.Second
)

// claimLease is how long a claim on an address or on /me holds: a replica
// that dies has its work taken over within it. It outlasts the longest
// request the config allows, api.timeout (which bounds a request, its body
// included; the budget's wait comes before the claim): 30 s at the
// default 10 s.
func claimLease(st settings) time.Duration { return st.timeout + claimMargin }

// sharedSpacing is the least time between two requests of all replicas on
// one key. One request less than the budget a minute: the replicas' sends
// reach the service with different delays, and one slot of margin keeps
// any fixed minute of the service within the budget (59 of 60 is 98%).
func sharedSpacing(rpm int) time.Duration {
	return (time.Minute + time.Duration(max(rpm-1, 1)) - 1) / time.Duration(max(rpm-1, 1))
}

// budgetKey names a key's budget in the store: a digest, never the token.
// A rotated token is a new key with a budget of its own, as at the service.
func budgetKey(acct *config.AccountBundle) string {
	sum := sha256.Sum256([]byte(acct.Token.Get()))
	return hex.EncodeToString(sum[:12])
}

// itemOf names an address in the store's claims: a digest, so that a
// listing of the store's keys shows no address.
func itemOf(j job) string {
	if j.me {
		return meItem
	}
	sum := sha256.Sum256([]byte(j.key))
	return hex.EncodeToString(sum[:12])
}

// takeShared takes a slot of the key's shared budget, waits for it, and
// claims the request to send in it: the first one planned that no other
// replica holds. It reports false when there is none, or the store did
// not answer (then requests pause for storeRetry).
func (s *Scheduler) takeShared(ctx context.Context, acct *config.AccountBundle, st settings) (job, bool) {
	if !s.takeSlot(ctx, acct, st) {
		return job{}, false
	}
	lease := claimLease(st)
	for range claimTries {
		now := s.clock.Now()
		j, at := s.next(now, st)
		if at.After(now) {
			return job{}, false // nothing due: the slot goes unused
		}
		// A retry after a 429 or 401 is not urgent: its release made it
		// ready at once, and a replica that read it since then (its ready
		// time later again) has done the retry's work.
		ok, err := s.shared.Claim(ctx, s.account, itemOf(j), lease, j.urgent)
		if err != nil {
			s.storeFailed(err)
			return job{}, false
		}
		if ok {
			return j, true
		}
		// Another replica reads it, or read it and its answer is on the
		// way: look again once the claim would have run out.
		switch {
		case j.me:
			s.lastMe = now
		case j.urgent:
			// A refresh waits for the holder's read to end, which is
			// usually soon; an address read when the lease runs out.
			s.due.deferUntil(j.key, now.Add(urgentRetry), now)
		default:
			s.due.deferUntil(j.key, now.Add(lease), now)
		}
		if s.retry != nil && s.retry.me == j.me && s.retry.key == j.key {
			s.retry = nil
		}
	}
	return job{}, false
}

// takeSlot takes a slot of the key's shared budget and waits for it. It
// reports false when ctx ended, the store did not answer (requests then
// pause for storeRetry), or the next free slot is past the horizon.
func (s *Scheduler) takeSlot(ctx context.Context, acct *config.AccountBundle, st settings) bool {
	wait, ok, err := s.shared.Reserve(ctx, budgetKey(acct), sharedSpacing(st.rpm), budgetHorizon)
	if err != nil {
		s.storeFailed(err)
		return false
	}
	if !ok {
		// The next free slot is further off than any pause: the store
		// lost the budget and starts it again after the horizon.
		s.pauseUntil = later(s.pauseUntil, s.clock.Now().Add(wait-budgetHorizon))
		return false
	}
	if wait <= 0 {
		return true
	}
	t := s.clock.NewTimer(wait)
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

// releaseShared gives the claim back after a request: the item is ready
// again after readyIn (its interval, or its backoff; 0 when a 429 or 401
// left it to retry).
func (s *Scheduler) releaseShared(j job, readyIn time.Duration) {
	// Not the request's context: at shutdown the claim still goes back.
	ctx, cancel := context.WithTimeout(context.Background(), storeRetry)
	defer cancel()
	if err := s.shared.Release(ctx, s.account, itemOf(j), max(readyIn, 0)); err != nil {
		level.Debug(s.logger).Log("msg", "Could not release a claim in the store; it runs out by itself", "err", err)
	}
}

// pauseShared holds every replica's requests on the key until until.
func (s *Scheduler) pauseShared(acct *config.AccountBundle, now, until time.Time) {
	if s.shared == nil || !until.After(now) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeRetry)
	defer cancel()
	if err := s.shared.Pause(ctx, budgetKey(acct), until.Sub(now)); err != nil {
		s.storeFailed(err)
	}
}

// storeFailed pauses this replica's requests for storeRetry.
func (s *Scheduler) storeFailed(err error) {
	level.Debug(s.logger).Log("msg", "The store did not answer; requests wait for it", "err", err)
	s.pauseUntil = later(s.pauseUntil, s.clock.Now().Add(storeRetry))
}

// setReadyIn says when the claimed request is ready again, once its
// outcome is known (replicas only).
func (s *Scheduler) setReadyIn(d time.Duration) {
	if s.readyIn != nil {
		*s.readyIn = d
	}
}

// forgetShared removes from the store's ready times the addresses the
// due-time index lost (a reload or a 404 removed them), so the store does
// not keep every address ever read. Once the index has read every address
// after the start, it prunes every address this replica does not watch
// instead (again at the next such read if that failed): those removed
// while no replica ran. A
// failure leaves the fields, which cost room but nothing else: one whose
// ready time passed is as good as none.
func (s *Scheduler) forgetShared(ctx context.Context) {
	gone := s.due.takeGone()
	prune := !s.pruned && s.due.reloads > s.pruneTried
	if s.shared == nil || len(gone) == 0 && !prune {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	var err error
	if prune {
		s.pruneTried = s.due.reloads
		keep := s.due.items()
		err = s.shared.Prune(ctx, s.account, func(item string) bool { return keep[item] })
		s.pruned = err == nil
	} else {
		items := make([]string, len(gone))
		for i, k := range gone {
			items[i] = itemOf(job{key: k})
		}
		err = s.shared.Forget(ctx, s.account, items)
	}
	if err != nil {
		level.Debug(s.logger).Log("msg", "Could not remove addresses no longer watched from the store", "err", err)
	}
}
