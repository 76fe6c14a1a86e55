package testkit

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// APIPrefix is the path of the API root ({base_url} in the spec).
const APIPrefix = "/api/v1"

// APIToken is the bearer token the stand-in accepts until Rotate.
const APIToken = "svc_ak_test"

// API is the one stand-in of the service's API for the tests (spec
// sections 4, 5, 7 and 8): GET /me and GET /breaches?email= on 127.0.0.1,
// behind a Bearer check, with the three rate-limit headers on every
// answer the service would give. Each address is answered as set with
// Answer (verified with its sources, 403 or 404), or as set with
// AnswerOthers. Faults answer instead of the service while set; every
// request is logged with the stand-in's clock.
//
// The examples/simulator is a full implementation of the spec; this is the
// small, scriptable one that unit and fault tests steer request by request.
type API struct {
	t     testing.TB
	clock clockwork.Clock
	addr  string // host:port, kept while connections are refused so configs stay valid

	mu       sync.Mutex
	server   *http.Server // nil while connections are refused
	served   chan struct{}
	token    string
	plan     string
	answers  map[string]Answer // by breach.Key
	others   Answer
	fault    http.HandlerFunc   // answers every request while set
	script   []http.HandlerFunc // answer the next requests, one each, before fault
	requests []Request
}

// Answer is what GET /breaches says about one address.
type Answer struct {
	Status  int // 200, 403 or 404
	Sources []breach.SourceState
}

// Verified is the answer for a verified address: 200 with these sources.
func Verified(sources ...breach.SourceState) Answer {
	return Answer{Status: http.StatusOK, Sources: sources}
}

// Unverified is the answer for an address on the account but not verified.
func Unverified() Answer { return Answer{Status: http.StatusForbidden} }

// NotMonitored is the answer for an address the account does not monitor.
func NotMonitored() Answer { return Answer{Status: http.StatusNotFound} }

// Request is one request the stand-in received.
type Request struct {
	At      time.Time // on the stand-in's clock
	Path    string    // APIPrefix+"/me" or APIPrefix+"/breaches"
	Email   string    // the email parameter, as sent
	Faulted bool      // answered by a fault or refused as unauthorized
}

// NewAPI serves the stand-in until the test ends. clock stamps requests
// and sets the rate-limit window (nil: the real clock). It starts with
// plan pro, token APIToken, and every address not monitored (404).
func NewAPI(t testing.TB, clock clockwork.Clock) *API {
	t.Helper()
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	a := &API{t: t, clock: clock, addr: "127.0.0.1:0", token: APIToken, plan: "pro",
		answers: map[string]Answer{}, others: NotMonitored()}
	a.Listen()
	t.Cleanup(a.Refuse)
	return a
}

// BaseURL is the API root for a config's api.base_url.
func (a *API) BaseURL() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return "http://" + a.addr + APIPrefix
}

// Listen (re)starts serving on the stand-in's address.
func (a *API) Listen() {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.server != nil {
		return
	}
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		a.t.Fatalf("API stand-in: listen on %s: %v", a.addr, err)
	}
	a.addr = ln.Addr().String()
	a.server = &http.Server{
		Handler:  a,
		ErrorLog: log.New(io.Discard, "", 0), // faults make the server complain; that is the point
	}
	a.served = make(chan struct{})
	go func(srv *http.Server, served chan struct{}) {
		defer close(served)
		srv.Serve(ln)
	}(a.server, a.served)
}

// Refuse closes the listener and every connection: the port refuses
// connections until Listen.
func (a *API) Refuse() {
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

// Answer sets the answer for email (any spelling of its key).
func (a *API) Answer(email string, ans Answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers[breach.Key(email)] = ans
}

// AnswerOthers sets the answer for every address without one of its own.
func (a *API) AnswerOthers(ans Answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.others = ans
}

// SetPlan sets the plan /me reports.
func (a *API) SetPlan(plan string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.plan = plan
}

// Rotate makes token the only one accepted: the previous one is revoked at
// once, as the spec says of a rotation.
func (a *API) Rotate(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.token = token
}

// Misbehave makes f answer every request from now on; nil restores the
// service's behaviour.
func (a *API) Misbehave(f http.HandlerFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fault = f
}

// Script makes fs answer the next len(fs) requests, one each in order,
// ahead of any Misbehave fault.
func (a *API) Script(fs ...http.HandlerFunc) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.script = append(a.script, fs...)
}

// Requests is the log of every request so far.
func (a *API) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.requests...)
}

// Reads counts the /breaches requests for email, as sent, faulted or not.
func (a *API) Reads(email string) int {
	return a.count(APIPrefix+"/breaches", email)
}

// MeCalls counts the /me requests, faulted or not.
func (a *API) MeCalls() int { return a.count(APIPrefix+"/me", "") }

func (a *API) count(path, email string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, r := range a.requests {
		if r.Path == path && r.Email == email {
			n++
		}
	}
	return n
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != APIPrefix+"/me" && r.URL.Path != APIPrefix+"/breaches" {
		http.NotFound(w, r)
		return
	}
	email := r.URL.Query().Get("email")

	a.mu.Lock()
	fault := a.fault
	if len(a.script) > 0 {
		fault, a.script = a.script[0], a.script[1:]
	}
	authorized := r.Header.Get("Authorization") == "Bearer "+a.token
	a.requests = append(a.requests, Request{At: a.clock.Now(), Path: r.URL.Path, Email: email, Faulted: fault != nil || !authorized})
	status, body := a.reply(r.URL.Path, email, authorized)
	a.mu.Unlock()

	if fault != nil {
		fault(w, r)
		return
	}
	SetRateLimit(w.Header(), 59, NextMinute(a.clock.Now()))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// Reply is the status and body the service would answer r with now.
func (a *API) Reply(r *http.Request) (int, []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reply(r.URL.Path, r.URL.Query().Get("email"), true)
}

// reply is the service's answer; a.mu is held.
func (a *API) reply(path, email string, authorized bool) (int, []byte) {
	switch {
	case !authorized:
		return http.StatusUnauthorized, errorBody("unauthorized")
	case path == APIPrefix+"/me":
		return http.StatusOK, mustJSON(map[string]string{"id": "u1", "email": "owner@example.com", "plan": a.plan})
	case email == "":
		return http.StatusBadRequest, errorBody("missing_email")
	}
	ans, ok := a.answers[breach.Key(email)]
	if !ok {
		ans = a.others
	}
	switch ans.Status {
	case http.StatusForbidden:
		return ans.Status, errorBody("unverified")
	case http.StatusNotFound:
		return ans.Status, errorBody("not_found")
	}
	return http.StatusOK, BreachesBody(email, ans.Sources...)
}

// BreachesBody is a Breaches object (spec section 2) for email.
func BreachesBody(email string, sources ...breach.SourceState) []byte {
	out := make([]map[string]any, 0, len(sources))
	for _, s := range sources {
		out = append(out, map[string]any{
			"source":                 s.Source,
			"breach_count":           s.BreachCount,
			"source_dbs":             nonNil(s.SourceDBs),
			"fields_exposed":         nonNil(s.FieldsExposed),
			"has_plaintext_password": s.HasPlaintextPassword,
			"last_scanned_at":        SpecTime(s.LastScannedAt),
			"last_changed_at":        SpecTime(s.LastChangedAt),
		})
	}
	return mustJSON(map[string]any{"email": email, "sources": out})
}

// SpecTime formats t as the API's date-time: UTC with milliseconds.
func SpecTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func errorBody(code string) []byte { return mustJSON(map[string]string{"error": code}) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// SetRateLimit sets the service's three rate-limit headers, for a limit of
// 60 a minute.
func SetRateLimit(h http.Header, remaining int, reset time.Time) {
	h.Set("X-RateLimit-Limit", "60")
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
}

// NextMinute is when the service's fixed one-minute window that holds t
// resets.
func NextMinute(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }
