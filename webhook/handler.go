// Package webhook receives the breach monitoring service's signed alert
// webhooks (spec section 6), turns accepted alerts into counters and hands
// each one to a callback (the exporter re-reads the address at once).
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
	"io"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
)

// Handler is the webhook endpoint. It is safe for concurrent use.
type Handler struct {
	clock   clockwork.Clock
	logger  log.Logger
	onAlert func(Alert)
	metrics *metrics
	dedup   *dedup

	settings atomic.Pointer[Settings] // read once per request
	updateMu sync.Mutex               // serialises Update
}

// NewHandler registers the webhook metrics on reg and returns the handler.
// onAlert (may be nil) is called for every accepted alert, after it has
// been counted and before the 204 is sent, on the request's goroutine: it
// must return quickly. It fails when s has no usable secret, so the
// listener cannot start unauthenticated.
func NewHandler(reg prometheus.Registerer, clock clockwork.Clock, logger log.Logger, onAlert func(a Alert), s Settings) (*Handler, error) {
	if reg == nil || clock == nil || logger == nil {
		return nil, errors.New("webhook: registerer, clock and logger are required")
	}
	n, err := s.normalise()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		clock:   clock,
		logger:  logger,
		onAlert: onAlert,
		metrics: m,
		dedup:   newDedup(n.DedupWindow, n.DedupMaxEntries),
	}
	h.settings.Store(&n)
	m.syncAddresses(n.Addresses, n.Label)
	return h, nil
}

// Update applies new settings (secrets, limits, label mode, addresses)
// without a restart. The dedup memory is kept, trimmed to the new limits.
// On error nothing changes.
func (h *Handler) Update(s Settings) error {
	n, err := s.normalise()
	if err != nil {
		return err
	}
	h.updateMu.Lock()
	defer h.updateMu.Unlock()
	h.settings.Store(&n)
	h.dedup.resize(n.DedupWindow, n.DedupMaxEntries, h.clock.Now())
	h.metrics.syncAddresses(n.Addresses, n.Label)
	return nil
}

// ServeHTTP answers, checking in this order: 405 (not POST), 413 (body over
// the cap), 401 (signature missing, malformed or wrong), 415 (not
// application/json), 400 (signed but not a valid event), then 204 for an
// unknown event, a duplicate, a stale alert or an accepted one.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	outcome := h.serve(w, r)
	h.metrics.requests[outcome].Inc()
	h.metrics.duration.Observe(h.clock.Since(start).Seconds())
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) string {
	s := h.settings.Load()

	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return h.reject(w, r, http.StatusMethodNotAllowed, outcomeMethodNotAllowed, "method "+r.Method)
	}

	body, err := readBody(w, r, s.MaxBodyBytes)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return h.reject(w, r, http.StatusRequestEntityTooLarge, outcomeTooLarge, "body over the size cap")
		}
		// Client gone, read timeout or broken chunking: nothing to verify.
		return h.reject(w, r, http.StatusBadRequest, outcomeMalformed, "body unreadable")
	}

	if !validSignature(r.Header, body, s.Secrets) {
		return h.reject(w, r, http.StatusUnauthorized, outcomeInvalidSignature, "signature missing, malformed or wrong")
	}

	// Verified from here on: the body may be looked at.
	if !isJSONMediaType(r.Header.Get("Content-Type")) {
		return h.reject(w, r, http.StatusUnsupportedMediaType, outcomeUnsupportedMediaType, "content type is not application/json")
	}
	event, alert, err := parseBody(body)
	if err != nil {
		return h.reject(w, r, http.StatusBadRequest, outcomeMalformed, err.Error())
	}
	if event != EventAlertCreated {
		return h.ignore(w, r, outcomeUnknownEvent)
	}

	now := h.clock.Now()
	stale := s.MaxEventAge > 0 && alert.ObservedAt.Before(now.Add(-s.MaxEventAge))
	// Only accepted bodies are remembered: a duplicate is a body that was
	// already counted, so a replay of a stale one is stale again.
	if h.dedup.checkAndRemember(sha256.Sum256(body), now, !stale) {
		return h.ignore(w, r, outcomeDuplicate)
	}
	if stale {
		return h.ignore(w, r, outcomeStale)
	}

	// Accepted alerts are not logged: the counters are the record, and with
	// go-kit even a filtered debug line costs its timestamp and caller on the
	// endpoint's busiest path.
	h.metrics.countAlert(alert, now)
	if h.onAlert != nil {
		h.onAlert(alert)
	}
	w.WriteHeader(http.StatusNoContent)
	return outcomeAccepted
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
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json"
}
