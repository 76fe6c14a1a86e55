// SPDX-License-Identifier: Apache-2.0

// Package api is a client for the breach monitoring service's read-only JSON
// API (GET /me and GET /breaches). It knows nothing about budgets: the
// scheduler decides when to call it, and every call reports the rate-limit
// headers it saw so the scheduler can stay inside the budget. It records
// every request, its duration and every failure by kind (Metrics).
package api

import (
	"errors"
	"fmt"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Me is the body of GET /me.
type Me struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// Breaches is the body of GET /breaches.
type Breaches struct {
	Email   string
	Sources []breach.SourceState
}

// Endpoint names, as used in the endpoint label of the request metrics.
const (
	EndpointMe       = "me"
	EndpointBreaches = "breaches"
)

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
