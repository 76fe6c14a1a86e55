// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Settings are what a test configures: the parts of a config bundle the
// scheduler follows.
type Settings struct {
	Addresses         []string
	RequestsPerMinute int
	Interval          time.Duration
	MeInterval        time.Duration
	Timeout           time.Duration // api.timeout
}

// tokenFile stands in for api.token_file: what it holds (svc_ak_test until
// set) and how often it was read.
type tokenFile struct {
	reads   atomic.Int32
	content atomic.Pointer[string]
}

func (f *tokenFile) current() string {
	if p := f.content.Load(); p != nil {
		return *p
	}
	return "svc_ak_test"
}

func (f *tokenFile) read() (string, error) {
	f.reads.Add(1)
	return f.current(), nil
}

func (f *tokenFile) write(token string) { f.content.Store(&token) }

// bundle is the config bundle of st, reading its token from file.
func bundle(st Settings, file *tokenFile) *config.Bundle {
	cfg := &config.Config{
		API:     config.APIConfig{RequestsPerMinute: st.RequestsPerMinute, Timeout: model.Duration(st.Timeout)},
		Refresh: config.RefreshConfig{Interval: model.Duration(st.Interval), MeInterval: model.Duration(st.MeInterval)},
		Labels:  config.LabelsConfig{Address: breach.LabelEmail},
	}
	for _, e := range st.Addresses {
		cfg.Addresses = append(cfg.Addresses, config.Address{Email: e})
	}
	return &config.Bundle{Config: cfg, Accounts: []*config.AccountBundle{{
		Name: breach.DefaultAccount, Config: cfg.AccountsInForce()[0], Token: config.NewTokenSource(file.current(), file.read),
	}}}
}

// t0 is deliberately not on a minute boundary, so the server's fixed minutes
// and the scheduler's start do not line up.
var t0 = time.Date(2030, 1, 2, 3, 4, 37, 123456789, time.UTC)

// call is one request the fake API received.
type call struct {
	n     int // index among all calls
	at    time.Time
	me    bool
	email string
}

func (c call) String() string {
	what := "me"
	if !c.me {
		what = c.email
	}
	return fmt.Sprintf("#%d %s at %s", c.n, what, c.at.Format("15:04:05.000"))
}

// fakeAPI records every call on the fake clock and answers 200 unless
// scripted otherwise. With limit > 0 it enforces limit requests per fixed
// Unix minute and sends the three rate-limit headers, as the service does.
type fakeAPI struct {
	clock *clockwork.FakeClock
	plan  string
	limit int
	// script, when set, may fail a call or change its rate-limit headers.
	script func(c call, rl *breach.RateLimit) error
	// during, when set, runs inside a call, on Run's goroutine.
	during func(c call)

	mu         sync.Mutex
	calls      []call
	window     time.Time
	windowUsed int
	served429  int
}

func (f *fakeAPI) handle(me bool, email string) (breach.RateLimit, error) {
	f.mu.Lock()
	c := call{n: len(f.calls), at: f.clock.Now(), me: me, email: email}
	f.calls = append(f.calls, c)
	var rl breach.RateLimit
	var err error
	if f.limit > 0 {
		minute := c.at.Truncate(time.Minute)
		if !minute.Equal(f.window) {
			f.window, f.windowUsed = minute, 0
		}
		rl = breach.RateLimit{Limit: f.limit, HasLimit: true, HasRemaining: true, Reset: minute.Add(time.Minute)}
		if f.windowUsed >= f.limit {
			f.served429++
			err = &api.Error{Kind: api.KindRateLimited, StatusCode: 429, RetryAt: rl.Reset}
		} else {
			f.windowUsed++
			rl.Remaining = f.limit - f.windowUsed
		}
	}
	f.mu.Unlock()
	if err == nil && f.script != nil {
		err = f.script(c, &rl)
	}
	if f.during != nil {
		f.during(c)
	}
	return rl, err
}

func (f *fakeAPI) Me(ctx context.Context) (api.Me, breach.RateLimit, error) {
	rl, err := f.handle(true, "")
	if err != nil {
		return api.Me{}, rl, err
	}
	return api.Me{ID: "u1", Email: "owner@example.com", Plan: f.plan}, rl, nil
}

func (f *fakeAPI) Breaches(ctx context.Context, email string) (api.Breaches, breach.RateLimit, error) {
	rl, err := f.handle(false, email)
	if err != nil {
		return api.Breaches{}, rl, err
	}
	return api.Breaches{Email: email, Sources: []breach.SourceState{{Source: "archive", BreachCount: 1}}}, rl, nil
}

func (f *fakeAPI) log() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func (f *fakeAPI) count429() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served429
}

// callsTo returns the calls for one address, or /me's when email is "".
func (f *fakeAPI) callsTo(email string) []call {
	var out []call
	for _, c := range f.log() {
		if c.me == (email == "") && c.email == email {
			out = append(out, c)
		}
	}
	return out
}

// harness runs a Scheduler on a fake clock and keeps it "parked": whenever
// test code runs, Run is waiting, and h.until says until when. Advancing the
// clock jumps straight from one wake-up to the next, so simulated hours take
// milliseconds and no step can be skipped.
type harness struct {
	t      *testing.T
	clock  *clockwork.FakeClock
	api    *fakeAPI
	reg    *watchlist.List
	config *config.Current
	token  tokenFile
	s      *Scheduler
	logs   *testkit.SyncBuffer
	idle   chan time.Time
	until  time.Time
}

// reportingClock is the fake clock, injected into the scheduler, that tells
// the test each time Run starts a timer and until when: Run starts one only
// to wait, after taking any pending watchlist change. The test must receive
// every report, so the harness always parks after waking Run.
type reportingClock struct {
	*clockwork.FakeClock
	idle chan<- time.Time
	done <-chan struct{}
}

func (c reportingClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.idle <- c.Now().Add(d):
	case <-c.done:
	}
	return t
}

// halfJitter makes the jitter visible and predictable: always half its limit.
func halfJitter(limit time.Duration) time.Duration { return limit / 2 }

// newHarness builds the harness; with, when given, adjusts the scheduler's
// options (a shared store, say) before New.
func newHarness(t *testing.T, st Settings, with ...func(*Options)) *harness {
	t.Helper()
	clock := clockwork.NewFakeClockAt(t0)
	h := &harness{
		t:     t,
		clock: clock,
		api:   &fakeAPI{clock: clock, plan: "pro"},
		reg:   watchlist.New(),
		logs:  &testkit.SyncBuffer{},
		idle:  make(chan time.Time),
	}
	h.config = config.NewCurrent(bundle(st, &h.token))
	h.reg.Sync(nil, h.config.Load().Config.Watched(), breach.LabelEmail, 1000)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	o := Options{
		Watchlist: h.reg,
		Config:    h.config,
		Account:   breach.DefaultAccount,
		Connect:   func(*config.Bundle, *config.AccountBundle) Client { return h.api },
		Clock:     reportingClock{FakeClock: clock, idle: h.idle, done: done},
		Logger:    log.NewLogfmtLogger(h.logs),
		Jitter:    halfJitter,
	}
	for _, f := range with {
		f(&o)
	}
	h.s = New(o)
	return h
}

// entry is one address as the collector would see it.
func (h *harness) entry(email string) (watchlist.Entry, bool) {
	for _, e := range h.reg.View().Entries {
		if e.Address.Key() == breach.Key(email) {
			return e, true
		}
	}
	return watchlist.Entry{}, false
}

// cycle is the round length the scheduler last published.
func (h *harness) cycle() time.Duration { return h.reg.View().Accounts[0].Cycle }

// start runs the scheduler until the test ends and waits for it to park.
func (h *harness) start() *harness {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.s.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		<-done
	})
	h.park()
	return h
}

// park waits until Run waits again. The real-time timeout only turns a
// scheduler that never waits (a busy loop) into a failure instead of a hang.
func (h *harness) park() {
	h.t.Helper()
	select {
	case h.until = <-h.idle:
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not start waiting")
	}
}

// advanceTo moves the clock to end, stopping at every instant Run wakes up.
func (h *harness) advanceTo(end time.Time) {
	h.t.Helper()
	for !h.until.After(end) {
		h.advanceClock(h.until)
		h.park()
	}
	h.advanceClock(end)
}

// advanceClock never moves the clock back: a wait that Run abandoned for a
// wake-up may report an instant the clock has already passed.
func (h *harness) advanceClock(to time.Time) {
	if d := h.clock.Until(to); d > 0 {
		h.clock.Advance(d)
	}
}

func (h *harness) advance(d time.Duration) { h.advanceTo(h.clock.Now().Add(d)) }

// The wrappers below wait for Run to re-plan after being woken.

// refresh waits for a re-plan only when the address was not queued yet: a
// repeated Refresh does not wake Run. Run is parked, so the check is stable.
func (h *harness) refresh(email string) bool {
	h.t.Helper()
	e, tracked := h.entry(email)
	queued := tracked && e.Schedule.Urgent == 0
	ok := h.reg.Refresh(email)
	if queued {
		h.park()
	}
	return ok
}

// add sends an alert for email, which discovers it when it is not watched;
// it reports whether it was discovered. Run re-plans unless the address was
// already queued.
func (h *harness) add(email string) bool {
	h.t.Helper()
	e, tracked := h.entry(email)
	wakes := !tracked || e.Schedule.Urgent == 0
	ok := h.reg.RecordAlert(breach.DefaultAccount, email, watchlist.AlertDelta{Source: "index", Severity: "info"}) == watchlist.AlertDiscovered
	if wakes {
		h.park()
	}
	return ok
}

// update reloads as the exporter does: one swap and one watchlist sync.
func (h *harness) update(st Settings) {
	h.t.Helper()
	h.config.Store(bundle(st, &h.token))
	h.reg.Sync(nil, h.config.Load().Config.Watched(), breach.LabelEmail, 1000)
	h.park()
}

func emails(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user%03d@example.com", i)
	}
	return out
}

// assertBudget fails when any 60-second window, at any offset, or any Unix
// minute holds more than rpm calls, or two calls are closer than 60s/rpm.
func assertBudget(t *testing.T, calls []call, rpm int) {
	t.Helper()
	assertUnixMinutes(t, calls, rpm)
	// The busiest window of any alignment starts at some call.
	for i := range calls {
		n := 0
		for j := i; j < len(calls) && calls[j].at.Sub(calls[i].at) < time.Minute; j++ {
			n++
		}
		if n > rpm {
			t.Fatalf("%d calls in the minute from %s, budget %d", n, calls[i], rpm)
		}
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap*time.Duration(rpm) < time.Minute {
			t.Fatalf("%s only %s after %s, budget %d/min", calls[i], gap, calls[i-1], rpm)
		}
	}
}

// assertUnixMinutes fails when a fixed Unix minute, the service's window,
// holds more than limit calls.
func assertUnixMinutes(t *testing.T, calls []call, limit int) {
	t.Helper()
	perMinute := map[int64]int{}
	for _, c := range calls {
		perMinute[c.at.Unix()/60]++
	}
	for m, n := range perMinute {
		if n > limit {
			t.Fatalf("%d calls in Unix minute %s, limit %d", n, time.Unix(m*60, 0).UTC(), limit)
		}
	}
}
