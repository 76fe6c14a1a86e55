// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Me is the body of GET /me.
type Me struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// Error is the body of every non-200 API response.
type Error struct {
	Error string `json:"error"`
}

// Error codes. The spec fixes unauthorized and rate_limited; the others are
// the simulator's choice and clients must not depend on them.
const (
	CodeUnauthorized     = "unauthorized"
	CodeRateLimited      = "rate_limited"
	CodeMissingEmail     = "missing_email"
	CodeUnverified       = "unverified"
	CodeNotMonitored     = "not_monitored"
	CodeNotFound         = "not_found" // no such endpoint
	CodeMethodNotAllowed = "method_not_allowed"
)

// Rate-limit response headers.
const (
	HeaderLimit     = "X-RateLimit-Limit"
	HeaderRemaining = "X-RateLimit-Remaining"
	HeaderReset     = "X-RateLimit-Reset"
)

// APIPrefix is the API root's path; the spec's {base_url} ends in it.
const APIPrefix = "/api/v1"

// Handler serves the API under /api/v1, the OpenAPI document at
// /openapi.json, and the demo's sink for Alertmanager's notifications
// under NotificationsPath.
func (s *Simulator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(APIPrefix+"/", s.serveAPI)
	mux.HandleFunc("/openapi.json", serveOpenAPI)
	mux.HandleFunc(NotificationsPath, s.serveNotification)
	return mux
}

// serveAPI checks in the order a client can observe: the key first (401
// costs nothing), then the window (429), then route, method and
// parameters, which all spend one request. A Go hook (hooks.go) answers
// ahead of all of it.
func (s *Simulator) serveAPI(w http.ResponseWriter, r *http.Request) {
	now := s.clock.Now()
	k := s.keyOf(r)
	if hook := s.nextHook(); hook != nil {
		s.record(now, k, r, true)
		hook(w, r)
		return
	}
	s.record(now, k, r, k == nil)
	if k == nil {
		setRateHeaders(w, unattributed(s.limit, now))
		w.Header().Set("WWW-Authenticate", `Bearer realm="api"`)
		s.writeError(w, http.StatusUnauthorized, CodeUnauthorized)
		return
	}
	if s.injectFault(w, r, now) {
		return
	}
	v := k.window.take(now)
	setRateHeaders(w, v)
	if !v.allowed {
		s.writeError(w, http.StatusTooManyRequests, CodeRateLimited)
		return
	}

	var serve func(http.ResponseWriter, *http.Request, *key)
	switch strings.TrimPrefix(r.URL.Path, APIPrefix) {
	case "/me":
		serve = s.serveMe
	case "/breaches":
		serve = s.serveBreaches
	default:
		s.writeError(w, http.StatusNotFound, CodeNotFound)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed)
		return
	}
	serve(w, r, k)
}

// keyOf is the account whose token r bears, nil for none. Every token is
// compared in constant time.
func (s *Simulator) keyOf(r *http.Request) *key {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil
	}
	token = strings.TrimSpace(token)
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	var found *key
	for _, k := range s.keys {
		if subtle.ConstantTimeCompare([]byte(token), []byte(k.token)) == 1 {
			found = k
		}
	}
	return found
}

func setRateHeaders(w http.ResponseWriter, v verdict) {
	h := w.Header()
	h.Set(HeaderLimit, strconv.Itoa(v.limit))
	h.Set(HeaderRemaining, strconv.Itoa(v.remaining))
	h.Set(HeaderReset, strconv.FormatInt(v.reset, 10))
}

func (s *Simulator) serveMe(w http.ResponseWriter, _ *http.Request, k *key) {
	s.ctlMu.Lock()
	me := k.me
	s.ctlMu.Unlock()
	s.writeJSON(w, http.StatusOK, me)
}

func (s *Simulator) serveBreaches(w http.ResponseWriter, r *http.Request, k *key) {
	email := r.URL.Query().Get("email")
	if email == "" {
		s.writeError(w, http.StatusBadRequest, CodeMissingEmail)
		return
	}
	status, body := s.answer(k, email)
	s.writeJSON(w, status, body)
}

// answer is what GET /breaches says about email on k's account: the status
// and the body.
func (s *Simulator) answer(k *key, email string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, known := k.lookup(email)
	exact := k.others
	if known {
		exact = a.exact
	}
	switch {
	case exact != nil:
		return exact.reply(email)
	case !known:
		return http.StatusNotFound, Error{Error: CodeNotMonitored}
	case !a.Verified:
		return http.StatusForbidden, Error{Error: CodeUnverified}
	}
	return http.StatusOK, a.breaches()
}

func (s *Simulator) writeError(w http.ResponseWriter, status int, code string) {
	s.writeJSON(w, status, Error{Error: code})
}

func (s *Simulator) writeJSON(w http.ResponseWriter, status int, body any) {
	data, err := json.Marshal(body)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":"internal"}`)
	}
	s.countResponse(status)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
