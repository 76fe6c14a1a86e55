// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// APIToken is the bearer token the stand-in accepts until SetToken.
const APIToken = "svc_ak_test"

// StandIn is the project's one stand-in of the service (the simulator,
// examples/simulator/sim) served on a 127.0.0.1 port for a test. It adds
// what only a test needs: a port that keeps its number while it refuses
// connections (Refuse, Listen), and the end of serving at the test's end.
// Everything the service does, and every hook (Answer, AnswerOthers,
// Misbehave, Script, SetToken, Requests, Reads, Windows), is the
// simulator's.
type StandIn struct {
	*sim.Simulator
	t    testing.TB
	mu   sync.Mutex
	addr string // host:port, kept while connections are refused so configs stay valid

	server *http.Server // nil while connections are refused
	served chan struct{}
}

// NewStandIn serves a simulator until the test ends: one pro account with
// token APIToken and no address (every address answers 404 until Answer or
// AnswerOthers), the spec's 60 requests per fixed minute, no sweeps unless
// the test runs them. clock stamps requests and sets the windows (nil: the
// real clock). more, when given, adjusts the options first (more accounts,
// a rate limit, a webhook).
func NewStandIn(t testing.TB, clock clockwork.Clock, more ...func(*sim.Options)) *StandIn {
	t.Helper()
	o := sim.Options{Token: APIToken, Plan: "pro", Addresses: []sim.Address{}, Seed: 1, Clock: clock}
	for _, f := range more {
		f(&o)
	}
	s, err := sim.New(o)
	if err != nil {
		t.Fatalf("stand-in: %v", err)
	}
	a := &StandIn{Simulator: s, t: t, addr: "127.0.0.1:0"}
	a.Listen()
	t.Cleanup(a.Refuse)
	return a
}

// BaseURL is the API root for a config's api.base_url.
func (a *StandIn) BaseURL() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return "http://" + a.addr + sim.APIPrefix
}

// Listen (re)starts serving on the stand-in's address.
func (a *StandIn) Listen() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server != nil {
		return
	}
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		a.t.Fatalf("stand-in: listen on %s: %v", a.addr, err)
	}
	a.addr = ln.Addr().String()
	a.server = &http.Server{
		Handler:  a.Handler(),
		ErrorLog: log.New(io.Discard, "", 0), // faults make the server complain; that is the point
	}
	a.served = make(chan struct{})
	go func(srv *http.Server, served chan struct{}) {
		defer close(served)
		_ = srv.Serve(ln) // ErrServerClosed at the test's end
	}(a.server, a.served)
}

// Refuse closes the listener and every connection: the port refuses
// connections until Listen.
func (a *StandIn) Refuse() {
	a.mu.Lock()
	srv, served := a.server, a.served
	a.server = nil
	a.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Close()
	<-served
}
