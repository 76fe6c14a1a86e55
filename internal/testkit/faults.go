// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// The faults below answer instead of the service, through the stand-in's
// Misbehave or Script (sim.Simulator's hooks).

// Hang never answers; it lets go when the client gives up.
func Hang(w http.ResponseWriter, r *http.Request) {
	<-r.Context().Done()
}

// Status answers code with an Error body (spec section 7) and no
// rate-limit headers.
func Status(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"error":%q}`, strings.ToLower(strings.ReplaceAll(http.StatusText(code), " ", "_")))
	}
}

// Body answers 200 with body, whatever was asked.
func Body(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, body)
	}
}

// HTMLPage is what a misconfigured proxy sends with a 200.
var HTMLPage = Body("text/html", "<html><body><h1>Service temporarily unavailable</h1></body></html>")

// WrongShape is valid JSON whose members have the wrong types for both
// endpoints.
var WrongShape = Body("application/json", `{"id":7,"email":["x"],"plan":{"tier":"pro"},"sources":"none"}`)

// RateLimited answers 429 rate_limited; with reset set, with the three
// rate-limit headers and the Reset it computes from the stand-in's clock
// (as the code under test reads it), without them otherwise.
func (a *StandIn) RateLimited(reset func(now time.Time) time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if reset != nil {
			h := w.Header()
			h.Set(sim.HeaderLimit, strconv.Itoa(sim.DefaultRateLimit))
			h.Set(sim.HeaderRemaining, "0")
			h.Set(sim.HeaderReset, strconv.FormatInt(reset(a.Now()).Unix(), 10))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"rate_limited"}`)
	}
}

// SlowBody sends a 200 and then the service's answer a byte every 50 ms of
// real time, far slower than a client's timeout allows.
func (a *StandIn) SlowBody(w http.ResponseWriter, r *http.Request) {
	_, body := a.Reply(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	tick := time.NewTicker(50 * time.Millisecond) // the pace of a slow server, not synchronisation
	defer tick.Stop()
	for i := range len(body) {
		if _, err := w.Write(body[i : i+1]); err != nil {
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

// Truncated is a complete HTTP answer with the first half of the
// service's JSON.
func (a *StandIn) Truncated(w http.ResponseWriter, r *http.Request) {
	_, body := a.Reply(r)
	w.Header().Set("Content-Type", "application/json")
	w.Write(body[:len(body)/2])
}

// CutMidBody promises the service's whole answer, sends half of it and
// drops the connection.
func (a *StandIn) CutMidBody(w http.ResponseWriter, r *http.Request) {
	_, body := a.Reply(r)
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:len(body)/2])
	buf.Flush()
}

// NextMinute is when the service's fixed one-minute window that holds t
// resets.
func NextMinute(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

// HugeBody is 10 MiB of syntactically valid JSON.
func HugeBody(w http.ResponseWriter, r *http.Request) { HugeBodyOf(10<<20)(w, r) }

// HugeBodyOf answers size bytes of syntactically valid JSON, streamed: a
// client that stops reading at its cap costs the server nothing more.
func HugeBodyOf(size int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
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
}
