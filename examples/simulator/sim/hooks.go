// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Go hooks for tests, beside the admin controls (admin.go): answers set
// exactly per address, any handler answering instead of the service, and
// the log of requests. They act on the first account (Options.Token).

// Answer is what GET /breaches says about one address, set exactly: the
// status, and for 200 the sources verbatim (values the spec does not know
// included, so a test can send what a client must bound).
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

// reply is the status and body of a, for email as asked.
func (a Answer) reply(email string) (int, any) {
	switch a.Status {
	case http.StatusForbidden:
		return a.Status, Error{Error: CodeUnverified}
	case http.StatusNotFound:
		return a.Status, Error{Error: CodeNotMonitored}
	}
	b := Breaches{Email: email, Sources: make([]BreachSourceState, 0, len(a.Sources))}
	for _, src := range a.Sources {
		b.Sources = append(b.Sources, wireState(src))
	}
	return http.StatusOK, b
}

// wireState is the Breaches member for a feed's state.
func wireState(s breach.SourceState) BreachSourceState {
	return BreachSourceState{
		Source:               s.Source,
		BreachCount:          int(s.BreachCount),
		SourceDBs:            nonNil(s.SourceDBs),
		FieldsExposed:        nonNil(s.FieldsExposed),
		HasPlaintextPassword: s.HasPlaintextPassword,
		LastScannedAt:        s.LastScannedAt,
		LastChangedAt:        s.LastChangedAt,
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// BreachesBody is the JSON of a Breaches object for email, as the service
// sends it.
func BreachesBody(email string, sources ...breach.SourceState) []byte {
	_, body := Verified(sources...).reply(email)
	data, err := json.Marshal(body)
	if err != nil {
		panic(err) // plain strings, numbers and times always encode
	}
	return data
}

// Answer makes GET /breaches answer ans for email (any spelling of it) on
// the first account from now on. The address is pinned: sweeps leave it
// alone.
func (s *Simulator) Answer(email string, ans Answer) {
	ans.Sources = slices.Clone(ans.Sources)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[0]
	a, known := k.lookup(email)
	if !known {
		a = &monitored{Address: Address{Email: email}}
		k.monitored = append(k.monitored, a)
		k.byEmail[breach.Key(email)] = a
	}
	a.pinned, a.exact = true, &ans
	a.Verified = ans.Status == http.StatusOK
}

// AnswerOthers makes GET /breaches answer ans for every address that is
// not on the first account (404 until set).
func (s *Simulator) AnswerOthers(ans Answer) {
	ans.Sources = slices.Clone(ans.Sources)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[0].others = &ans
}

// hooks are handlers that answer API requests instead of the service,
// before the key check; ctlMu guards them.
type hooks struct {
	every  http.HandlerFunc   // answers every request while set
	script []http.HandlerFunc // answer the next requests, one each, before every
}

// Misbehave makes f answer every API request from now on, ahead of the key
// check and the window; nil restores the service's behaviour.
func (s *Simulator) Misbehave(f http.HandlerFunc) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.hooks.every = f
}

// Script makes fs answer the next len(fs) API requests, one each in order,
// ahead of any Misbehave handler.
func (s *Simulator) Script(fs ...http.HandlerFunc) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.hooks.script = append(s.hooks.script, fs...)
}

// nextHook is the hook that answers the request in hand, nil for none.
func (s *Simulator) nextHook() http.HandlerFunc {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if len(s.hooks.script) > 0 {
		f := s.hooks.script[0]
		s.hooks.script = s.hooks.script[1:]
		return f
	}
	return s.hooks.every
}

// Reply is the status and body the service would answer r with now, as if
// r bore the first account's key, without spending any of its window: what
// a hook that mangles the service's answer starts from.
func (s *Simulator) Reply(r *http.Request) (int, []byte) {
	var status int
	var body any
	switch r.URL.Path {
	case APIPrefix + "/me":
		s.ctlMu.Lock()
		status, body = http.StatusOK, s.keys[0].me
		s.ctlMu.Unlock()
	case APIPrefix + "/breaches":
		if email := r.URL.Query().Get("email"); email == "" {
			status, body = http.StatusBadRequest, Error{Error: CodeMissingEmail}
		} else {
			status, body = s.answer(s.keys[0], email)
		}
	default:
		status, body = http.StatusNotFound, Error{Error: CodeNotFound}
	}
	data, err := json.Marshal(body)
	if err != nil {
		panic(err) // the API's bodies always encode
	}
	return status, data
}

// Now is the time on the simulator's clock.
func (s *Simulator) Now() time.Time { return s.clock.Now() }

// Windows is the record of the fixed windows of the account whose key is
// token now, oldest first, and how many older windows were dropped; nil
// for a token no account has.
func (s *Simulator) Windows(token string) ([]Window, int) {
	s.ctlMu.Lock()
	i := slices.IndexFunc(s.keys, func(k *key) bool { return k.token == token })
	s.ctlMu.Unlock()
	if i < 0 {
		return nil, 0
	}
	return s.keys[i].window.windows()
}

// Request is one API request the simulator received.
type Request struct {
	At      time.Time // on the simulator's clock
	Account int       // index of the account whose key it bore (0: Options.Token), -1: none
	Path    string    // e.g. APIPrefix+"/me"
	Email   string    // the email parameter, as sent
	Faulted bool      // answered by a hook or refused as unauthorized
}

// maxRequestLog bounds the log: long demo runs must not grow without
// bound. When full, the older half goes, counted in Stats.RequestsForgotten.
const maxRequestLog = 100_000

// requestLog is the bounded log of requests; statsMu guards it.
type requestLog []Request

func (s *Simulator) record(at time.Time, k *key, r *http.Request, faulted bool) {
	account := slices.Index(s.keys, k) // keys never change after New
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	if len(s.log) == maxRequestLog {
		s.log = append(s.log[:0], s.log[maxRequestLog/2:]...)
		s.stats.RequestsForgotten += maxRequestLog / 2
	}
	s.log = append(s.log, Request{At: at, Account: account, Path: r.URL.Path, Email: r.URL.Query().Get("email"), Faulted: faulted})
}

// Requests is the log of API requests so far (the newest maxRequestLog at
// most).
func (s *Simulator) Requests() []Request {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return slices.Clone(s.log)
}

// Reads counts the /breaches requests for email, as sent, hooked or not.
func (s *Simulator) Reads(email string) int { return s.count(APIPrefix+"/breaches", email) }

// MeCalls counts the /me requests, hooked or not.
func (s *Simulator) MeCalls() int { return s.count(APIPrefix+"/me", "") }

func (s *Simulator) count(path, email string) int {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	n := 0
	for _, r := range s.log {
		if r.Path == path && r.Email == email {
			n++
		}
	}
	return n
}
