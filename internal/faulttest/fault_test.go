// SPDX-License-Identifier: Apache-2.0

// Package faulttest runs the real exporter, from its config and token
// files, against a stand-in breach API that misbehaves on command, on a fake
// clock so that minutes of backoff pass in milliseconds. For every fault it
// checks that /metrics keeps answering with the last good values, that the
// failures are counted, that the exporter backs off and that it recovers on
// its own, without leaking goroutines.
package faulttest

import (
	"maps"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faultSpan is how long each fault lasts, in fake time, from its first
// failed request.
const faultSpan = 10 * time.Minute

// Request bounds over faultSpan for two addresses, derived from the
// documented backoff rather than from the code. The budget alone would
// allow 600.
const (
	// Per-address backoff (30 s doubling, capped at interval) allows at most
	// 5 reads per address in 10 minutes (at 0, 30, 90, 210, 450 s); /me is
	// not backed off and goes out every me_interval (at most 6).
	perAddressBound = 2*5 + 6
	// A 429 pauses everything until the window resets (a Reset further out
	// is capped at 61 s): at most one request per fixed minute, and 10
	// minutes touch 11 of them.
	rateLimitedBound = 11
	// A 401 pauses everything, 10 s doubling up to 5 min: at 0, 10, 30, 70,
	// 150 and 310 s.
	unauthorizedBound = 6
)

type fault struct {
	name string
	on   func(h *harness)
	off  func(h *harness) // nil: the stand-in behaves again
	// code is the label breach_api_requests_total counts the failures under,
	// kind the one breach_api_request_failures_total counts them under
	// (a|b: either; a 10 MiB body may hit the cap or the timeout first).
	code, kind string
	// unseen: the failures never reach the stand-in (connection refused).
	unseen      bool
	maxRequests int
	// apiUp is breach_api_up once /me has failed (a 429 leaves it alone).
	apiUp float64
	// firstSuccess bounds the fake time from the fault's end to the first
	// request the stand-in answers properly.
	firstSuccess time.Duration
	// realTime: every failed request waits out the API client's timeout or
	// moves megabytes, seconds of real time in all; not run with -short.
	realTime bool
}

// Every fault hits both endpoints, the way a broken API or network would.
func faults() []fault {
	misbehave := func(f http.HandlerFunc) func(*harness) {
		return func(h *harness) { h.api.Misbehave(f) }
	}
	// misbehaveAPI is misbehave for a fault that answers from the
	// stand-in's own reply.
	misbehaveAPI := func(f func(*testkit.StandIn) http.HandlerFunc) func(*harness) {
		return func(h *harness) { h.api.Misbehave(f(h.api)) }
	}
	// /me is not backed off, so a good answer comes at the latest with the
	// next /me.
	const afterMe = meInterval + 2*step
	// A 429 pause is at most 61 s plus 1 s of jitter.
	const afterPause = 62*time.Second + 2*step
	return []fault{
		{
			name: "connection refused",
			on:   func(h *harness) { h.api.Refuse() },
			off:  func(h *harness) { h.api.Listen() },
			code: "error", kind: "transport", unseen: true, maxRequests: perAddressBound, firstSuccess: afterMe,
		},
		{name: "hangs past the timeout", on: misbehave(testkit.Hang), code: "error", kind: "transport", maxRequests: perAddressBound, firstSuccess: afterMe, realTime: true},
		{name: "slow body", on: misbehaveAPI(func(a *testkit.StandIn) http.HandlerFunc { return a.SlowBody }), code: "200", kind: "transport", maxRequests: perAddressBound, firstSuccess: afterMe, realTime: true},
		{name: "500", on: misbehave(testkit.Status(500)), code: "500", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "502", on: misbehave(testkit.Status(502)), code: "502", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "503", on: misbehave(testkit.Status(503)), code: "503", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{
			name: "429 storm without rate-limit headers", on: tooMany(nil),
			code: "429", kind: "rate_limited", maxRequests: rateLimitedBound, apiUp: 1, firstSuccess: afterPause,
		},
		{
			name: "429 storm with Reset at the window's end", on: tooMany(testkit.NextMinute),
			code: "429", kind: "rate_limited", maxRequests: rateLimitedBound, apiUp: 1, firstSuccess: afterPause,
		},
		{
			name: "429 storm with Reset in the past", on: tooMany(func(now time.Time) time.Time { return now.Add(-time.Hour) }),
			code: "429", kind: "rate_limited", maxRequests: rateLimitedBound, apiUp: 1, firstSuccess: afterPause,
		},
		{
			name: "429 storm with Reset a day ahead", on: tooMany(func(now time.Time) time.Time { return now.Add(24 * time.Hour) }),
			code: "429", kind: "rate_limited", maxRequests: rateLimitedBound, apiUp: 1, firstSuccess: afterPause,
		},
		{name: "bad JSON", on: misbehave(testkit.HTMLPage), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "JSON of the wrong shape", on: misbehave(testkit.WrongShape), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "truncated JSON", on: misbehaveAPI(func(a *testkit.StandIn) http.HandlerFunc { return a.Truncated }), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "connection cut mid-body", on: misbehaveAPI(func(a *testkit.StandIn) http.HandlerFunc { return a.CutMidBody }), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "10 MiB body", on: misbehave(testkit.HugeBody), code: "200", kind: "bad_body|transport", maxRequests: perAddressBound, firstSuccess: afterMe, realTime: true},
		{
			name: "token revoked, then rotated in the token file",
			on:   func(h *harness) { h.api.SetToken("svc_ak_rotated-token") },
			off:  func(h *harness) { h.writeToken("svc_ak_rotated-token") },
			// /me is the first request due after the first round, so it
			// draws the first 401 and is the request retried.
			code: "401", kind: "unauthorized", maxRequests: unauthorizedBound, apiUp: 0,
			// The old token draws one more 401, which makes the exporter
			// re-read the file; the retry after that pause (at most 5 min
			// each) carries the new token.
			firstSuccess: 2*5*time.Minute + 2*step,
		},
	}
}

func TestFaults(t *testing.T) {
	for _, f := range faults() {
		t.Run(f.name, func(t *testing.T) {
			if f.realTime && testing.Short() {
				t.Skip("seconds of real time; runs without -short")
			}
			// Registered first so it runs last, after the exporter and the
			// stand-in have stopped.
			t.Cleanup(func() { goleak.VerifyNone(t) })
			testFault(t, f)
		})
	}
}

func testFault(t *testing.T, f fault) {
	h := newHarness(t).start()
	h.advanceUntil("the first round", time.Minute, func() bool { return h.healthy(3) })
	good := cachedValues(h.scrape())

	// Anything the exporter stored during the fault would now show 4.
	h.setCount(4)
	before := h.samples()
	seenBefore := len(h.api.Requests())
	f.on(h)

	// The span starts at the first failed request.
	h.advanceUntil("the first failed request", interval+time.Minute, func() bool {
		return h.requestsSent() > requestsTotal(before, "")
	})
	first := h.samples()
	h.advance(faultSpan)
	during := h.scrape()

	sent := requestsTotal(during, "") - requestsTotal(first, "") + 1
	t.Logf("%v requests in %s of fault", sent, faultSpan)
	if sent > float64(f.maxRequests) {
		t.Errorf("%v requests in %s of fault, want at most %d: the exporter does not back off", sent, faultSpan, f.maxRequests)
	}
	failed := requestsTotal(during, "") - requestsTotal(before, "")
	if counted := requestsTotal(during, f.code) - requestsTotal(before, f.code); counted != failed {
		t.Errorf("breach_api_requests_total{code=%q} grew by %v, want all %v failed requests", f.code, counted, failed)
	}
	if counted := failuresTotal(during, f.kind) - failuresTotal(before, f.kind); counted != failed {
		t.Errorf("breach_api_request_failures_total{kind=%q} grew by %v, want all %v failed requests", f.kind, counted, failed)
	}
	if reached := len(h.api.Requests()) - seenBefore; f.unseen && reached != 0 {
		t.Errorf("%d requests reached a refusing stand-in", reached)
	} else if !f.unseen && float64(reached) != failed {
		t.Errorf("the stand-in saw %d requests, the exporter counted %v", reached, failed)
	}
	if got := cachedValues(during); !maps.Equal(got, good) {
		t.Errorf("cached values changed during the fault:\n got %v\nwant %v", got, good)
	}
	if got := lookup(during, "breach_api_up", "account", "default"); got != f.apiUp {
		t.Errorf("breach_api_up = %v during the fault, want %v", got, f.apiUp)
	}

	// The fault ends; the exporter recovers on its own.
	ended := h.clock.Now()
	if f.off != nil {
		f.off(h)
	} else {
		h.api.Misbehave(nil)
	}
	took := h.advanceUntil("the first good answer after the fault", f.firstSuccess, func() bool {
		return firstGoodAnswer(h.api.Requests(), ended)
	})
	t.Logf("first good answer %s after the fault ended", took)
	// The stand-in's log first (cheap at every step), then the scrape.
	h.advanceUntil("good answers for /me and every address", interval+f.firstSuccess, func() bool {
		return answeredAll(h.api.Requests(), ended)
	})
	h.advanceUntil("fresh values", interval, func() bool { return h.healthy(4) })
	after := h.scrape()
	for _, a := range addresses {
		was := lookup(good, "breach_address_last_refresh_timestamp_seconds", "address", a)
		if now := lookup(after, "breach_address_last_refresh_timestamp_seconds", "address", a); now <= was {
			t.Errorf("%s: last refresh %v did not advance past %v after recovery", a, now, was)
		}
	}
}

// firstGoodAnswer reports whether a request after since was answered
// properly.
func firstGoodAnswer(log []sim.Request, since time.Time) bool {
	for _, r := range log {
		if !r.Faulted && !r.At.Before(since) {
			return true
		}
	}
	return false
}

// answeredAll reports whether /me and every address were answered properly
// after since.
func answeredAll(log []sim.Request, since time.Time) bool {
	want := map[string]bool{sim.APIPrefix + "/me": true}
	for _, a := range addresses {
		want[a] = true
	}
	for _, r := range log {
		if r.Faulted || r.At.Before(since) {
			continue
		}
		if r.Path == sim.APIPrefix+"/me" {
			delete(want, r.Path)
		} else {
			delete(want, r.Email)
		}
	}
	return len(want) == 0
}

// tooMany makes the stand-in answer 429; with reset set, with the three
// rate-limit headers and that Reset, computed from the fake clock as the
// scheduler reads it.
func tooMany(reset func(now time.Time) time.Time) func(h *harness) {
	return func(h *harness) { h.api.Misbehave(h.api.RateLimited(reset)) }
}
