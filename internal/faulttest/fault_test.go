// Package faulttest runs the real exporter, from its config and token
// files, against a stand-in breach API that misbehaves on command, on a fake
// clock so that minutes of backoff pass in milliseconds. For every fault it
// checks that /metrics keeps answering with the last good values, that the
// failures are counted, that the exporter backs off and that it recovers on
// its own, without leaking goroutines.
package faulttest

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
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
}

// Every fault hits both endpoints, the way a broken API or network would.
func faults() []fault {
	misbehave := func(f http.HandlerFunc) func(*harness) {
		return func(h *harness) { h.api.misbehave(f) }
	}
	// /me is not backed off, so a good answer comes at the latest with the
	// next /me.
	const afterMe = meInterval + 2*step
	// A 429 pause is at most 61 s plus 1 s of jitter.
	const afterPause = 62*time.Second + 2*step
	return []fault{
		{
			name: "connection refused",
			on:   func(h *harness) { h.api.refuse() },
			off:  func(h *harness) { h.api.listen() },
			code: "error", kind: "transport", unseen: true, maxRequests: perAddressBound, firstSuccess: afterMe,
		},
		{name: "hangs past the timeout", on: misbehave(hang), code: "error", kind: "transport", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "slow body", on: misbehave(slowBody), code: "200", kind: "transport", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "500", on: misbehave(status(500)), code: "500", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "502", on: misbehave(status(502)), code: "502", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "503", on: misbehave(status(503)), code: "503", kind: "server_error", maxRequests: perAddressBound, firstSuccess: afterMe},
		{
			name: "429 storm without rate-limit headers", on: tooMany(nil),
			code: "429", kind: "rate_limited", maxRequests: rateLimitedBound, apiUp: 1, firstSuccess: afterPause,
		},
		{
			name: "429 storm with Reset at the window's end", on: tooMany(nextMinute),
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
		{name: "bad JSON", on: misbehave(htmlPage), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "JSON of the wrong shape", on: misbehave(wrongShape), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "truncated JSON", on: misbehave(truncatedJSON), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "connection cut mid-body", on: misbehave(cutMidBody), code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe},
		{name: "10 MiB body", on: misbehave(hugeBody), code: "200", kind: "bad_body|transport", maxRequests: perAddressBound, firstSuccess: afterMe},
		{
			name: "token revoked, then rotated in the token file",
			on:   func(h *harness) { h.api.acceptToken("svc_ak_rotated-token") },
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
	h.api.setCount(4)
	before := h.samples()
	seenBefore := len(h.api.log())
	f.on(h)

	// The span starts at the first failed request.
	h.advanceUntil("the first failed request", interval+time.Minute, func() bool {
		return requestsTotal(h.samples(), "") > requestsTotal(before, "")
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
	if reached := len(h.api.log()) - seenBefore; f.unseen && reached != 0 {
		t.Errorf("%d requests reached a refusing stand-in", reached)
	} else if !f.unseen && float64(reached) != failed {
		t.Errorf("the stand-in saw %d requests, the exporter counted %v", reached, failed)
	}
	if got := cachedValues(during); !maps.Equal(got, good) {
		t.Errorf("cached values changed during the fault:\n got %v\nwant %v", got, good)
	}
	if got := lookup(during, "breach_api_up"); got != f.apiUp {
		t.Errorf("breach_api_up = %v during the fault, want %v", got, f.apiUp)
	}

	// The fault ends; the exporter recovers on its own.
	ended := h.clock.Now()
	if f.off != nil {
		f.off(h)
	} else {
		h.api.misbehave(nil)
	}
	took := h.advanceUntil("the first good answer after the fault", f.firstSuccess, func() bool {
		return firstGoodAnswer(h.api.log(), ended)
	})
	t.Logf("first good answer %s after the fault ended", took)
	h.advanceUntil("fresh values", interval+f.firstSuccess, func() bool { return h.healthy(4) })
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
func firstGoodAnswer(log []request, since time.Time) bool {
	for _, r := range log {
		if !r.faulted && !r.at.Before(since) {
			return true
		}
	}
	return false
}

// hang never answers; it lets go when the client gives up.
func hang(w http.ResponseWriter, r *http.Request) {
	<-r.Context().Done()
}

// slowBody sends a 200 and then the body a byte at a time, far slower than
// the client's timeout allows.
func slowBody(w http.ResponseWriter, r *http.Request) {
	body := breachesBody(r.URL.Query().Get("email"), 4)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	tick := time.NewTicker(50 * time.Millisecond) // the pace of a slow server, not synchronisation
	defer tick.Stop()
	for i := range len(body) {
		if _, err := io.WriteString(w, body[i:i+1]); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-tick.C:
		case <-r.Context().Done():
			return
		}
	}
}

// status answers code with the service's error body and headers.
func status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":%q}`, strings.ToLower(strings.ReplaceAll(http.StatusText(code), " ", "_")))
	}
}

// tooMany makes the stand-in answer 429; with reset set, with the three
// rate-limit headers and that Reset, computed from the fake clock as the
// scheduler reads it.
func tooMany(reset func(now time.Time) time.Time) func(h *harness) {
	return func(h *harness) {
		h.api.misbehave(func(w http.ResponseWriter, r *http.Request) {
			if reset != nil {
				setRateLimit(w.Header(), 0, reset(h.clock.Now()))
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":"rate_limited"}`)
		})
	}
}

// htmlPage is what a misconfigured proxy sends with a 200.
func htmlPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html")
	io.WriteString(w, "<html><body><h1>Service temporarily unavailable</h1></body></html>")
}

// wrongShape is valid JSON whose members have the wrong types for both
// endpoints.
func wrongShape(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"id":7,"email":["x"],"plan":{"tier":"pro"},"sources":"none"}`)
}

// truncatedJSON is a complete HTTP answer whose JSON stops half way.
func truncatedJSON(w http.ResponseWriter, r *http.Request) {
	body := breachesBody(r.URL.Query().Get("email"), 4)
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, body[:len(body)/2])
}

// cutMidBody promises more body than it sends and drops the connection.
func cutMidBody(w http.ResponseWriter, r *http.Request) {
	body := breachesBody(r.URL.Query().Get("email"), 4)
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:len(body)/2])
	buf.Flush()
}

// hugeBody is 10 MiB of syntactically valid JSON.
func hugeBody(w http.ResponseWriter, r *http.Request) {
	const size = 10 << 20
	head, tail := `{"email":"x","padding":"`, `"}`
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	out := bufio.NewWriterSize(w, 64<<10)
	io.WriteString(out, head)
	chunk := strings.Repeat("a", 64<<10)
	for left := size - len(head) - len(tail); left > 0; left -= len(chunk) {
		if _, err := io.WriteString(out, chunk[:min(left, len(chunk))]); err != nil {
			return // the client stopped reading at its cap
		}
	}
	io.WriteString(out, tail)
	out.Flush()
}
