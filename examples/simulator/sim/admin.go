// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Test controls. They put the simulated service into the states a client
// must handle (and its alerts must catch): a key whose budget someone else
// spends, a revoked or rotated token, an API that fails or drops
// connections, a plan without webhooks, addresses that become unverified,
// verified or unknown, and feed states set exactly. They are served by
// AdminHandler, which the simulator's main puts on a listener of its own
// (--admin.listen-address, loopback only): the service itself has no such
// API.

// Fault kinds the API can be made to answer with.
const (
	FaultNone        = ""
	FaultRateLimited = "rate_limited" // 429, Remaining 0, the window resets in FaultResetAfter
	FaultServerError = "server_error" // 503 {"error":"unavailable"}
	FaultClose       = "close"        // the connection is closed without an answer
)

// FaultResetAfter is the X-RateLimit-Reset of an injected 429, from now: a
// client that honours it retries soon and meets the fault again.
const FaultResetAfter = 2 * time.Second

var faultKinds = []string{FaultNone, FaultRateLimited, FaultServerError, FaultClose}

// faults are the injected failures; ctlMu guards them.
type faults struct {
	all     string            // every authorised API request
	address map[string]string // GET /breaches of one address (lower-cased)
}

// SetFault makes every authorised API request fail with kind, or, with an
// email, only GET /breaches for that address. FaultNone clears it.
func (s *Simulator) SetFault(kind, email string) error {
	if !slices.Contains(faultKinds, kind) {
		return fmt.Errorf("fault %q is not one of %q", kind, faultKinds)
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	if email == "" {
		s.faults.all = kind
		return nil
	}
	if s.faults.address == nil {
		s.faults.address = map[string]string{}
	}
	if kind == FaultNone {
		delete(s.faults.address, breach.Key(email))
	} else {
		s.faults.address[breach.Key(email)] = kind
	}
	return nil
}

// injectFault answers r with its injected fault, if any, and reports
// whether it did. Faults cost no request of the window.
func (s *Simulator) injectFault(w http.ResponseWriter, r *http.Request, now time.Time) bool {
	s.ctlMu.Lock()
	kind := s.faults.all
	if kind == FaultNone && strings.TrimPrefix(r.URL.Path, APIPrefix) == "/breaches" {
		kind = s.faults.address[breach.Key(r.URL.Query().Get("email"))]
	}
	s.ctlMu.Unlock()
	switch kind {
	case FaultRateLimited:
		setRateHeaders(w, verdict{limit: s.limit, remaining: 0, reset: now.Add(FaultResetAfter).Unix()})
		s.writeError(w, http.StatusTooManyRequests, CodeRateLimited)
	case FaultServerError:
		s.writeError(w, http.StatusServiceUnavailable, "unavailable")
	case FaultClose:
		hj, ok := w.(http.Hijacker)
		if !ok {
			s.writeError(w, http.StatusBadGateway, "cannot close") // not over HTTP/1
			return true
		}
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
	default:
		return false
	}
	return true
}

// SetToken makes token the first account's only accepted key: the old one
// answers 401 from now on, as a rotation in the dashboard does. The
// account keeps its window.
func (s *Simulator) SetToken(token string) error {
	if err := checkToken(token); err != nil {
		return err
	}
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	for _, k := range s.keys[1:] {
		if k.token == token {
			return errors.New("the token is another account's")
		}
	}
	s.keys[0].token = token
	return nil
}

// SetPlan changes the plan the first account's /me reports; deliveries
// follow it.
func (s *Simulator) SetPlan(plan string) error {
	if !slices.Contains(breach.KnownPlans, plan) {
		return fmt.Errorf("plan %q is not one of %s", plan, strings.Join(breach.KnownPlans, ", "))
	}
	s.ctlMu.Lock()
	s.keys[0].me.Plan = plan
	s.ctlMu.Unlock()
	return nil
}

// delivering reports whether k's alerts are posted: a webhook URL is set
// and the account's plan is one the spec delivers to.
func (s *Simulator) delivering(k *key) bool {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	return s.webhookURL != "" && !breach.PlanWithoutWebhooks(k.me.Plan)
}

// Address states SetAddress accepts.
const (
	AddressVerified   = "verified"
	AddressUnverified = "unverified"
	AddressAbsent     = "absent" // not on the account: 404
)

// SetAddress puts email on the account (verified or not) or removes it. The
// address is pinned: sweeps no longer change it, SetFeed does. A newly
// verified address has no feed scanned yet.
func (s *Simulator) SetAddress(email, state string) error {
	if parsed, err := mail.ParseAddress(email); err != nil || parsed.Address != email {
		return fmt.Errorf("%q is not a plain email address", email)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[0]
	a, known := k.lookup(email)
	switch state {
	case AddressAbsent:
		if known {
			k.monitored = slices.DeleteFunc(k.monitored, func(b *monitored) bool { return b == a })
			delete(k.byEmail, breach.Key(email))
		}
		return nil
	case AddressVerified, AddressUnverified:
	default:
		return fmt.Errorf("state %q is not one of %s, %s, %s", state, AddressVerified, AddressUnverified, AddressAbsent)
	}
	if !known {
		a = &monitored{Address: Address{Email: email}}
		k.monitored = append(k.monitored, a)
		k.byEmail[breach.Key(email)] = a
	}
	a.pinned, a.exact = true, nil
	verified := state == AddressVerified
	if a.Verified == verified && (a.feeds != nil) == verified {
		return nil
	}
	a.Verified, a.feeds = verified, nil
	if verified {
		for _, src := range breach.KnownSources {
			a.feeds = append(a.feeds, newFeed(src))
		}
	}
	return nil
}

// FeedState is what SetFeed makes a feed report.
type FeedState struct {
	Email     string   `json:"email"`
	Source    string   `json:"source"`
	Databases []string `json:"databases"`
	Fields    []string `json:"fields"`
	Plaintext bool     `json:"plaintext"`
}

// SetFeed makes the feed of a verified address report exactly st, as a
// sweep at the clock's time would: a visible change moves last_changed_at
// and produces its alert, which is delivered (retrying until ctx ends) when
// the plan has deliveries. It returns the alert, if any. The address is
// pinned: sweeps no longer change it.
func (s *Simulator) SetFeed(ctx context.Context, st FeedState) (*Alert, error) {
	for _, field := range st.Fields {
		if !slices.Contains(breach.KnownFields, field) {
			return nil, fmt.Errorf("field %q is not one of %s", field, strings.Join(breach.KnownFields, ", "))
		}
	}
	s.mu.Lock()
	a, known := s.keys[0].lookup(st.Email)
	if !known || !a.Verified || a.exact != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%s is not a verified address of the account", st.Email)
	}
	i := slices.Index(breach.KnownSources, st.Source)
	if i < 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("source %q is not one of %s", st.Source, strings.Join(breach.KnownSources, ", "))
	}
	a.pinned = true
	f := a.feeds[i]
	before := f.clone()
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	records := make(map[string]int, len(st.Databases))
	for _, db := range st.Databases {
		records[db] = max(1, f.records[db])
	}
	f.records = records
	f.fields = map[string]bool{}
	for _, field := range st.Fields {
		f.fields[field] = true
	}
	f.plaintext = st.Plaintext
	f.scanned = true
	f.lastScanned = now
	var alert *Alert
	if f.differs(before) {
		f.lastChanged = now
		made := s.newAlert(a.Email, before, f, now)
		alert = &made
	}
	s.mu.Unlock()

	if alert != nil {
		s.publish(ctx, s.keys[0], []Alert{*alert})
	}
	return alert, nil
}

// AdminHandler serves the test controls, each a POST of a JSON object:
//
//	/admin/fault    {"kind": "rate_limited"|"server_error"|"close"|"", "email": optional}
//	/admin/token    {"token": "svc_ak_..."}
//	/admin/plan     {"plan": "free"}
//	/admin/address  {"email": "...", "state": "verified"|"unverified"|"absent"}
//	/admin/feed     {"email", "source", "databases": [...], "fields": [...], "plaintext": bool}
//	/admin/news     {"email", "source"}: News, a change on demand
//
// Each answers 204, or 200 with the alert a feed change produced, or 400
// with {"error": ...}. Alerts are delivered with ctx (the simulator's run).
func (s *Simulator) AdminHandler(ctx context.Context) http.Handler {
	mux := http.NewServeMux()
	handle := func(path string, do func(body []byte) (any, error)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				writeAdmin(w, http.StatusMethodNotAllowed, Error{Error: CodeMethodNotAllowed})
				return
			}
			body, err := readAdminBody(r)
			var answer any
			if err == nil {
				answer, err = do(body)
			}
			switch {
			case err != nil:
				writeAdmin(w, http.StatusBadRequest, Error{Error: err.Error()})
			case answer == nil:
				w.WriteHeader(http.StatusNoContent)
			default:
				writeAdmin(w, http.StatusOK, answer)
			}
		})
	}
	handle("/admin/fault", func(body []byte) (any, error) {
		var req struct{ Kind, Email string }
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		return nil, s.SetFault(req.Kind, req.Email)
	})
	handle("/admin/token", func(body []byte) (any, error) {
		var req struct{ Token string }
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		return nil, s.SetToken(req.Token)
	})
	handle("/admin/plan", func(body []byte) (any, error) {
		var req struct{ Plan string }
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		return nil, s.SetPlan(req.Plan)
	})
	handle("/admin/address", func(body []byte) (any, error) {
		var req struct{ Email, State string }
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		return nil, s.SetAddress(req.Email, req.State)
	})
	handle("/admin/feed", func(body []byte) (any, error) {
		var req FeedState
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		alert, err := s.SetFeed(ctx, req)
		if alert == nil {
			return nil, err // a nil *Alert in an any would not be nil
		}
		return alert, err
	})
	handle("/admin/news", func(body []byte) (any, error) {
		var req struct{ Email, Source string }
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		alert, err := s.News(ctx, req.Email, req.Source)
		if err != nil {
			return nil, err
		}
		return alert, nil
	})
	return mux
}

const maxAdminBody = 64 << 10

func readAdminBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxAdminBody+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the body: %w", err)
	case len(body) > maxAdminBody:
		return nil, fmt.Errorf("body over %d bytes", maxAdminBody)
	}
	return body, nil
}

// decodeStrict rejects unknown keys: a misspelt control must not do
// something else quietly.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return nil
}

func writeAdmin(w http.ResponseWriter, status int, body any) {
	data, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
