// Package api is a client for the breach monitoring service's read-only JSON
// API (GET /me and GET /breaches). It knows nothing about budgets or metrics:
// the scheduler decides when to call it, and every call reports the
// rate-limit headers it saw so the scheduler can stay inside the budget.
package api

import (
	"errors"
	"fmt"
	"time"
)

// Enum values are kept as plain strings on purpose: the service may add a
// feed, field or plan, and the exporter must export it rather than drop it.

// Known sources (feeds) as of the spec. Others may appear.
var KnownSources = []string{"archive", "combolist", "index", "enriched"}

// Known exposed-field categories as of the spec. Others may appear.
var KnownFields = []string{"password", "hash", "username", "name", "dob", "address", "phone", "ip"}

// Me is the body of GET /me.
type Me struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// Breaches is the body of GET /breaches.
type Breaches struct {
	Email   string        `json:"email"`
	Sources []SourceState `json:"sources"`
}

// SourceState is the latest sweep result of one feed for an address.
type SourceState struct {
	Source               string   `json:"source"`
	BreachCount          int64    `json:"breach_count"`
	SourceDBs            []string `json:"source_dbs"`
	FieldsExposed        []string `json:"fields_exposed"`
	HasPlaintextPassword bool     `json:"has_plaintext_password"`
	// time.Time's JSON decoding takes RFC 3339 with or without fractional
	// seconds, which covers the spec's millisecond form and its absence.
	LastScannedAt time.Time `json:"last_scanned_at"`
	LastChangedAt time.Time `json:"last_changed_at"`
}

// Endpoint names, as used in the endpoint label of the request metrics.
const (
	EndpointMe       = "me"
	EndpointBreaches = "breaches"
)

// RateLimit is what the rate-limit headers of one response said. A zero
// field means the header was absent or unparseable.
type RateLimit struct {
	Limit        int       // X-RateLimit-Limit
	HasLimit     bool      // the Limit header was present
	Remaining    int       // X-RateLimit-Remaining
	HasRemaining bool      // the Remaining header was present
	Reset        time.Time // X-RateLimit-Reset (Unix seconds); zero when absent
}

// Kind classifies a failed call so callers never depend on the error-code
// texts, which the spec leaves open.
type Kind int

const (
	KindTransport    Kind = iota // no HTTP response: refused, timeout, reset
	KindBadRequest               // 400
	KindUnauthorized             // 401: token missing, wrong, rotated or revoked
	KindUnverified               // 403: address on the account but unverified
	KindNotMonitored             // 404: address not monitored by the account
	KindRateLimited              // 429
	KindServer                   // 5xx
	KindUnexpected               // any other status
	KindBadBody                  // 200 with a body that is not the documented JSON, or over the size cap
)

func (k Kind) String() string {
	switch k {
	case KindTransport:
		return "transport"
	case KindBadRequest:
		return "bad_request"
	case KindUnauthorized:
		return "unauthorized"
	case KindUnverified:
		return "unverified"
	case KindNotMonitored:
		return "not_monitored"
	case KindRateLimited:
		return "rate_limited"
	case KindServer:
		return "server_error"
	case KindUnexpected:
		return "unexpected_status"
	case KindBadBody:
		return "bad_body"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is returned by every failed call.
type Error struct {
	Kind       Kind
	StatusCode int       // 0 for transport errors
	RetryAt    time.Time // for KindRateLimited: the X-RateLimit-Reset time, zero when absent
	Err        error     // the underlying cause, if any
}

func (e *Error) Error() string {
	msg := "breach api: " + e.Kind.String()
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, and false when err is not an *Error.
func KindOf(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	return 0, false
}
