// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// walkPick is what the due-time index must answer, found the way the
// scheduler planned before it had one: by walking every address. now is
// also the earliest a request may go.
type walkPick struct {
	urgent, held, oldest string
	heldAt, oldestAt     time.Time
}

func walk(w *watchlist.List, account string, deferred map[string]time.Time, interval time.Duration, now time.Time) walkPick {
	var p walkPick
	var urgent, oldest watchlist.Schedule
	w.Plan(account, func(k string, e *watchlist.Entry) {
		sch := e.Schedule
		until := deferred[k]
		if !until.After(now) {
			until = time.Time{}
		}
		switch {
		case sch.Urgent != 0 && !until.IsZero():
			if p.held == "" || until.Before(p.heldAt) {
				p.held, p.heldAt = k, until
			}
		case sch.Urgent != 0:
			if p.urgent == "" || sch.Urgent < urgent.Urgent {
				p.urgent, urgent = k, sch
			}
		default:
			at := later(later(now, readyAt(sch, interval)), until)
			if p.oldest == "" || at.Before(p.oldestAt) || at.Equal(p.oldestAt) && readBefore(sch, oldest) {
				p.oldest, p.oldestAt, oldest = k, at, sch
			}
		}
	})
	return p
}

func (x *dueIndex) pick(now time.Time) walkPick {
	var p walkPick
	p.urgent, _ = x.firstUrgent()
	p.held, p.heldAt, _ = x.firstHeld()
	p.oldest, p.oldestAt, _ = x.oldest(now)
	return p
}

// The index answers what a walk over every address answers, through
// random Syncs, discoveries, drops, refreshes, answers, failures, other
// replicas' attempts, claims held elsewhere, interval changes and the
// passing of time, for two accounts each with its own index.
func TestDueIndexAgreesWithAWalk(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { agreesWithAWalk(t, seed) })
	}
}

func agreesWithAWalk(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	accounts := []string{"a", "b"}
	w := watchlist.New()
	now := t0
	interval := 10 * time.Minute
	emails := make([]string, 60)
	for i := range emails {
		emails[i] = fmt.Sprintf("user%03d@example.com", i)
	}
	sync := func() {
		var addrs []breach.Address
		for _, e := range emails {
			if rng.IntN(4) > 0 {
				addrs = append(addrs, breach.Address{Email: e, Account: accounts[rng.IntN(2)]})
			}
		}
		w.Sync(accounts, addrs, breach.LabelEmail, 10)
	}
	sync()
	index := map[string]*dueIndex{"a": newDueIndex(), "b": newDueIndex()}
	deferred := map[string]map[string]time.Time{"a": {}, "b": {}}
	some := func() string { return emails[rng.IntN(len(emails))] }
	ops := []func(){
		sync,
		func() {
			w.RecordAlert(accounts[rng.IntN(2)], fmt.Sprintf("new%02d@example.com", rng.IntN(20)), watchlist.AlertDelta{})
		},
		func() { w.Drop(breach.Key(fmt.Sprintf("new%02d@example.com", rng.IntN(20)))) },
		func() { w.Refresh(some()) },
		func() { w.Started(breach.Key(some()), now) },
		func() { w.Attempted(breach.Key(some()), now.Add(-time.Duration(rng.IntN(600))*time.Second)) },
		func() { w.Answered(breach.Key(some()), breach.Verified, nil, now) },
		func() { w.Failed(breach.Key(some())) },
		func() { now = now.Add(time.Duration(rng.IntN(90)) * time.Second) },
		func() { interval = time.Duration(1+rng.IntN(20)) * time.Minute },
		func() {
			acct, k := accounts[rng.IntN(2)], breach.Key(some())
			until := now.Add(time.Duration(1+rng.IntN(60)) * time.Second)
			index[acct].update(w, acct, interval, now)
			if _, ok := index[acct].byKey[k]; ok {
				deferred[acct][k] = until
				index[acct].deferUntil(k, until, now)
			}
		},
	}
	for step := range 5000 {
		ops[rng.IntN(len(ops))]()
		for _, acct := range accounts {
			x := index[acct]
			x.update(w, acct, interval, now)
			for k := range deferred[acct] {
				if _, ok := x.byKey[k]; !ok {
					delete(deferred[acct], k) // gone: a deferral ends with the address
				}
			}
			got, want := x.pick(now), walk(w, acct, deferred[acct], interval, now)
			if got != want {
				t.Fatalf("step %d, account %s: the index picks\n%+v\na walk picks\n%+v", step, acct, got, want)
			}
			if n := w.AccountLen(acct); len(x.byKey) != n {
				t.Fatalf("step %d, account %s: the index holds %d addresses, the watchlist %d", step, acct, len(x.byKey), n)
			}
		}
	}
}

// Changes past the number of addresses, not drained in between, make the
// watchlist hand over all of them at once; the index is then as right.
func TestDueIndexAfterMoreChangesThanAddresses(t *testing.T) {
	changes := func(w *watchlist.List) {
		for i := range 300 {
			email := fmt.Sprintf("new%03d@example.com", i)
			w.RecordAlert(breach.DefaultAccount, email, watchlist.AlertDelta{})
			w.Started(breach.Key(email), t0.Add(time.Duration(i)*time.Second))
			if i%2 == 0 {
				w.Drop(breach.Key(email))
			}
		}
		w.Started(breach.Key("a@example.com"), t0)
	}
	start := func() (*watchlist.List, *dueIndex) {
		w := watchlist.New()
		w.Sync(nil, []breach.Address{{Email: "a@example.com"}, {Email: "b@example.com"}}, breach.LabelEmail, 1000)
		x := newDueIndex()
		x.update(w, breach.DefaultAccount, time.Hour, t0)
		return w, x
	}

	w, _ := start()
	changes(w)
	if !w.ScheduleChanges(breach.DefaultAccount, func(string, watchlist.Schedule, bool) {}) {
		t.Fatal("450 changes over at most 152 addresses were listed one by one")
	}

	w, x := start()
	changes(w)
	now := t0.Add(time.Hour + 100*time.Second)
	x.update(w, breach.DefaultAccount, time.Hour, now)
	if got, want := x.pick(now), walk(w, breach.DefaultAccount, nil, time.Hour, now); got != want {
		t.Fatalf("the index picks\n%+v\na walk picks\n%+v", got, want)
	}
	if len(x.byKey) != w.AccountLen(breach.DefaultAccount) {
		t.Fatalf("the index holds %d addresses, the watchlist %d", len(x.byKey), w.AccountLen(breach.DefaultAccount))
	}
}
