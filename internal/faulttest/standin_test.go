package faulttest

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/api"
)

// standIn plays the breach API on 127.0.0.1 and misbehaves on command. It
// stamps every request with the fake clock's time: the clock only moves
// while the scheduler waits, so that is the instant the request was sent.
type standIn struct {
	t     *testing.T
	clock *clockwork.FakeClock
	addr  string // host:port, kept when connections are refused so the config stays valid

	mu       sync.Mutex
	server   *http.Server     // nil while connections are refused
	served   chan struct{}    // closed when server's Serve returns
	fault    http.HandlerFunc // answers instead of the service while set
	token    string           // the one bearer token accepted
	count    int64            // breach_count of every source
	requests []request
}

// request is one request the stand-in received.
type request struct {
	at      time.Time
	faulted bool // answered by a fault or refused as unauthorized
}

const (
	apiPrefix    = "/api/v1"
	initialToken = "svc_ak_initial-token"
)

func newStandIn(t *testing.T, clock *clockwork.FakeClock) *standIn {
	t.Helper()
	s := &standIn{t: t, clock: clock, addr: "127.0.0.1:0", token: initialToken, count: 3}
	s.listen()
	t.Cleanup(s.refuse)
	return s
}

// baseURL is the API root for the exporter's config.
func (s *standIn) baseURL() string { return "http://" + s.addr + apiPrefix }

// listen (re)starts serving on the stand-in's address.
func (s *standIn) listen() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		return
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("stand-in: listen on %s: %v", s.addr, err)
	}
	s.addr = ln.Addr().String()
	s.server = &http.Server{
		Handler:  s,
		ErrorLog: log.New(io.Discard, "", 0), // faults make the server complain; that is the point
	}
	s.served = make(chan struct{})
	go func(srv *http.Server, served chan struct{}) {
		defer close(served)
		srv.Serve(ln)
	}(s.server, s.served)
}

// refuse closes the listener and every connection: the port answers with
// "connection refused" until listen.
func (s *standIn) refuse() {
	s.mu.Lock()
	srv, served := s.server, s.served
	s.server = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Close()
	<-served
}

// misbehave makes f answer every request from now on; nil restores the
// service's behaviour.
func (s *standIn) misbehave(f http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// acceptToken makes token the only one accepted, revoking the previous one.
func (s *standIn) acceptToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// setCount changes the breach_count served from now on.
func (s *standIn) setCount(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count = n
}

func (s *standIn) log() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.requests...)
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var endpoint string
	switch r.URL.Path {
	case apiPrefix + "/me":
		endpoint = api.EndpointMe
	case apiPrefix + "/breaches":
		endpoint = api.EndpointBreaches
	default:
		http.NotFound(w, r)
		return
	}

	s.mu.Lock()
	fault, count := s.fault, s.count
	authorized := r.Header.Get("Authorization") == "Bearer "+s.token
	s.requests = append(s.requests, request{at: s.clock.Now(), faulted: fault != nil || !authorized})
	s.mu.Unlock()

	if fault != nil {
		fault(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	setRateLimit(h, 50, nextMinute(s.clock.Now()))
	if !authorized {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"unauthorized"}`)
		return
	}
	if endpoint == api.EndpointMe {
		io.WriteString(w, `{"id":"u1","email":"owner@example.com","plan":"pro"}`)
		return
	}
	io.WriteString(w, breachesBody(r.URL.Query().Get("email"), count))
}

// breachesBody is a /breaches answer as the spec describes it.
func breachesBody(email string, count int64) string {
	return fmt.Sprintf(`{"email":%q,"sources":[`+
		`{"source":"archive","breach_count":%d,"source_dbs":["db-a","db-b"],"fields_exposed":["password","hash"],`+
		`"has_plaintext_password":true,"last_scanned_at":"2031-05-06T07:00:00.000Z","last_changed_at":"2031-05-01T00:00:00.000Z"},`+
		`{"source":"combolist","breach_count":%d,"source_dbs":["combo-1"],"fields_exposed":["username"],`+
		`"has_plaintext_password":false,"last_scanned_at":"2031-05-06T07:00:00.000Z","last_changed_at":"2031-05-02T00:00:00.000Z"}]}`,
		email, count, count)
}

// setRateLimit sets the service's three rate-limit headers.
func setRateLimit(h http.Header, remaining int, reset time.Time) {
	h.Set("X-RateLimit-Limit", "60")
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
}

// nextMinute is when the service's fixed one-minute window resets.
func nextMinute(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }
