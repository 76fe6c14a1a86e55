// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testkit.ShareRedis(m))
}

func TestBudgetIsNeverExceeded(t *testing.T) {
	for _, rpm := range []int{1, 7, 55, 60} {
		t.Run(fmt.Sprint(rpm), func(t *testing.T) {
			h := newHarness(t, Settings{
				Addresses:         emails(200),
				RequestsPerMinute: rpm,
				Interval:          time.Minute, // far too short: the budget is the only limit
				MeInterval:        5 * time.Minute,
			})
			h.api.limit = rpm // a server enforcing exactly our budget per fixed minute
			h.start().advance(30 * time.Minute)

			calls := h.api.log()
			if want := 30 * rpm; len(calls) < want {
				t.Fatalf("%d calls in 30 minutes, want at least %d", len(calls), want)
			}
			assertBudget(t, calls, rpm)
			if n := h.api.count429(); n != 0 {
				t.Fatalf("server answered 429 %d times, want 0", n)
			}
		})
	}
}

func TestBudgetIsUsed(t *testing.T) {
	const rpm, measured = 55, 20
	h := newHarness(t, Settings{
		Addresses:         emails(500),
		RequestsPerMinute: rpm,
		Interval:          5 * time.Minute, // 500 addresses need ~9.1 minutes: the budget is the limit
		MeInterval:        5 * time.Minute,
	})
	h.api.limit = 60 // the service's limit
	h.start()
	// Steady state: measure minutes 10 to 30, after the first round.
	h.advance(10 * time.Minute)
	before := len(h.api.log())
	h.advance(measured * time.Minute)
	calls := h.api.log()

	used := float64(len(calls)-before) / (rpm * measured)
	t.Logf("budget use: %d calls in %d minutes at %d/min = %.4f", len(calls)-before, measured, rpm, used)
	if used < 0.95 {
		t.Fatalf("budget use %.3f, want at least 0.95", used)
	}
	assertBudget(t, calls, rpm)
	if n := h.api.count429(); n != 0 {
		t.Fatalf("server answered 429 %d times, want 0", n)
	}

	// Every address is read once per cycle, round robin.
	cycle := h.cycle()
	if want := minutes(500 / 54.8); !near(cycle, want) { // /me every 5 minutes takes 0.2 of the 55
		t.Fatalf("Cycle() = %s, want %s", cycle, want)
	}
	for _, e := range []string{"user000@example.com", "user250@example.com", "user499@example.com"} {
		reads := h.api.callsTo(e)
		if len(reads) < 3 {
			t.Fatalf("%s read %d times in 30 minutes, want at least 3", e, len(reads))
		}
		for i := 1; i < len(reads); i++ {
			if gap := reads[i].at.Sub(reads[i-1].at); gap < cycle-5*time.Second || gap > cycle+5*time.Second {
				t.Fatalf("%s re-read after %s, want about the cycle %s", e, gap, cycle)
			}
		}
	}
}

func TestAddressIsReadAtMostEveryInterval(t *testing.T) {
	h := newHarness(t, Settings{
		Addresses:         emails(500), // ~9.1 minutes of budget, inside the 15-minute interval
		RequestsPerMinute: 55,
		Interval:          15 * time.Minute,
		MeInterval:        5 * time.Minute,
	}).start()
	h.advance(40 * time.Minute)

	if got := h.cycle(); got != 15*time.Minute {
		t.Fatalf("Cycle() = %s, want the interval", got)
	}
	byAddress := map[string][]call{}
	for _, c := range h.api.log() {
		byAddress[c.email] = append(byAddress[c.email], c)
	}
	for _, e := range emails(500) {
		reads := byAddress[e]
		if len(reads) != 3 {
			t.Fatalf("%s read %d times in 40 minutes, want 3 (at 0, 15 and 30 minutes)", e, len(reads))
		}
		for i := 1; i < len(reads); i++ {
			if gap := reads[i].at.Sub(reads[i-1].at); gap < 15*time.Minute {
				t.Fatalf("%s re-read after %s, before the interval", e, gap)
			}
		}
	}
	// /me goes first, then the never-read addresses in config order.
	calls := h.api.log()
	if !calls[0].me {
		t.Fatalf("first call %s, want /me", calls[0])
	}
	var order []string
	for _, c := range calls {
		if !c.me && len(order) < 500 {
			order = append(order, c.email)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint(emails(500)) {
		t.Fatal("the first round did not read the addresses in config order")
	}
}

func TestRateLimitedPausesEverything(t *testing.T) {
	for _, tc := range []struct {
		name    string
		retryAt func(now time.Time) time.Time
		resume  func(now time.Time) time.Time
	}{
		{
			name:    "reset header",
			retryAt: func(now time.Time) time.Time { return now.Truncate(time.Second).Add(25 * time.Second) },
			resume: func(now time.Time) time.Time {
				return now.Truncate(time.Second).Add(25*time.Second + 500*time.Millisecond)
			},
		},
		{
			name:    "no reset header",
			retryAt: func(time.Time) time.Time { return time.Time{} },
			resume:  func(now time.Time) time.Time { return nextMinute(now).Add(500 * time.Millisecond) },
		},
		{
			name:    "reset beyond one window",
			retryAt: func(now time.Time) time.Time { return now.Add(time.Hour) },
			resume:  func(now time.Time) time.Time { return now.Add(maxPause + 500*time.Millisecond) },
		},
		{
			name:    "reset in the past",
			retryAt: func(now time.Time) time.Time { return now.Add(-time.Second) },
			resume:  func(now time.Time) time.Time { return nextMinute(now).Add(500 * time.Millisecond) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Settings{
				Addresses:         emails(20),
				RequestsPerMinute: 60,
				Interval:          15 * time.Minute,
				MeInterval:        5 * time.Minute,
			})
			h.api.script = func(c call, rl *breach.RateLimit) error {
				if c.n == 5 {
					return &api.Error{Kind: api.KindRateLimited, StatusCode: 429, RetryAt: tc.retryAt(c.at)}
				}
				return nil
			}
			h.start()
			h.advance(5 * time.Second) // past the 429 (call 5), inside the pause
			limited := h.api.log()[5]
			if n := len(h.api.log()); n != 6 {
				t.Fatalf("%d calls right after the 429, want 6", n)
			}
			// A Refresh during the pause waits too.
			if !h.refresh("user019@example.com") {
				t.Fatal("Refresh of a configured address returned false")
			}
			h.advance(2 * time.Minute)

			calls := h.api.log()
			retry, refreshed := calls[6], calls[7]
			if want := tc.resume(limited.at); !retry.at.Equal(want) {
				t.Fatalf("first call after the 429 at %s, want %s", retry.at, want)
			}
			if retry.email != limited.email {
				t.Fatalf("first call after the 429 was %s, want the retried %s", retry, limited.email)
			}
			if refreshed.email != "user019@example.com" {
				t.Fatalf("second call after the 429 was %s, want the refreshed address", refreshed)
			}
			if a, _ := h.entry(limited.email); a.State != breach.Verified {
				t.Fatalf("retried address state %q, want verified", a.State)
			}
		})
	}
}

func TestRemainingZeroIsHonoured(t *testing.T) {
	h := newHarness(t, Settings{
		Addresses:         emails(100),
		RequestsPerMinute: 55,
		Interval:          15 * time.Minute,
		MeInterval:        5 * time.Minute,
	})
	h.api.limit = 10 // someone else spends the rest of the key's budget
	h.start().advance(5 * time.Minute)

	calls := h.api.log()
	if n := h.api.count429(); n != 0 {
		t.Fatalf("server answered 429 %d times, want 0", n)
	}
	assertUnixMinutes(t, calls, 10)
	// Each window's first call waits for the reset plus jitter.
	for i := 1; i < len(calls); i++ {
		if calls[i].at.Unix()/60 != calls[i-1].at.Unix()/60 {
			if want := calls[i].at.Truncate(time.Minute).Add(500 * time.Millisecond); !calls[i].at.Equal(want) {
				t.Fatalf("%s opened a window, want it at the reset plus jitter %s", calls[i], want)
			}
		}
	}
	if len(calls) < 5*10 {
		t.Fatalf("%d calls in 5 minutes at 10 per window, want at least 50", len(calls))
	}
	bundle := h.reg.View().Accounts[0]
	if !bundle.HasRateLimit || bundle.RateLimit.Limit != 10 {
		t.Fatalf("store rate limit %+v, want the last headers", bundle.RateLimit)
	}
}

func TestRemainingZeroWithoutUsableReset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reset  func(now time.Time) time.Time
		resume func(now time.Time) time.Time
	}{
		{"absent", func(time.Time) time.Time { return time.Time{} }, func(now time.Time) time.Time { return nextMinute(now).Add(500 * time.Millisecond) }},
		{"past", func(now time.Time) time.Time { return now.Add(-time.Second) }, func(now time.Time) time.Time { return now.Add(time.Second) }},
		{"beyond one window", func(now time.Time) time.Time { return now.Add(time.Hour) }, func(now time.Time) time.Time { return now.Add(maxPause + 500*time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Settings{Addresses: emails(5), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
			h.api.script = func(c call, rl *breach.RateLimit) error {
				if c.n == 2 {
					*rl = breach.RateLimit{HasRemaining: true, Reset: tc.reset(c.at)}
				}
				return nil
			}
			h.start().advance(2 * time.Minute)
			calls := h.api.log()
			if want := tc.resume(calls[2].at); !calls[3].at.Equal(want) {
				t.Fatalf("call after Remaining 0 at %s, want %s", calls[3].at, want)
			}
		})
	}
}

func TestRefreshJumpsTheQueueAndCoalesces(t *testing.T) {
	h := newHarness(t, Settings{
		Addresses:         emails(10),
		RequestsPerMinute: 60,
		Interval:          15 * time.Minute,
		MeInterval:        time.Hour,
	}).start()
	h.advance(2 * time.Second) // /me, user000 and user001 sent; the next slot is at 3s

	// Both jump the queue, in the order first asked, taking every other slot
	// while never-read addresses wait; repeats before the request goes out
	// add nothing; case does not matter.
	for _, e := range []string{"USER009@Example.com", "user004@example.com", "user009@example.com", "user004@example.com", "user009@example.com"} {
		if !h.refresh(e) {
			t.Fatalf("Refresh(%s) of a configured address returned false", e)
		}
	}
	h.advance(10 * time.Minute)
	var got []string
	for _, c := range h.api.log()[3:] {
		got = append(got, c.email[:7])
	}
	want := "[user009 user002 user004 user003 user005 user006 user007 user008]"
	if fmt.Sprint(got) != want {
		t.Fatalf("reads after the Refreshes %v, want %s", got, want)
	}
	if at := h.api.callsTo("user009@example.com")[0].at; !at.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("refreshed address read at %s, want the next budget slot", at)
	}

	// A fresh address is read again at once: Refresh ignores the interval.
	asked := h.clock.Now()
	if !h.refresh("user004@example.com") {
		t.Fatal("Refresh returned false")
	}
	h.advance(time.Minute)
	reads := h.api.callsTo("user004@example.com")
	if len(reads) != 2 || !reads[1].at.Equal(asked) {
		t.Fatalf("reads of user004 %v, want a second one at %s", reads, asked)
	}

	if h.reg.Refresh("stranger@example.com") {
		t.Fatal("Refresh of an unknown address returned true")
	}
}

// A storm of alerts for one address cannot starve the others: refreshes get
// at most every other slot while other reads are due.
func TestRefreshStormDoesNotStarveOthers(t *testing.T) {
	h := newHarness(t, Settings{Addresses: emails(6), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	h.api.during = func(c call) { h.reg.Refresh("user000@example.com") } // an alert with every request
	h.start().advance(20 * time.Second)
	for _, e := range emails(6) {
		if len(h.api.callsTo(e)) == 0 {
			t.Errorf("%s never read during a refresh storm; calls %v", e, h.api.log())
		}
	}
	if n := len(h.api.callsTo("user000@example.com")); n < 5 {
		t.Errorf("the alerted address was re-read %d times in 20 slots, want it to keep every other slot", n)
	}
}

func TestRefreshDuringTheRequestReadsAgain(t *testing.T) {
	h := newHarness(t, Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	// An alert arrives while user001's request is in flight: that request may
	// predate the change, so the address is read once more.
	h.api.during = func(c call) {
		if c.email == "user001@example.com" && c.n == 2 {
			h.reg.Refresh(c.email)
		}
	}
	h.start().advance(time.Minute)
	calls := h.api.log()
	if len(calls) != 5 || calls[3].email != "user001@example.com" || calls[4].email != "user002@example.com" {
		t.Fatalf("calls %v, want me, user000, user001, user001 again, user002", calls)
	}
}

func TestFailingAddressBacksOffAlone(t *testing.T) {
	const bad = "user001@example.com"
	failing := false
	h := newHarness(t, Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: 10 * time.Minute, MeInterval: time.Hour})
	h.api.script = func(c call, rl *breach.RateLimit) error {
		if failing && c.email == bad {
			return &api.Error{Kind: api.KindServer, StatusCode: 503}
		}
		return nil
	}
	h.start().advance(time.Minute) // one good read of everything
	good, _ := h.entry(bad)
	failing = true
	h.advance(50 * time.Minute)

	reads := h.api.callsTo(bad)[1:]
	var gaps []time.Duration
	for i := 1; i < len(reads); i++ {
		gaps = append(gaps, reads[i].at.Sub(reads[i-1].at))
	}
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if fmt.Sprint(gaps[:len(want)]) != fmt.Sprint(want) {
		t.Fatalf("retry gaps %v, want %v (exponential from 30s, capped at the interval)", gaps, want)
	}
	// The same answer, not an equal one: the cache was not written.
	if a, _ := h.entry(bad); a.State != good.State || !a.LastRefresh.Equal(good.LastRefresh) ||
		len(a.Sources) != 1 || &a.Sources[0] != &good.Sources[0] {
		t.Fatalf("failing address's cached view changed to %+v, want the last good one kept", a)
	}
	for _, e := range []string{"user000@example.com", "user002@example.com"} {
		if n := len(h.api.callsTo(e)); n != 6 {
			t.Fatalf("%s read %d times in 51 minutes, want 6 (every 10 minutes)", e, n)
		}
	}
	if n := h.logs.Count("level=warn", "address="+bad); n != 1 {
		t.Fatalf("%d warnings about the failing address, want 1 (when it starts failing)", n)
	}

	// Success resets the backoff.
	failing = false
	h.advance(10 * time.Minute)
	last := h.api.callsTo(bad)
	failing = true
	h.advance(12 * time.Minute)
	after := h.api.callsTo(bad)[len(last):]
	if len(after) < 2 || after[1].at.Sub(after[0].at) != 30*time.Second {
		t.Fatalf("after a success, retries %v, want the backoff to restart at 30s", after)
	}
}

func TestAnswersSetTheState(t *testing.T) {
	h := newHarness(t, Settings{Addresses: []string{"ok@example.com", "unverified@example.com", "unknown@example.com"},
		RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	h.api.script = func(c call, rl *breach.RateLimit) error {
		switch c.email {
		case "unverified@example.com":
			return &api.Error{Kind: api.KindUnverified, StatusCode: 403}
		case "unknown@example.com":
			return &api.Error{Kind: api.KindNotMonitored, StatusCode: 404}
		}
		return nil
	}
	h.start().advance(time.Minute)
	for email, want := range map[string]string{
		"ok@example.com":         breach.Verified,
		"unverified@example.com": breach.Unverified,
		"unknown@example.com":    breach.NotMonitored,
	} {
		a, _ := h.entry(email)
		read := h.api.callsTo(email)[0].at
		if a.State != want || !a.LastRefresh.Equal(read) {
			t.Errorf("%s: state %q refreshed %s, want %q at %s", email, a.State, a.LastRefresh, want, read)
		}
	}
	if a, _ := h.entry("ok@example.com"); len(a.Sources) != 1 {
		t.Errorf("verified address has %d sources, want the 1 the API sent", len(a.Sources))
	}
	if n := h.logs.Count("level=warn"); n != 0 {
		t.Errorf("%d warnings for answers that are not faults", n)
	}
}

func TestMe(t *testing.T) {
	meFails := false
	h := newHarness(t, Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: 5 * time.Minute})
	h.api.script = func(c call, rl *breach.RateLimit) error {
		if c.me && meFails {
			return &api.Error{Kind: api.KindTransport}
		}
		return nil
	}
	h.start().advance(time.Second)
	if acc := h.reg.View().Accounts[0].Account; acc != (watchlist.Account{Plan: "pro", Up: true, Known: true}) {
		t.Fatalf("account after the first /me: %+v", acc)
	}
	h.advance(11 * time.Minute)
	mes := h.api.callsTo("")
	if len(mes) != 3 || !mes[0].at.Equal(t0) || mes[1].at.Sub(mes[0].at) != 5*time.Minute || mes[2].at.Sub(mes[1].at) != 5*time.Minute {
		t.Fatalf("/me calls %v, want at start and every 5 minutes", mes)
	}

	meFails = true
	h.advance(5 * time.Minute)
	if acc := h.reg.View().Accounts[0].Account; acc != (watchlist.Account{Plan: "pro", Up: false, Known: true}) {
		t.Fatalf("account after a failed /me: %+v, want down with the plan kept", acc)
	}
	if n := len(h.api.callsTo("user000@example.com")); n < 16 {
		t.Fatalf("a failing /me stopped the addresses: %d reads", n)
	}
}

func TestUnauthorizedBacksOffGlobally(t *testing.T) {
	rejected := 0
	h := newHarness(t, Settings{Addresses: emails(5), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	h.api.script = func(c call, rl *breach.RateLimit) error {
		if c.n >= 2 && rejected < 4 || c.n == 9 {
			rejected++
			return &api.Error{Kind: api.KindUnauthorized, StatusCode: 401}
		}
		return nil
	}
	h.start().advance(5 * time.Minute)
	calls := h.api.log()
	var gaps []time.Duration
	for i := 3; i <= 6; i++ {
		gaps = append(gaps, calls[i].at.Sub(calls[i-1].at))
		if calls[i].email != calls[2].email {
			t.Fatalf("%s after a 401, want the same request %s retried", calls[i], calls[2].email)
		}
	}
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second}; fmt.Sprint(gaps) != fmt.Sprint(want) {
		t.Fatalf("gaps after 401s %v, want %v", gaps, want)
	}
	if gap := calls[7].at.Sub(calls[6].at); gap != time.Second {
		t.Fatalf("after the token works again the next call came %s later, want one budget slot", gap)
	}
	if gap := calls[10].at.Sub(calls[9].at); gap != 10*time.Second {
		t.Fatalf("a later 401 paused for %s, want the backoff to restart at 10s", gap)
	}
	// Every 401 has the token file re-read, and so has every 2 s of a
	// pause (not its end, which retries): 10, 20, 40, 80 and 10 s.
	if n, want := int(h.token.reads.Load()), rejected+4+9+19+39+4; n != want {
		t.Fatalf("token file read %d times for %d 401s, want %d", n, rejected, want)
	}
	if n := h.logs.Count("level=warn", "same token"); n != rejected {
		t.Fatalf("%d warnings that the file holds the rejected token, want %d", n, rejected)
	}
}

// A token rotated in its file ends a 401 pause within tokenPoll, however
// long the backoff has grown; a reload bringing a new token does too.
func TestRotatedTokenEndsThePause(t *testing.T) {
	for _, how := range []string{"file", "reload"} {
		t.Run(how, func(t *testing.T) {
			st := Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}
			h := newHarness(t, st)
			h.token.write("svc_ak_old")
			h.config.Store(bundle(st, &h.token))
			h.api.script = func(c call, rl *breach.RateLimit) error {
				if h.config.Load().Accounts[0].Token.Get() == "svc_ak_old" {
					return &api.Error{Kind: api.KindUnauthorized, StatusCode: 401}
				}
				return nil
			}
			// 401s at 0, 10, 30, 70 and 150 s: the pause is 160 s long now.
			h.start().advance(3 * time.Minute)
			before := len(h.api.log())
			if before != 5 {
				t.Fatalf("%d calls in 3 minutes of 401s, want 5: %v", before, h.api.log())
			}
			rotated := h.clock.Now()
			h.token.write("svc_ak_new")
			if how == "reload" {
				h.update(st)
			}
			h.advance(10 * time.Second)
			calls := h.api.log()
			if len(calls) <= before {
				t.Fatalf("no request within 10 s of the new token")
			}
			if wait := calls[before].at.Sub(rotated); wait > tokenPoll {
				t.Fatalf("the new token went out %s after it was written, want at most %s", wait, tokenPoll)
			}
			if calls[before].email != calls[0].email {
				t.Fatalf("%s after the pause, want the rejected request %s first", calls[before], calls[0].email)
			}
			if len(calls) < before+4 {
				t.Fatalf("after the new token only %d more calls in 10 s", len(calls)-before)
			}
			if n := h.logs.Count("level=info", "token changed"); how == "file" && n != 1 {
				t.Fatalf("%d logs of the token change, want 1", n)
			}
		})
	}
}

func TestDiscoveredAddressDroppedOn404(t *testing.T) {
	h := newHarness(t, Settings{Addresses: []string{"kept@example.com"}, RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour})
	h.api.script = func(c call, rl *breach.RateLimit) error {
		if !c.me {
			return &api.Error{Kind: api.KindNotMonitored, StatusCode: 404}
		}
		return nil
	}
	h.start().advance(5 * time.Second)
	if !h.add("madeup@example.com") {
		t.Fatal("the alert did not discover its address")
	}
	h.advance(2 * time.Hour)
	if n := len(h.api.callsTo("madeup@example.com")); n != 1 {
		t.Fatalf("a discovered address answered 404 was read %d times, want once", n)
	}
	if _, ok := h.entry("madeup@example.com"); ok {
		t.Fatal("a discovered address answered 404 is still watched")
	}
	// A configured address the account does not monitor stays, and shows.
	if e, ok := h.entry("kept@example.com"); !ok || e.State != breach.NotMonitored {
		t.Fatalf("configured address after a 404: %+v, %v", e, ok)
	}
}

// closingAPI counts CloseIdleConnections, as the real client's would close
// its keep-alive connections.
type closingAPI struct {
	*fakeAPI
	closed *atomic.Int32
}

func (c closingAPI) CloseIdleConnections() { c.closed.Add(1) }

func TestReloadReplacesTheClient(t *testing.T) {
	st := Settings{Addresses: emails(2), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}
	h := newHarness(t, st)
	var built, closed atomic.Int32
	h.s.connect = func(*config.Bundle, *config.AccountBundle) Client {
		built.Add(1)
		return closingAPI{h.api, &closed}
	}
	h.start().advance(10 * time.Second)
	if built.Load() != 1 {
		t.Fatalf("%d clients for one bundle, want 1", built.Load())
	}
	h.update(st)
	h.advance(time.Hour)
	if built.Load() != 2 || closed.Load() != 1 {
		t.Fatalf("after a reload: %d clients built, %d closed; want 2 and 1", built.Load(), closed.Load())
	}
}

func TestUpdate(t *testing.T) {
	h := newHarness(t, Settings{Addresses: []string{"a@example.com", "b@example.com", "c@example.com"},
		RequestsPerMinute: 60, Interval: 10 * time.Minute, MeInterval: time.Hour}).start()
	h.advance(10 * time.Second) // everything read once
	if !h.add("found@example.com") {
		t.Fatal("Add of a new address returned false")
	}
	h.advance(10 * time.Second)

	before := len(h.api.log())
	lastSend := h.api.log()[before-1].at
	h.update(Settings{Addresses: []string{"B@example.com", "c@example.com", "d@example.com"},
		RequestsPerMinute: 6, Interval: 10 * time.Minute, MeInterval: time.Hour})
	h.advance(15 * time.Minute)
	calls := h.api.log()[before:]

	if calls[0].email != "d@example.com" || !calls[0].at.Equal(lastSend.Add(10*time.Second)) {
		t.Fatalf("first call after the update %s, want the new d@ one new budget slot (10s) after %s", calls[0], lastSend)
	}
	assertBudget(t, calls, 6)
	if n := len(h.api.callsTo("a@example.com")); n != 1 {
		t.Fatalf("removed a@ read %d times in all, want only the read before the update", n)
	}
	if b := h.api.callsTo("B@example.com"); len(b) != 1 || b[0].at.Sub(t0) < 10*time.Minute {
		t.Fatalf("kept b@ read again at %v, want it kept on its schedule (10 minutes after its last read)", b)
	}
	if len(h.api.callsTo("found@example.com")) != 2 {
		t.Fatal("discovered address was not kept polling across the reload")
	}
	for email, want := range map[string]bool{"a@example.com": false, "b@example.com": true, "d@example.com": true, "found@example.com": true} {
		if _, ok := h.entry(email); ok != want {
			t.Errorf("watchlist has %s: %v, want %v", email, ok, want)
		}
	}
	if h.add("D@example.com") || h.add("found@example.com") {
		t.Fatal("Add of a tracked address returned true")
	}
}

func TestAddReadsFirst(t *testing.T) {
	h := newHarness(t, Settings{Addresses: emails(50), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}).start()
	h.advance(3 * time.Second)
	if !h.add("New@Example.com") {
		t.Fatal("Add returned false")
	}
	if a, ok := h.entry("new@example.com"); !ok || a.State != breach.Pending {
		t.Fatalf("watchlist after the discovery: %+v, %v; want pending", a, ok)
	}
	h.advance(time.Second)
	calls := h.api.log()
	if last := calls[len(calls)-1]; last.email != "New@Example.com" {
		t.Fatalf("call after Add was %s, want the added address", last)
	}
}

func TestCycle(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	reg := watchlist.New()
	var token tokenFile
	cur := config.NewCurrent(nil)
	s := New(Options{Watchlist: reg, Config: cur, Account: breach.DefaultAccount, Logger: log.NewLogfmtLogger(logs)})
	// update reloads as the exporter does; the scheduler takes the new
	// figures when it next plans.
	update := func(st Settings) {
		cur.Store(bundle(st, &token))
		reg.Sync(nil, cur.Load().Config.Watched(), breach.LabelEmail, 1000)
		s.updateCycle(cur.Load(), cur.Load().Accounts[0])
	}
	check := func(want time.Duration, warnings int) {
		t.Helper()
		if got := reg.View().Accounts[0].Cycle; !near(got, want) {
			t.Fatalf("cycle = %s, want %s", got, want)
		}
		if n := logs.Count("level=warn", "cannot read every address"); n != warnings {
			t.Fatalf("%d over-budget warnings, want %d", n, warnings)
		}
	}
	update(Settings{Addresses: emails(100), RequestsPerMinute: 55, Interval: 15 * time.Minute, MeInterval: 5 * time.Minute})
	check(15*time.Minute, 0)

	over := Settings{Addresses: emails(1000), RequestsPerMinute: 55, Interval: 15 * time.Minute, MeInterval: 5 * time.Minute}
	update(over)
	check(minutes(1000/54.8), 1) // 18m15s: /me takes 0.2 of the 55
	if logs.Count("cycle=18m15s") != 1 {
		t.Fatal("the warning does not give the real cycle length")
	}
	update(over) // a reload warns again, once
	check(minutes(1000/54.8), 2)

	// 493 addresses fit in 9 minutes at 54.8 a minute; 494 do not.
	update(Settings{Addresses: emails(490), RequestsPerMinute: 55, Interval: 9 * time.Minute, MeInterval: 5 * time.Minute})
	check(9*time.Minute, 2)
	for i := range 10 {
		reg.RecordAlert(breach.DefaultAccount, fmt.Sprintf("found%d@example.com", i), watchlist.AlertDelta{})
	}
	s.updateCycle(cur.Load(), cur.Load().Accounts[0])
	check(minutes(500/54.8), 3)

	// A tiny me_interval takes at most every other request.
	// With the 10 discovered addresses kept, 60 addresses at 30 a minute.
	update(Settings{Addresses: emails(50), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: time.Second})
	check(2*time.Minute, 4)
}

func TestRandomJitter(t *testing.T) {
	if d := randomJitter(0); d != 0 {
		t.Fatalf("randomJitter(0) = %s", d)
	}
	for range 100 {
		if d := randomJitter(time.Second); d < 0 || d >= time.Second {
			t.Fatalf("randomJitter(1s) = %s, want in [0, 1s)", d)
		}
	}
}

func minutes(m float64) time.Duration { return time.Duration(m * float64(time.Minute)) }

// near absorbs float rounding in cycle arithmetic.
func near(a, b time.Duration) bool { return (a - b).Abs() < time.Millisecond }

// stuckAPI answers only when the request is cancelled.
type stuckAPI struct{ entered chan struct{} }

func (c stuckAPI) Me(ctx context.Context) (api.Me, breach.RateLimit, error) {
	close(c.entered)
	<-ctx.Done()
	return api.Me{}, breach.RateLimit{}, &api.Error{Kind: api.KindTransport, Err: ctx.Err()}
}

func (c stuckAPI) Breaches(context.Context, string) (api.Breaches, breach.RateLimit, error) {
	panic("not reached: /me goes first")
}

func TestShutdownDuringARequest(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	client := stuckAPI{entered: make(chan struct{})}
	var token tokenFile
	reg := watchlist.New()
	cur := config.NewCurrent(bundle(Settings{Addresses: emails(1), RequestsPerMinute: 60, Interval: time.Minute, MeInterval: time.Minute}, &token))
	reg.Sync(nil, cur.Load().Config.Watched(), breach.LabelEmail, 1000)
	s := New(Options{
		Watchlist: reg,
		Config:    cur,
		Account:   breach.DefaultAccount,
		Connect:   func(*config.Bundle, *config.AccountBundle) Client { return client },
		Clock:     clockwork.NewFakeClockAt(t0),
		Logger:    log.NewLogfmtLogger(logs),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	<-client.entered
	cancel()
	<-done
	if n := logs.Count("level=warn"); n != 0 {
		t.Fatalf("%d warnings at shutdown, want the cancelled request ignored", n)
	}
}
