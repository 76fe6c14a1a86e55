// SPDX-License-Identifier: Apache-2.0

// Package webhook receives the breach monitoring service's signed alert
// webhooks (spec section 6) and records each accepted alert in the
// watchlist, which counts it under its address and has the address re-read
// at once.
//
// The endpoint faces the internet, so nothing about a request is trusted
// until its HMAC signature checks out: an unsigned request is answered from
// the method, the size and the signature header alone, never reaches the
// JSON parser and never creates a label value. Secrets and bodies are never
// logged.
package webhook

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Handler is the webhook endpoint. It is safe for concurrent use.
type Handler struct {
	config    *config.Current
	watchlist *watchlist.List
	clock     clockwork.Clock
	logger    log.Logger
	metrics   *metrics
	dedup     *dedup
	journal   Journal // nil: persistence off
	forward   func(watchlist.AcceptedAlert)
	full      func() bool
	macs      macs
	tokens    tokens
}

// Options are the handler's collaborators.
type Options struct {
	// Config gives the secrets and limits in force, read once per request,
	// so a reload applies to the next request without a call here.
	Config *config.Current
	// Watchlist counts accepted alerts under their address, queues the
	// address for a re-read, and discovers addresses it does not watch.
	Watchlist *watchlist.List
	Clock     clockwork.Clock
	Logger    log.Logger
	// Journal makes an accepted alert durable before it is answered; nil
	// with persistence off.
	Journal Journal
	// Forward, with replicas, takes an alert once it is durable, to pass
	// it to the store: every replica counts it when it comes back from
	// there (ApplyShared), this one too. nil alone.
	Forward func(watchlist.AcceptedAlert)
	// Full reports, with replicas, that the alerts not yet passed to the
	// store reached their bound: the next one is answered 503.
	Full func() bool
}

// Journal is where accepted alerts become durable (internal/persist's
// write-ahead journal).
type Journal interface {
	// Commit makes a durable, then calls apply, in the journal's order;
	// an error means neither happened.
	Commit(a watchlist.AcceptedAlert, apply func()) error
}

// NewHandler registers the receiver's own metrics on reg and returns the
// handler. The per-address alert series are the watchlist's.
func NewHandler(reg prometheus.Registerer, o Options) (*Handler, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Handler{
		config:    o.Config,
		watchlist: o.Watchlist,
		clock:     o.Clock,
		logger:    o.Logger,
		metrics:   m,
		dedup:     newDedup(),
		journal:   o.Journal,
		forward:   o.Forward,
		full:      o.Full,
	}, nil
}

// ServeHTTP answers, checking in this order: 405 (not POST), 413 (body over
// the cap), 401 (signature missing, malformed or wrong), 415 (not
// application/json), 400 (signed but not a valid event), then 204 for an
// unknown event, a duplicate, a stale alert or an accepted one, or 503
// when the alert could not be made durable.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	outcome := h.serve(w, r)
	// An accepted alert was counted with its effects (apply), so that a
	// snapshot holds the count and the alert together.
	if outcome != outcomeAccepted {
		h.metrics.requests[outcome].Inc()
	}
	h.metrics.duration.Observe(h.clock.Since(start).Seconds())
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) string {
	bundle := h.config.Load()
	v, outcome := h.verify(w, r, bundle)
	if outcome != "" {
		return outcome
	}
	return h.accept(w, r, &v, &bundle.Config.Webhook)
}

// verified is a request whose body is signed with an account's secret and
// holds a valid alert.created event.
type verified struct {
	body    []byte
	account string
	alert   Alert
}

// verify reads and checks the request. When it is not a valid signed
// alert, it answers it and returns the outcome; else no outcome.
func (h *Handler) verify(w http.ResponseWriter, r *http.Request, bundle *config.Bundle) (verified, string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return verified{}, h.reject(w, r, http.StatusMethodNotAllowed, outcomeMethodNotAllowed, "method "+r.Method)
	}

	body, err := readBody(w, r, bundle.Config.Webhook.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return verified{}, h.reject(w, r, http.StatusRequestEntityTooLarge, outcomeTooLarge, "body over the size cap")
		}
		// Client gone, read timeout or broken chunking: nothing to verify.
		return verified{}, h.reject(w, r, http.StatusBadRequest, outcomeMalformed, "body unreadable")
	}

	account := h.macs.signedBy(r.Header, body, bundle)
	if account == nil {
		return verified{}, h.reject(w, r, http.StatusUnauthorized, outcomeInvalidSignature, "signature missing, malformed or wrong")
	}

	// Verified from here on: the body may be looked at.
	if !isJSONMediaType(r.Header.Get("Content-Type")) {
		return verified{}, h.reject(w, r, http.StatusUnsupportedMediaType, outcomeUnsupportedMediaType, "content type is not application/json")
	}
	event, alert, err := parseBody(body)
	if err != nil {
		return verified{}, h.reject(w, r, http.StatusBadRequest, outcomeMalformed, err.Error())
	}
	// A signed body is the service's, but a buggy sender echoing an API
	// token (any account's) must not make it a label value or put it in a
	// log line, as a reply of the API that carries it is refused too.
	if h.tokens.contain(body, bundle) {
		return verified{}, h.reject(w, r, http.StatusBadRequest, outcomeMalformed, "the body carries an API token")
	}
	if event != breach.EventAlertCreated {
		return verified{}, h.ignore(w, r, outcomeUnknownEvent)
	}
	// An address not watched may become a discovered one: polled, and a
	// label value. A watched one was checked when it came in.
	if !h.watchlist.Watches(alert.Address) && !breach.ValidEmail(alert.Address) {
		return verified{}, h.reject(w, r, http.StatusBadRequest, outcomeMalformed,
			fmt.Sprintf("address is not a valid email address of at most %d bytes", breach.MaxAddressBytes))
	}
	return verified{body: body, account: account.Name, alert: alert}, ""
}

// accept answers a verified alert: a duplicate or a stale one is ignored;
// any other is accepted, 204, once durable.
func (h *Handler) accept(w http.ResponseWriter, r *http.Request, v *verified, s *config.WebhookConfig) string {
	now := h.clock.Now()
	maxAge := time.Duration(s.MaxEventAge)
	stale := maxAge > 0 && v.alert.ObservedAt.Before(now.Add(-maxAge))
	// Only accepted bodies are remembered: a duplicate is a body that was
	// already counted, so a replay of a stale one is stale again.
	key := sha256.Sum256(v.body)
	if h.dedup.check(key, now, !stale, time.Duration(s.DedupWindow), s.DedupMaxEntries) {
		return h.ignore(w, r, outcomeDuplicate)
	}
	if stale {
		return h.ignore(w, r, outcomeStale)
	}

	// Accepted alerts are not logged: the counters are the record, and with
	// go-kit even a filtered debug line costs its timestamp and caller on the
	// endpoint's busiest path. 204 means durable: a failed commit is 503,
	// which the sender retries.
	a := h.accepted(key, v.account, v.alert, now)
	err := errForwardBacklog
	if h.full == nil || !h.full() {
		err = h.commit(a, s.DedupMaxEntries)
	}
	if err != nil {
		h.dedup.release(key)
		w.Header().Set("Retry-After", "1")
		return h.reject(w, r, http.StatusServiceUnavailable, outcomeUnavailable, err.Error())
	}
	w.WriteHeader(http.StatusNoContent)
	return outcomeAccepted
}

// commit makes a durable when the journal is on, then applies it.
func (h *Handler) commit(a watchlist.AcceptedAlert, maxEntries int) error {
	apply := func() { h.apply(a, maxEntries) }
	if h.forward != nil {
		apply = func() {
			h.dedup.remember(a.Digest, a.At, maxEntries)
			h.forward(a)
		}
	}
	if h.journal == nil {
		apply()
		return nil
	}
	return h.journal.Commit(a, apply)
}

// Replay applies an alert accepted before a restart, from the journal,
// which calls it with each of its records in order. Call it after Restore
// and before serving.
func (h *Handler) Replay(a watchlist.AcceptedAlert) {
	h.apply(a, h.config.Load().Config.Webhook.DedupMaxEntries)
}

// apply is everything an accepted alert changes: the duplicate memory, its
// counts and the accepted outcome.
func (h *Handler) apply(a watchlist.AcceptedAlert, maxEntries int) {
	h.dedup.remember(a.Digest, a.At, maxEntries)
	// The moment of acceptance, also for an alert the journal replays.
	a.Delta.AcceptedAt = a.At
	h.record(a.Account, a.Address, a.Delta)
	h.metrics.requests[outcomeAccepted].Inc()
}

// errForwardBacklog is the 503 while the store is down and this replica
// holds as many alerts for it as it may.
var errForwardBacklog = errors.New("the alerts waiting for the store reached their bound")

// Remember remembers a replayed alert that the store counts (with
// replicas), so that a copy of its body sent again is a duplicate here.
func (h *Handler) Remember(a watchlist.AcceptedAlert) {
	h.dedup.remember(a.Digest, a.At, h.config.Load().Config.Webhook.DedupMaxEntries)
}

// ApplyShared applies an alert from the store, in the store's order, on
// every replica: the one that accepted it (mine, which re-reads its
// address) and the others, which remember it too, so that a copy of the
// body sent to them is a duplicate.
func (h *Handler) ApplyShared(a watchlist.AcceptedAlert, mine bool) {
	h.dedup.remember(a.Digest, a.At, h.config.Load().Config.Webhook.DedupMaxEntries)
	a.Delta.AcceptedAt = a.At
	h.recordShared(a.Account, a.Address, a.Delta, mine)
}

// Forwarded counts the outcome of an alert this replica passed to the
// store: accepted when the store took it, a duplicate when another
// replica had passed the same body first. So each body is counted
// accepted once across the replicas.
func (h *Handler) Forwarded(added bool) {
	if added {
		h.metrics.requests[outcomeAccepted].Inc()
	} else {
		h.metrics.requests[outcomeDuplicate].Inc()
	}
}

// accepted is the record of an accepted alert.
func (h *Handler) accepted(key [sha256.Size]byte, account string, a Alert, now time.Time) watchlist.AcceptedAlert {
	// The watchlist bounds the values (length, number of distinct ones).
	d := watchlist.AlertDelta{
		Source:        a.Source,
		Severity:      a.Severity,
		NewDatabases:  len(a.Delta.NewSourceDBs),
		ExposedFields: a.Delta.NewlyExposedFields,
		NewPlaintext:  a.Delta.HasNewPlaintext,
		ObservedAt:    a.ObservedAt,
	}
	if breach.InFuture(a.ObservedAt, now) {
		d.ObservedAt = time.Time{}
		h.metrics.futureObserved.Inc()
	}
	return watchlist.AcceptedAlert{Digest: key, At: now, Account: account, Address: a.Address, Delta: d}
}

// record counts an alert the account's secret verified under its address
// (the watchlist also queues the address for a re-read), or without an
// address label when the address is not watched and may not be discovered,
// is another account's, or the account is gone.
func (h *Handler) record(account, address string, d watchlist.AlertDelta) {
	h.recordShared(account, address, d, true)
}

// recordShared is record; refresh false leaves the address's re-read to
// the replica that accepted the alert.
func (h *Handler) recordShared(account, address string, d watchlist.AlertDelta, refresh bool) {
	switch h.watchlist.RecordSharedAlert(account, address, d, refresh) {
	case watchlist.AlertDiscovered:
		level.Info(h.logger).Log("msg", "Alert for an address not in the config; polling it from now on (webhook.discover_addresses)",
			"address", h.watchlist.Label(breach.Key(address)))
	case watchlist.AlertUntracked:
		h.metrics.untracked[untrackedDiscoveryOff].Inc()
	case watchlist.AlertRefused:
		h.metrics.untracked[untrackedDiscoveryLimit].Inc()
	case watchlist.AlertOtherAccount:
		h.metrics.untracked[untrackedOtherAccount].Inc()
	case watchlist.AlertRemovedAccount:
		h.metrics.untracked[untrackedRemovedAccount].Inc()
	}
}

// ignore answers a verified request that changes nothing with the same 204
// as a success, so the sender does not retry it.
func (h *Handler) ignore(w http.ResponseWriter, r *http.Request, outcome string) string {
	level.Debug(h.logger).Log("msg", "Webhook request ignored", "outcome", outcome, "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
	return outcome
}

// reject logs at debug level only: the endpoint is public, and a flood of
// bad requests must not become a flood of log lines. The metrics count them.
func (h *Handler) reject(w http.ResponseWriter, r *http.Request, status int, outcome, reason string) string {
	level.Debug(h.logger).Log("msg", "Webhook request rejected", "outcome", outcome, "reason", reason, "remote", r.RemoteAddr)
	header := w.Header()
	header.Set("Content-Type", "application/json")
	header.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, `{"error":"`+outcome+`"}`+"\n")
	return outcome
}

// readBody reads the whole raw body, failing with *http.MaxBytesError past
// max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, error) {
	if r.Body == nil { // only possible for a hand-built request
		r.Body = http.NoBody
	}
	if r.ContentLength > max {
		// Refused before the first read, so a client that sent
		// "Expect: 100-continue" gets 413 instead of "100 Continue".
		return nil, &http.MaxBytesError{Limit: max}
	}
	body := http.MaxBytesReader(w, r.Body, max)
	size := int64(512)
	if r.ContentLength >= 0 {
		// One spare byte lets the final read see EOF without growing.
		size = min(r.ContentLength, max) + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func isJSONMediaType(contentType string) bool {
	// What the service sends, answered without the parser's allocations.
	if contentType == "application/json" {
		return true
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json"
}
