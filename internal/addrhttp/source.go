// SPDX-License-Identifier: Apache-2.0

// Package addrhttp fetches the address lists that a URL answers
// (addresses_http): Prometheus' http_sd semantics, the file_sd shape of
// addresses_sd_files by HTTP (a list of {targets, labels} groups, parsed
// by internal/addrfile's ParseSD). A Source keeps its last good list
// through every failure (no answer, a status other than 200 or 304, a body
// past its limit, one that is not a usable list) and holds a list that
// shrank by more than its share as a failure until the same list is
// answered twice in a row. Conditional requests (ETag, Last-Modified) and
// a digest of the body make an unchanged list cost no parse.
//
// It knows nothing of the config: internal/exporter builds each Source's
// Settings and runs one goroutine a Source (Run).
package addrhttp

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// The reasons of a failed fetch, the values of the reason label of
// breach_exporter_address_http_failures_total: each counted from 0.
const (
	// ReasonRequest: no answer (refused, timed out, TLS), or the body
	// broke off.
	ReasonRequest = "request"
	// ReasonStatus: an answer other than 200, or a 304 with no list to
	// keep.
	ReasonStatus = "status"
	// ReasonTooLarge: a body past fileread.MaxAddressHTTPBytes.
	ReasonTooLarge = "too_large"
	// ReasonInvalid: a body that is not a usable list (not UTF-8, not JSON
	// or YAML, not a list of groups, no valid address).
	ReasonInvalid = "invalid"
	// ReasonShrunk: a list that shrank by more than its share, held until
	// it is answered twice in a row.
	ReasonShrunk = "shrunk"
)

// Reasons are every reason, in the order the metrics show them.
var Reasons = []string{ReasonRequest, ReasonStatus, ReasonTooLarge, ReasonInvalid, ReasonShrunk}

// MaxValidatorBytes bounds an ETag or Last-Modified kept for the next
// request: a longer one is not kept (the next request is then
// unconditional, which the body's digest still makes cheap).
const MaxValidatorBytes = 256

// errNoAddress is addrfile.ErrNoAddress in a source's terms: an empty list
// is far more often an export that failed than a directory with nobody
// in it, so it keeps the last good list too.
var errNoAddress = errors.New("no valid address in the list (remove the source from addresses_http to stop watching its addresses)")

// Settings are how a Source fetches.
type Settings struct {
	Client *http.Client // authentication and TLS
	// Timeout bounds one fetch, the body included.
	Timeout time.Duration
	// Interval is the time from one fetch to the next (Run).
	Interval time.Duration
	// MaxShrink is the share by which a list may shrink at once (0..1).
	MaxShrink float64
	// Allowed are the owner label names a group may carry.
	Allowed []string
	// Show lets an error show an address (labels.address email).
	Show bool
}

// Error is a failed fetch: its reason and what happened, which never holds
// an address unless Settings.Show.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// Result is what one fetch did.
type Result struct {
	// Changed: the list differs from the one before.
	Changed bool
	// Invalid are the skipped groups, targets and labels of a new content,
	// at most addrfile.MaxLoggedLines: what to log once, not every fetch.
	Invalid []addrfile.LineError
	// Err is nil when the fetch gave a list or said the last one stands.
	Err *Error
	// Body is the answer of a changed list, to save (Seed).
	Body []byte
}

// Source is one URL's last good list and the figures its metrics show.
// Fetch is for one goroutine at a time; the metrics and MergeInto read it
// concurrently.
type Source struct {
	url string

	mu        sync.Mutex
	addresses []breach.Address
	have      bool // a list was taken: addresses is the last good one
	sum       [sha256.Size]byte
	badSum    [sha256.Size]byte // the last content that failed to parse
	// held is the digest of a list that shrank too much, seen once
	// (holding) in the answer before.
	held               [sha256.Size]byte
	holding            bool
	etag, lastModified string
	up                 bool
	success            time.Time
	failures           map[string]float64 // by reason
	invalid            int
	duplicates         int // set by MergeInto
}

// NewSource returns a Source of url that has fetched nothing.
func NewSource(url string) *Source {
	return &Source{url: url, failures: map[string]float64{}}
}

// URL is the Source's URL, its label in the metrics.
func (s *Source) URL() string { return s.url }

// Forget drops the validators of the last answer, so that the next fetch
// gets the whole body: after a change of what its parse depends on (the
// owner labels, labels.address), a 304 would keep the old parse.
func (s *Source) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.etag, s.lastModified = "", ""
}

// answer is a 200's body and validators, or a 304.
type answer struct {
	notModified        bool
	body               []byte
	etag, lastModified string
}

// Fetch fetches the list once, within set.Timeout, and takes it if it is
// usable; a failure keeps the last good list.
func (s *Source) Fetch(ctx context.Context, set Settings, now time.Time) Result {
	ctx, cancel := context.WithTimeout(ctx, set.Timeout)
	defer cancel()
	a, err := s.get(ctx, set)
	if err != nil {
		return s.fail(err, nil)
	}
	if a.notModified {
		s.succeed(now, a)
		return Result{}
	}
	return s.take(a, set, now)
}

// get sends the request, conditional on the last good answer's
// validators, and reads at most fileread.MaxAddressHTTPBytes of the body.
func (s *Source) get(ctx context.Context, set Settings) (answer, *Error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return answer{}, &Error{ReasonRequest, err}
	}
	req.Header.Set("Accept", "application/json")
	s.mu.Lock()
	// Conditional only with a list to keep: a 304 says keep it.
	conditional := s.have && (s.etag != "" || s.lastModified != "")
	if conditional {
		setIf(req.Header, "If-None-Match", s.etag)
		setIf(req.Header, "If-Modified-Since", s.lastModified)
	}
	s.mu.Unlock()
	r, err := set.Client.Do(req)
	if err != nil {
		return answer{}, s.requestError(ctx, set.Timeout, err)
	}
	defer r.Body.Close()
	switch {
	case r.StatusCode == http.StatusNotModified && conditional:
		return answer{notModified: true}, nil
	case r.StatusCode != http.StatusOK:
		// The code alone: the status text is the server's, and may say anything.
		return answer{}, &Error{ReasonStatus, fmt.Errorf("GET %s: answered %d %s", s.url, r.StatusCode, http.StatusText(r.StatusCode))}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, fileread.MaxAddressHTTPBytes+1))
	switch {
	case err != nil:
		return answer{}, s.requestError(ctx, set.Timeout, fmt.Errorf("reading the body: %w", err))
	case len(body) > fileread.MaxAddressHTTPBytes:
		return answer{}, &Error{ReasonTooLarge, fmt.Errorf("GET %s: the body is larger than %d bytes, read no further", s.url, fileread.MaxAddressHTTPBytes)}
	}
	return answer{body: body, etag: validator(r.Header.Get("ETag")), lastModified: validator(r.Header.Get("Last-Modified"))}, nil
}

func setIf(h http.Header, key, value string) {
	if value != "" {
		h.Set(key, value)
	}
}

// validator is an answer's ETag or Last-Modified as kept: none past
// MaxValidatorBytes.
func validator(v string) string {
	if len(v) > MaxValidatorBytes {
		return ""
	}
	return v
}

// requestError says a request failed, in plain words when it timed out.
func (s *Source) requestError(ctx context.Context, timeout time.Duration, err error) *Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{ReasonRequest, fmt.Errorf("GET %s: no whole answer within %s", s.url, timeout)}
	}
	if !strings.Contains(err.Error(), s.url) {
		err = fmt.Errorf("GET %s: %w", s.url, err)
	}
	return &Error{ReasonRequest, err}
}

// take parses a 200's body and takes its list, unless the body is the
// last good one's (nothing to do) or the list is not usable.
func (s *Source) take(a answer, set Settings, now time.Time) Result {
	sum := digest(a.body, set.Allowed, set.Show)
	s.mu.Lock()
	same := s.have && sum == s.sum
	last := len(s.addresses)
	s.mu.Unlock()
	if same {
		s.succeed(now, a)
		return Result{}
	}
	addrs, invalid, err := addrfile.ParseSD(s.url, a.body, set.Show, set.Allowed)
	invalid = invalid[:min(len(invalid), addrfile.MaxLoggedLines)]
	if err != nil {
		// A body with no valid address at all: its groups say why, once
		// per content.
		s.mu.Lock()
		if sum == s.badSum {
			invalid = nil
		}
		s.badSum = sum
		s.mu.Unlock()
		if errors.Is(err, addrfile.ErrNoAddress) {
			err = errNoAddress
		}
		return s.fail(&Error{ReasonInvalid, fmt.Errorf("GET %s: %w", s.url, err)}, invalid)
	}
	if s.shrinks(sum, last, len(addrs), set.MaxShrink) {
		return s.fail(&Error{ReasonShrunk, fmt.Errorf("GET %s: the list shrank from %d to %d addresses, by more than max_shrink (%g); it is taken when the next answer is the same list", s.url, last, len(addrs), set.MaxShrink)}, nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !s.have || !slices.EqualFunc(addrs, s.addresses, breach.Address.Equal)
	s.addresses, s.have, s.sum, s.invalid, s.holding = addrs, true, sum, len(invalid), false
	s.setSuccess(now, a)
	if !changed {
		return Result{}
	}
	return Result{Changed: true, Invalid: invalid, Body: a.body}
}

// Seed makes body, a list a Result gave before the process restarted,
// the last good list before the first fetch: a source that fails at the
// start keeps it rather than none. It is no fetch: up stays 0 and there
// is no success until a fetch gives one. A body that does not parse now
// (with other owner_labels, say) is refused.
func (s *Source) Seed(body []byte, set Settings) error {
	addrs, invalid, err := addrfile.ParseSD(s.url, body, set.Show, set.Allowed)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addresses, s.have, s.sum, s.invalid = addrs, true, digest(body, set.Allowed, set.Show), len(invalid)
	return nil
}

// shrinks reports whether a list of n addresses, digest sum, is held: it
// has lost more than share of the last good list's last, and was not the
// answer just before.
func (s *Source) shrinks(sum [sha256.Size]byte, last, n int, share float64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if float64(n) >= float64(last)*(1-share) {
		return false
	}
	if s.holding && s.held == sum {
		return false // seen twice in a row: taken
	}
	s.held, s.holding = sum, true
	return true
}

// digest is what a body's parse depends on: its bytes, the allowed label
// names and whether errors show addresses.
func digest(body []byte, allowed []string, show bool) [sha256.Size]byte {
	h := sha256.New()
	h.Write(body)
	h.Write([]byte{0})
	h.Write([]byte(strings.Join(allowed, ",")))
	if show {
		h.Write([]byte{1})
	}
	return [sha256.Size]byte(h.Sum(nil))
}

func (s *Source) succeed(now time.Time, a answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setSuccess(now, a)
}

// setSuccess notes a fetch that gave the list in force; with s.mu held.
func (s *Source) setSuccess(now time.Time, a answer) {
	s.up, s.success = true, now
	if !a.notModified {
		s.etag, s.lastModified = a.etag, a.lastModified
	}
}

func (s *Source) fail(err *Error, invalid []addrfile.LineError) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.up = false
	s.failures[err.Reason]++
	return Result{Err: err, Invalid: invalid}
}

// MergeInto appends to out the addresses of the last good list whose key
// is not in seen yet, as addrfile.Source.MergeInto does for a file, and
// counts the others for the metrics.
func (s *Source) MergeInto(seen map[string]string, owner string, out []breach.Address) ([]breach.Address, []addrfile.Elsewhere) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var others map[string]int
	out, s.duplicates, others = addrfile.MergeList(seen, owner, out, s.addresses, nil)
	return out, addrfile.AppendElsewhere(nil, s.url, others)
}

// Run fetches the list every set.Interval, the first time after first,
// until ctx ends, and hands each result to report (which must not block).
// Its timer keeps real time, as the file watch does: a directory changes
// in real time; now (the exporter's clock) dates the successes, as it
// dates the address files' reads.
func (s *Source) Run(ctx context.Context, set Settings, first time.Duration, now func() time.Time, report func(Result)) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		report(s.Fetch(ctx, set, now()))
		t.Reset(set.Interval)
	}
}
