// Package webhook receives the breach monitoring service's signed alert
// webhooks (spec section 6) and records each accepted alert in the
// registry, which counts it under its address and has the address re-read
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
	"github.com/breach-exporter/breach_exporter/internal/registry"
)

// Handler is the webhook endpoint. It is safe for concurrent use.
type Handler struct {
	config   *config.Current
	registry *registry.Registry
	clock    clockwork.Clock
	logger   log.Logger
	metrics  *metrics
	dedup    *dedup
}

// Options are the handler's collaborators.
type Options struct {
	// Config gives the secrets and limits in force, read once per request,
	// so a reload applies to the next request without a call here.
	Config *config.Current
	// Registry counts accepted alerts under their address, queues the
	// address for a re-read, and discovers addresses it does not watch.
	Registry *registry.Registry
	Clock    clockwork.Clock
	Logger   log.Logger
}

// NewHandler registers the receiver's own metrics on reg and returns the
// handler. The per-address alert series are the registry's.
func NewHandler(reg prometheus.Registerer, o Options) (*Handler, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Handler{
		config:   o.Config,
		registry: o.Registry,
		clock:    o.Clock,
		logger:   o.Logger,
		metrics:  m,
		dedup:    newDedup(),
	}, nil
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
	snap := h.config.Load()
	s := &snap.Config.Webhook

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

	if !validSignature(r.Header, body, snap.Secrets) {
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
	// An address not watched may become a discovered one: polled, and a
	// label value. A watched one was checked when it came in.
	if !h.registry.Watches(alert.Address) && !breach.ValidEmail(alert.Address) {
		return h.reject(w, r, http.StatusBadRequest, outcomeMalformed,
			fmt.Sprintf("address is not a valid email address of at most %d bytes", breach.MaxAddressBytes))
	}

	now := h.clock.Now()
	maxAge := time.Duration(s.MaxEventAge)
	stale := maxAge > 0 && alert.ObservedAt.Before(now.Add(-maxAge))
	// Only accepted bodies are remembered: a duplicate is a body that was
	// already counted, so a replay of a stale one is stale again.
	if h.dedup.checkAndRemember(sha256.Sum256(body), now, !stale, time.Duration(s.DedupWindow), s.DedupMaxEntries) {
		return h.ignore(w, r, outcomeDuplicate)
	}
	if stale {
		return h.ignore(w, r, outcomeStale)
	}

	// Accepted alerts are not logged: the counters are the record, and with
	// go-kit even a filtered debug line costs its timestamp and caller on the
	// endpoint's busiest path.
	h.record(alert, now)
	w.WriteHeader(http.StatusNoContent)
	return outcomeAccepted
}

// record counts an accepted alert under its address (the registry also
// queues the address for a re-read), or without an address label when the
// address is not watched and may not be discovered.
func (h *Handler) record(a Alert, now time.Time) {
	// The registry bounds the values (length, number of distinct ones).
	d := registry.AlertDelta{
		Source:        a.Source,
		Severity:      a.Severity,
		NewDatabases:  len(a.Delta.NewSourceDBs),
		ExposedFields: a.Delta.NewlyExposedFields,
		NewPlaintext:  a.Delta.HasNewPlaintext,
		ObservedAt:    a.ObservedAt,
	}
	if inFuture(a.ObservedAt, now) {
		d.ObservedAt = time.Time{}
		h.metrics.futureObserved.Inc()
	}
	switch h.registry.RecordAlert(a.Address, d) {
	case registry.AlertDiscovered:
		level.Info(h.logger).Log("msg", "Alert for an address not in the config; polling it from now on (webhook.discover_addresses)",
			"address", h.registry.Label(breach.Key(a.Address)))
	case registry.AlertUntracked:
		h.metrics.untracked[untrackedDiscoveryOff].Inc()
	case registry.AlertRefused:
		h.metrics.untracked[untrackedDiscoveryLimit].Inc()
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
