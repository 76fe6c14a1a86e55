// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// fakeStore is the shared store (internal/sharedstore) kept on the test's fake
// clock. The real store keeps time on its own real clock, which a
// fake-clock test cannot drive, so these tests check what the scheduler
// does with the store's answers, over simulated hours in milliseconds. The
// real store's semantics are tested in internal/sharedstore against
// redis-server, and two real replicas in internal/exporter's
// TestReplicasShareOneStore. The rules here are the store's scripts': a
// GCRA budget per key, and claims with a lease and a ready time per item.
type fakeStore struct {
	clock clockwork.Clock

	mu      sync.Mutex
	err     error                // when set, the calls in failing fail with it
	failing map[string]bool      // by method name; nil: all (the store is down)
	tat     map[string]time.Time // per budget key: when its next slot starts
	// used are, per replica and budget key, the restart delay of a
	// budget it used, as the real Client remembers them. The fake's keys
	// never expire, so a use is never too old to tell a lost key.
	used   map[string]time.Duration
	claims map[string]fakeClaim // per scope and item
	ready  map[string]time.Time // per scope and item: when it may be claimed unless urgent

	pauses   []fakePause
	releases []fakeRelease
	refused  []fakeRelease // claims refused; readyIn unused
}

type fakeClaim struct {
	holder string
	until  time.Time
}

type fakePause struct {
	at time.Time
	d  time.Duration
}

type fakeRelease struct {
	holder, item string
	at           time.Time
	readyIn      time.Duration
}

func newFakeStore(clock clockwork.Clock) *fakeStore {
	return &fakeStore{clock: clock, tat: map[string]time.Time{}, used: map[string]time.Duration{}, claims: map[string]fakeClaim{}, ready: map[string]time.Time{}}
}

// as is the store as one replica sees it: claims are held by name.
func (f *fakeStore) as(name string) SharedStore { return storeAs{f, name} }

// claim makes holder hold item from now for lease, as another replica's
// claim would.
func (f *fakeStore) claim(holder, scope, item string, lease time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims[scope+"/"+item] = fakeClaim{holder: holder, until: f.clock.Now().Add(lease)}
}

// flush empties the store, as FLUSHALL or a restart without its data do;
// the replicas remember what they used.
func (f *fakeStore) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tat, f.claims, f.ready = map[string]time.Time{}, map[string]fakeClaim{}, map[string]time.Time{}
}

// setErr fails the named methods, or all of them, with err; nil ends it.
func (f *fakeStore) setErr(err error, methods ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.failing = err, nil
	for _, m := range methods {
		if f.failing == nil {
			f.failing = map[string]bool{}
		}
		f.failing[m] = true
	}
}

// fails returns the error method fails with, if any. Called with f.mu held.
func (f *fakeStore) fails(method string) error {
	if f.failing == nil || f.failing[method] {
		return f.err
	}
	return nil
}

func (f *fakeStore) log() (pauses []fakePause, releases, refused []fakeRelease) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakePause(nil), f.pauses...), append([]fakeRelease(nil), f.releases...), append([]fakeRelease(nil), f.refused...)
}

type storeAs struct {
	*fakeStore
	holder string
}

// next is the key's next slot as the store's scripts find it: a key the
// replica used that is missing was lost, and starts again after the delay
// the replica's last Reserve asked for. Called with s.mu held.
func (s storeAs) next(key string, now time.Time) (time.Time, bool) {
	if tat, ok := s.tat[key]; ok {
		return later(tat, now), true
	}
	if restart, used := s.used[s.holder+"/"+key]; used {
		return now.Add(restart), false
	}
	return now, false
}

func (s storeAs) Reserve(_ context.Context, key string, spacing, horizon time.Duration) (time.Duration, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Reserve"); err != nil {
		return 0, false, err
	}
	now := s.clock.Now()
	tat, stored := s.next(key, now)
	s.used[s.holder+"/"+key] = horizon + spacing
	if tat.Sub(now) > horizon {
		if !stored {
			s.tat[key] = tat
		}
		return tat.Sub(now), false, nil
	}
	s.tat[key] = tat.Add(spacing)
	return tat.Sub(now), true, nil
}

func (s storeAs) Pause(_ context.Context, key string, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Pause"); err != nil {
		return err
	}
	now := s.clock.Now()
	tat, _ := s.next(key, now)
	s.tat[key] = later(tat, now.Add(d))
	if _, ok := s.used[s.holder+"/"+key]; !ok {
		s.used[s.holder+"/"+key] = 0 // used, with no restart delay asked for yet
	}
	s.pauses = append(s.pauses, fakePause{at: now, d: d})
	return nil
}

func (s storeAs) Claim(_ context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Claim"); err != nil {
		return false, err
	}
	now, id := s.clock.Now(), scope+"/"+item
	if c, held := s.claims[id]; held && c.until.After(now) || !urgent && s.ready[id].After(now) {
		s.refused = append(s.refused, fakeRelease{holder: s.holder, item: item, at: now})
		return false, nil
	}
	s.claims[id] = fakeClaim{holder: s.holder, until: now.Add(lease)}
	return true, nil
}

func (s storeAs) Release(_ context.Context, scope, item string, readyIn time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Release"); err != nil {
		return err
	}
	now, id := s.clock.Now(), scope+"/"+item
	s.ready[id] = now.Add(readyIn)
	if s.claims[id].holder == s.holder {
		delete(s.claims, id)
	}
	s.releases = append(s.releases, fakeRelease{holder: s.holder, item: item, at: now, readyIn: readyIn})
	return nil
}

func (s storeAs) Forget(_ context.Context, scope string, items []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Forget"); err != nil {
		return err
	}
	for _, item := range items {
		delete(s.ready, scope+"/"+item)
	}
	return nil
}

func (s storeAs) Prune(_ context.Context, scope string, keep func(string) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fails("Prune"); err != nil {
		return err
	}
	for id := range s.ready {
		if sc, item, _ := strings.Cut(id, "/"); sc == scope && !keep(item) {
			delete(s.ready, id)
		}
	}
	return nil
}

// newSharedHarness is the one-scheduler harness with a shared store.
func newSharedHarness(t *testing.T, st Settings) (*harness, *fakeStore) {
	t.Helper()
	var store *fakeStore
	h := newHarness(t, st, func(o *Options) {
		store = newFakeStore(o.Clock)
		o.SharedStore = store.as("r0")
	})
	return h, store
}

// itemFor names an address as the scheduler's claims do.
func itemFor(email string) string { return itemOf(job{key: breach.Key(email)}) }

// testLease is the claims' lease under the tests' settings (no api.timeout).
var testLease = claimLease(settings{})

// slot is the shared budget's spacing at the service's 60 a minute.
var slot = sharedSpacing(60)

func TestSharedBudgetIsUsedAndNeverExceeded(t *testing.T) {
	h, _ := newSharedHarness(t, Settings{Addresses: emails(200), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: 5 * time.Minute})
	h.api.limit = 60
	h.start().advance(30 * time.Minute)
	assertSharedBudget(t, h.api, 30)
}

// assertSharedBudget checks the service's view of a 60-a-minute key over
// the test's minutes: no 429, no fixed minute over 60, the requests of all
// replicas paced by the shared budget's 59 a minute (the API's rate-limit
// headers alone would keep the first two, by bursts), and at least 95% of
// the budget used after the first minute.
func assertSharedBudget(t *testing.T, a *fakeAPI, minutes int) {
	t.Helper()
	calls := a.log()
	if n := a.count429(); n != 0 {
		t.Fatalf("server answered 429 %d times, want 0", n)
	}
	assertUnixMinutes(t, calls, 60)
	assertBudget(t, calls, 59)
	after := 0
	for _, c := range calls {
		if !c.at.Before(t0.Add(time.Minute)) {
			after++
		}
	}
	used := float64(after) / float64(60*(minutes-1))
	t.Logf("budget use after the first minute: %d calls in %d minutes = %.4f", after, minutes-1, used)
	if used < 0.95 {
		t.Fatalf("budget use %.3f, want at least 0.95", used)
	}
}

func TestClaimHeldElsewhereWaitsForItsLease(t *testing.T) {
	const held = "user000@example.com"
	h, store := newSharedHarness(t, Settings{Addresses: emails(5), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	store.claim("other", breach.DefaultAccount, itemFor(held), testLease)
	h.start().advance(10 * time.Second)
	if n := len(h.api.log()); n != 5 {
		t.Fatalf("%d calls in the first 10 seconds, want 5 (/me and the 4 addresses not held)", n)
	}
	_, _, refused := store.log()
	if len(refused) == 0 || refused[0].item != itemFor(held) {
		t.Fatalf("refused claims %v, want the held address's first", refused)
	}
	h.advance(time.Minute)
	reads := h.api.callsTo(held)
	if len(reads) != 1 {
		t.Fatalf("%s read %d times, want once, after the lease", held, len(reads))
	}
	if lease, latest := t0.Add(testLease), refused[0].at.Add(testLease+slot); reads[0].at.Before(lease) || reads[0].at.After(latest) {
		t.Fatalf("%s read at %s, want after the lease ran out at %s and by %s", held, reads[0].at, lease, latest)
	}
}

func TestStoreDownStopsRequests(t *testing.T) {
	for name, methods := range map[string][]string{
		"down":            nil,
		"reserve failing": {"Reserve"}, // the budget alone decides
	} {
		t.Run(name, func(t *testing.T) {
			h, store := newSharedHarness(t, Settings{Addresses: emails(100), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
			h.start().advance(10 * time.Second)
			if len(h.api.log()) == 0 {
				t.Fatal("no calls while the store answered")
			}
			store.setErr(errors.New("connection refused"), methods...)
			// The slot the scheduler waits for was taken before the
			// failure, and may be used.
			h.advance(slot)
			before := len(h.api.log())
			h.advance(time.Minute)
			if n := len(h.api.log()); n != before {
				t.Fatalf("%d calls while the store failed, want none", n-before)
			}
			store.setErr(nil)
			back := h.clock.Now()
			h.advance(10 * time.Second)
			calls := h.api.log()
			if len(calls) == before {
				t.Fatal("no calls after the store came back")
			}
			if first, latest := calls[before].at, back.Add(storeRetry+slot); first.After(latest) {
				t.Fatalf("first call after the store came back at %s, want by %s", first, latest)
			}
		})
	}
}

func TestReleaseSaysWhenReadyAgain(t *testing.T) {
	const interval = 10 * time.Minute
	h, store := newSharedHarness(t, Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: interval, MeInterval: time.Hour})
	limited := false
	h.api.script = func(c call, rl *breach.RateLimit) error {
		switch c.email {
		case "user001@example.com":
			return &api.Error{Kind: api.KindServer, StatusCode: 500}
		case "user002@example.com":
			if !limited {
				limited = true
				return &api.Error{Kind: api.KindRateLimited, StatusCode: 429, RetryAt: c.at.Add(5 * time.Second)}
			}
		}
		return nil
	}
	h.start().advance(30 * time.Second)
	_, releases, _ := store.log()
	var got []string
	for _, r := range releases {
		got = append(got, fmt.Sprintf("%s %s", r.item, r.readyIn))
	}
	want := []string{
		fmt.Sprintf("%s %s", meItem, time.Hour),                                 // /me: its interval
		fmt.Sprintf("%s %s", itemFor("user000@example.com"), interval),          // 200
		fmt.Sprintf("%s %s", itemFor("user001@example.com"), addressBackoffMin), // 500: the backoff
		fmt.Sprintf("%s %s", itemFor("user002@example.com"), time.Duration(0)),  // 429: retried at once
		fmt.Sprintf("%s %s", itemFor("user002@example.com"), interval),          // the retry's 200
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("releases\n%v\nwant\n%v", got, want)
	}
}

// replicaSet runs several schedulers, the replicas, on one fake clock,
// against one fake API and one fake store. Like the harness it keeps them
// all parked whenever test code runs, and jumps the clock from one wake-up
// to the next. The replicas' requests touch each other only through the
// store and the API, neither of which wakes a parked replica, so after a
// jump exactly the replicas whose timers fired run, and the test waits
// until each of them waits again.
type replicaSet struct {
	t     *testing.T
	clock *clockwork.FakeClock
	api   *fakeAPI
	store *fakeStore
	token tokenFile
	reps  []*replica
	idle  chan parked
}

type replica struct {
	reg   *watchlist.List
	s     *Scheduler
	until time.Time

	mu    sync.Mutex
	calls []call // this replica's requests
}

type parked struct {
	r     int
	until time.Time
}

// taggedClock is reportingClock for one of several replicas.
type taggedClock struct {
	*clockwork.FakeClock
	r    int
	idle chan<- parked
	done <-chan struct{}
}

func (c taggedClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.idle <- parked{c.r, c.Now().Add(d)}:
	case <-c.done:
	}
	return t
}

// replicaClient tells which replica sent each request.
type replicaClient struct {
	*fakeAPI
	r *replica
}

func (c replicaClient) Me(ctx context.Context) (api.Me, breach.RateLimit, error) {
	c.r.record(call{me: true, at: c.clock.Now()})
	return c.fakeAPI.Me(ctx)
}

func (c replicaClient) Breaches(ctx context.Context, email string) (api.Breaches, breach.RateLimit, error) {
	c.r.record(call{email: email, at: c.clock.Now()})
	return c.fakeAPI.Breaches(ctx, email)
}

func (r *replica) record(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.n = len(r.calls)
	r.calls = append(r.calls, c)
}

func (r *replica) log() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// followAll stands in for the store's stream of outcomes, delivered at
// once: every replica's watchlist learns each answer, as the exporter's
// replicas do when they follow the stream.
type followAll struct {
	self *watchlist.List
	all  []*watchlist.List
}

func (f followAll) Answered(_, key, state string, sources []breach.SourceState, sent, at time.Time) int {
	n := 0
	for _, w := range f.all {
		if w == f.self {
			n = w.Answered(key, state, sources, at)
			continue
		}
		w.Attempted(key, sent)
		w.Answered(key, state, sources, at)
	}
	return n
}

func (f followAll) Failed(_, key string, sent time.Time) (watchlist.Schedule, bool) {
	for _, w := range f.all {
		if w != f.self {
			w.Attempted(key, sent)
			w.Failed(key)
		}
	}
	return f.self.Failed(key)
}

func (f followAll) Drop(_, key string) bool { return f.self.Drop(key) }

func (f followAll) SetAccount(account, plan string, up bool) { f.self.SetAccount(account, plan, up) }

func (f followAll) SetRateLimit(account string, rl breach.RateLimit) {
	f.self.SetRateLimit(account, rl)
}

// newReplicaSet starts n replicas. With follow, every replica's watchlist
// learns each outcome at once; without, each learns only its own, and the
// store's claims alone keep the replicas from reading an address twice.
func newReplicaSet(t *testing.T, st Settings, n int, follow bool) *replicaSet {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	rs := &replicaSet{t: t, clock: clock, api: &fakeAPI{clock: clock, plan: "pro"}, store: newFakeStore(clock), idle: make(chan parked)}
	regs := make([]*watchlist.List, n)
	for i := range regs {
		regs[i] = watchlist.New()
	}
	ctx, cancel := context.WithCancel(context.Background())
	stop := make(chan struct{})
	var running sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		close(stop)
		running.Wait()
	})
	for i, reg := range regs {
		cur := config.NewCurrent(bundle(st, &rs.token))
		reg.Sync(nil, cur.Load().Config.Watched(), breach.LabelEmail, 1000)
		r := &replica{reg: reg}
		var out Outcomes
		if follow {
			out = followAll{self: reg, all: regs}
		}
		r.s = New(Options{
			Watchlist:   reg,
			Config:      cur,
			Account:     breach.DefaultAccount,
			Connect:     func(*config.Bundle, *config.AccountBundle) Client { return replicaClient{rs.api, r} },
			Clock:       taggedClock{FakeClock: clock, r: i, idle: rs.idle, done: stop},
			Logger:      log.NewNopLogger(),
			Jitter:      halfJitter,
			SharedStore: rs.store.as(fmt.Sprintf("r%d", i)),
			Outcomes:    out,
		})
		rs.reps = append(rs.reps, r)
	}
	awake := map[int]bool{}
	for i, r := range rs.reps {
		awake[i] = true
		running.Add(1)
		go func() {
			defer running.Done()
			r.s.Run(ctx)
		}()
	}
	rs.park(awake)
	return rs
}

// park waits until every replica in awake waits again. The real-time
// timeout only turns a replica that never waits into a failure.
func (rs *replicaSet) park(awake map[int]bool) {
	rs.t.Helper()
	for len(awake) > 0 {
		select {
		case p := <-rs.idle:
			if !awake[p.r] {
				rs.t.Fatalf("replica %d started waiting while it should have been waiting already", p.r)
			}
			delete(awake, p.r)
			rs.reps[p.r].until = p.until
		case <-time.After(10 * time.Second):
			rs.t.Fatalf("replicas %v did not start waiting", awake)
		}
	}
}

// advance moves the clock on by d, stopping at every instant a replica
// wakes up.
func (rs *replicaSet) advance(d time.Duration) {
	rs.t.Helper()
	end := rs.clock.Now().Add(d)
	for {
		next := rs.reps[0].until
		for _, r := range rs.reps {
			next = earlier(next, r.until)
		}
		if next.After(end) {
			break
		}
		if d := rs.clock.Until(next); d > 0 {
			rs.clock.Advance(d)
		}
		awake := map[int]bool{}
		for i, r := range rs.reps {
			if !r.until.After(next) {
				awake[i] = true
			}
		}
		rs.park(awake)
	}
	if d := rs.clock.Until(end); d > 0 {
		rs.clock.Advance(d)
	}
}

func TestReplicasShareTheBudgetAndTheWork(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rs := newReplicaSet(t, Settings{Addresses: emails(200), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: 5 * time.Minute}, n, true)
			rs.api.limit = 60
			rs.advance(30 * time.Minute)
			assertSharedBudget(t, rs.api, 30)

			// Each address is read by one replica at a time, at most once
			// per interval across them all.
			byAddress := map[string][]call{}
			for _, c := range rs.api.log() {
				byAddress[c.email] = append(byAddress[c.email], c)
			}
			for _, e := range emails(200) {
				reads := byAddress[e]
				sort.Slice(reads, func(i, j int) bool { return reads[i].at.Before(reads[j].at) })
				if len(reads) < 5 {
					t.Fatalf("%s read %d times in 30 minutes, want at least 5", e, len(reads))
				}
				for i := 1; i < len(reads); i++ {
					if gap := reads[i].at.Sub(reads[i-1].at); gap < time.Minute {
						t.Fatalf("%s read again after %s (%s, %s), within its interval", e, gap, reads[i-1], reads[i])
					}
				}
			}
			// The work is shared: every replica sends a fair part.
			total := len(rs.api.log())
			for i, r := range rs.reps {
				if got := len(r.log()); got < total/(2*n) {
					t.Errorf("replica %d sent %d of %d requests, want at least %d", i, got, total, total/(2*n))
				}
			}
		})
	}
}

// oneRateLimit answers the nth call with a 429 whose window resets 20 s
// later, and refuses nothing else.
type oneRateLimit struct {
	n                int
	mu               sync.Mutex // replicas woken at the same instant call at once
	limitedAt, reset time.Time
}

func (o *oneRateLimit) script(c call, _ *breach.RateLimit) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c.n != o.n {
		return nil
	}
	o.limitedAt, o.reset = c.at, c.at.Add(20*time.Second)
	return &api.Error{Kind: api.KindRateLimited, StatusCode: 429, RetryAt: o.reset}
}

// times are when the 429 was sent and when its window resets; zero before.
func (o *oneRateLimit) times() (limitedAt, reset time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.limitedAt, o.reset
}

func TestRateLimitPausesEveryReplica(t *testing.T) {
	rs := newReplicaSet(t, Settings{Addresses: emails(100), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}, 2, true)
	// One 429, and nothing else refused: a replica that kept sending
	// during the pause would not be stopped by a 429 of its own.
	limit := &oneRateLimit{n: 10}
	rs.api.script = limit.script
	rs.advance(time.Minute)
	limitedAt, reset := limit.times()

	pauses, _, _ := rs.store.log()
	until := reset.Add(resetJitter / 2)
	if len(pauses) == 0 || !pauses[0].at.Equal(limitedAt) || pauses[0].d != until.Sub(limitedAt) {
		t.Errorf("pauses %v, want the store paused at the 429 (%s) for %s", pauses, limitedAt, until.Sub(limitedAt))
	}
	// Each replica may already hold one slot, taken before the pause;
	// none takes another until the reset.
	for i, r := range rs.reps {
		var during, after []call
		for _, c := range r.log() {
			switch {
			case c.at.After(limitedAt) && c.at.Before(until):
				during = append(during, c)
			case !c.at.Before(until):
				after = append(after, c)
			}
		}
		if len(during) > 1 {
			t.Errorf("replica %d sent %v during the pause, want at most the one slot it held", i, during)
		}
		if len(after) == 0 {
			t.Errorf("replica %d sent nothing after the reset", i)
		}
	}
	if calls := rs.api.log(); calls[len(calls)-1].at.Before(until) {
		t.Fatal("no calls after the reset")
	}
}

func TestClaimsAloneKeepReplicasApart(t *testing.T) {
	// Each replica learns only its own outcomes, as when the stream lags:
	// every replica plans every address, and only the store's claims and
	// ready times keep a second replica from reading it again.
	rs := newReplicaSet(t, Settings{Addresses: emails(30), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: 5 * time.Minute}, 3, false)
	rs.api.limit = 60
	rs.advance(10 * time.Minute)

	calls := rs.api.log()
	if n := rs.api.count429(); n != 0 {
		t.Fatalf("server answered 429 %d times, want 0", n)
	}
	assertBudget(t, calls, 59)
	byAddress := map[string][]call{}
	for _, c := range calls {
		byAddress[c.email] = append(byAddress[c.email], c)
	}
	for _, e := range emails(30) {
		reads := byAddress[e]
		if len(reads) < 9 {
			t.Fatalf("%s read %d times in 10 minutes, want about once a minute", e, len(reads))
		}
		for i := 1; i < len(reads); i++ {
			if gap := reads[i].at.Sub(reads[i-1].at); gap < time.Minute {
				t.Fatalf("%s read again after %s (%s, %s), within its interval", e, gap, reads[i-1], reads[i])
			}
		}
	}
}

// A refresh of an address another replica holds (its read in flight, or
// the replica dead with its lease running) waits for that claim while this
// replica goes on with the other due reads, and is read once the claim is
// gone.
func TestRefreshHeldElsewhereDoesNotStall(t *testing.T) {
	const alerted = "user000@example.com"
	h, store := newSharedHarness(t, Settings{Addresses: emails(100), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	h.start().advance(5 * time.Second)

	store.claim("other", breach.DefaultAccount, itemFor(alerted), testLease)
	h.reg.Refresh(alerted) // Run waits for its slot: no re-plan to wait for
	before := len(h.api.log())
	h.advance(20 * time.Second)
	if n := len(h.api.log()) - before; n < 15 {
		t.Fatalf("%d reads in the 20 s another replica held the refreshed address, want the others read meanwhile", n)
	}
	h.advance(15 * time.Second) // the lease runs out
	if n := len(h.api.callsTo(alerted)); n != 2 {
		t.Fatalf("the refreshed address was read %d times, want again once the other replica's claim is gone", n)
	}
}

// claimHook runs after each claim the store grants.
type claimHook struct {
	SharedStore
	after func(item string)
}

func (c claimHook) Claim(ctx context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error) {
	ok, err := c.SharedStore.Claim(ctx, scope, item, lease, urgent)
	if ok && c.after != nil {
		c.after(item)
	}
	return ok, err
}

// An address a reload removes between its claim and its request gives the
// claim back at once: the other replicas, whose reload may come later,
// need not wait for the lease.
func TestClaimOfARemovedAddressIsReleased(t *testing.T) {
	const removed = "user001@example.com"
	var store *fakeStore
	var h *harness
	h = newHarness(t, Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}, func(o *Options) {
		store = newFakeStore(o.Clock)
		o.SharedStore = claimHook{SharedStore: store.as("r0"), after: func(item string) {
			if item == itemFor(removed) {
				h.reg.Sync(nil, []breach.Address{{Email: "user000@example.com"}, {Email: "user002@example.com"}}, breach.LabelEmail, 1000)
			}
		}}
	})
	h.start().advance(10 * time.Second)
	if n := len(h.api.callsTo(removed)); n != 0 {
		t.Fatalf("%s read %d times after it was removed", removed, n)
	}
	store.mu.Lock()
	c, held := store.claims[breach.DefaultAccount+"/"+itemFor(removed)]
	store.mu.Unlock()
	if held && c.until.After(h.clock.Now()) {
		t.Fatalf("the removed address's claim is still held until %s", c.until)
	}
}

// The request a 429 refused is sent again once, after the pause, by
// whichever replica claims it first: the refusing replica's retry does not
// read it again after another replica did.
func TestRetryAfterARateLimitIsReadOnce(t *testing.T) {
	rs := newReplicaSet(t, Settings{Addresses: emails(100), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}, 2, true)
	var (
		mu      sync.Mutex
		limited string
	)
	rs.api.script = func(c call, rl *breach.RateLimit) error {
		mu.Lock()
		defer mu.Unlock()
		if c.n != 10 || c.me {
			return nil
		}
		limited = c.email
		return &api.Error{Kind: api.KindRateLimited, StatusCode: 429, RetryAt: c.at.Add(20 * time.Second)}
	}
	rs.advance(3 * time.Minute)
	mu.Lock()
	email := limited
	mu.Unlock()
	if email == "" {
		t.Fatal("no address was refused")
	}
	if reads := rs.api.callsTo(email); len(reads) != 2 {
		t.Fatalf("%s sent %d times (%v), want twice: the 429 and one read after the pause", email, len(reads), reads)
	}
}

// A store that loses the budget while the replicas poll (a restart without
// its data, a FLUSHALL) loses neither the slots it handed out nor a
// 429's pause: the replicas that used it start it again only after both.
func TestBudgetLostByTheStoreStaysWithinIt(t *testing.T) {
	rs := newReplicaSet(t, Settings{Addresses: emails(300), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}, 3, true)
	rs.api.limit = 60
	limit := &oneRateLimit{n: 100}
	rs.api.script = limit.script
	for limitedAt, _ := limit.times(); limitedAt.IsZero(); limitedAt, _ = limit.times() {
		rs.advance(time.Second)
	}
	rs.store.flush()
	rs.advance(5 * time.Minute)

	limitedAt, reset := limit.times()
	calls := rs.api.log()
	if n := rs.api.count429(); n != 0 {
		t.Errorf("server answered 429 %d times past its limit, want 0", n)
	}
	assertUnixMinutes(t, calls, 60)
	assertBudget(t, calls, 59)
	until := reset.Add(resetJitter / 2)
	for i, r := range rs.reps {
		var during []call
		for _, c := range r.log() {
			if c.at.After(limitedAt) && c.at.Before(until) {
				during = append(during, c)
			}
		}
		if len(during) > 1 {
			t.Errorf("replica %d sent %v during the pause, want at most the one slot it held", i, during)
		}
	}
	if last := calls[len(calls)-1].at; last.Sub(limitedAt) < 3*time.Minute {
		t.Errorf("the last call went %s after the 429: polling did not go on", last.Sub(limitedAt))
	}
}

// A claim outlasts the longest request the config allows: with
// api.timeout at 2m, another replica must not take the address over while
// the request may still be in flight.
func TestClaimOutlastsTheLongestRequest(t *testing.T) {
	const timeout = 2 * time.Minute
	h, store := newSharedHarness(t, Settings{Addresses: emails(2), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour, Timeout: timeout})
	var (
		mu     sync.Mutex
		leases []time.Duration
	)
	h.api.script = func(c call, _ *breach.RateLimit) error {
		item := meItem
		if !c.me {
			item = itemFor(c.email)
		}
		store.mu.Lock()
		lease := store.claims[breach.DefaultAccount+"/"+item].until.Sub(c.at)
		store.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		leases = append(leases, lease)
		return nil
	}
	h.start().advance(10 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(leases) != 3 {
		t.Fatalf("%d requests, want 3 (/me and 2 addresses)", len(leases))
	}
	for i, lease := range leases {
		if lease <= timeout {
			t.Errorf("request %d went out under a claim of %s, not longer than api.timeout %s", i, lease, timeout)
		}
	}
}
