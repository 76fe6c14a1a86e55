// SPDX-License-Identifier: Apache-2.0

// Package ackweb serves, on the exporter's web listener, the
// acknowledgement page, the list of the acknowledgements in force and
// their JSON API: the fast path for the person holding the pager, beside
// the acknowledgements file.
//
// Reading is open to whoever reaches the listener (it shows what /metrics
// shows). Writing is off until --web.enable-acknowledgements, and then
// every write needs an authenticated user (Auth), a form's CSRF token or
// the API's JSON content type, fits the size and rate limits, and leaves
// an audit line and a count. No page, answer or log line carries a clear
// address outside labels.address: email: the page and the API name an
// address by its label.
package ackweb

import (
	"crypto/rand"
	"net/http"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Paths the handler serves. The pages link to each other relatively, so
// that they work under a proxy's path prefix too.
const (
	ListPath        = "/acknowledgements"
	PagePath        = "/acknowledge"
	APIPath         = "/api/v1/acknowledgements"
	csrfCookie      = "breach_exporter_csrf"
	csrfAction      = "acknowledge"
	csrfField       = "csrf_token"
	jsonContentType = "application/json"
)

// Limits of the writes.
const (
	// MaxBodyBytes bounds a write's body: an address label, a feed, by
	// and comment take well under 1 KiB.
	MaxBodyBytes = 8 << 10
	// MaxListed bounds the acknowledgements one list shows; the rest are
	// counted.
	MaxListed = 1000
	// DefaultWriteRate and DefaultWriteBurst bound the writes of all
	// clients together: a person acknowledges a few a minute, a script a
	// few a second; a flood gets 429 and costs no disk write.
	DefaultWriteRate  = 2.0
	DefaultWriteBurst = 20
)

// Store changes the acknowledgements made on the page (the exporter:
// Exporter.Acknowledge, Exporter.Withdraw). The address is as configured.
type Store interface {
	Acknowledge(email, source, by, comment string) error
	Withdraw(email, source string) (bool, error)
}

// Options configure the Handler.
type Options struct {
	Watchlist *watchlist.List
	Config    *config.Current
	Store     Store
	// Write is --web.enable-acknowledgements.
	Write bool
	// Auth is how writers are authenticated. With WebConfigFile set, its
	// BasicAuth and ClientCerts are read from that file (ReadWebConfig) at
	// every authentication, as exporter-toolkit reads it at every request:
	// a web config that drops its users stops the toolkit's password check
	// at once, and must stop the page trusting the user name at once too.
	Auth          Auth
	WebConfigFile string
	// WriteRate (per second) and WriteBurst bound the writes; 0 takes the
	// defaults.
	WriteRate  float64
	WriteBurst int
	Registerer prometheus.Registerer
	Logger     log.Logger
	// Now is the clock of the pages' times; nil: time.Now.
	Now func() time.Time
}

// Handler serves the pages and the API.
type Handler struct {
	o       Options
	mux     *http.ServeMux
	key     string // the CSRF tokens' key, new at every start
	limiter *rate.Limiter
	changes *prometheus.CounterVec
	refused *prometheus.CounterVec
}

// Reasons a write is refused, the refused counter's label values.
var refusals = []string{"disabled", "unauthenticated", "untrusted_proxy", "csrf", "cross_site", "rate_limit", "too_large", "invalid", "unknown_address", "file_entry", "failed"}

// New returns the handler of o.
func New(o Options) (*Handler, error) {
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.WriteRate <= 0 {
		o.WriteRate = DefaultWriteRate
	}
	if o.WriteBurst <= 0 {
		o.WriteBurst = DefaultWriteBurst
	}
	h := &Handler{o: o, key: rand.Text(), limiter: rate.NewLimiter(rate.Limit(o.WriteRate), o.WriteBurst),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_acknowledgement_changes_total",
			Help: "Acknowledgements made (action=acknowledge) or withdrawn (action=withdraw) on the acknowledgement page or its API; each has an audit log line.",
		}, []string{"action"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_acknowledgement_writes_refused_total",
			Help: "Writes to the acknowledgement page or its API refused, by reason.",
		}, []string{"reason"}),
	}
	// At 0 from the first scrape.
	for _, a := range []string{"acknowledge", "withdraw"} {
		h.changes.WithLabelValues(a)
	}
	for _, r := range refusals {
		h.refused.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{h.changes, h.refused} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET "+ListPath, h.list)
	h.mux.HandleFunc("GET "+PagePath, h.page)
	h.mux.HandleFunc("POST "+PagePath, h.submit)
	h.mux.HandleFunc("GET "+APIPath, h.apiList)
	h.mux.HandleFunc("POST "+APIPath, h.apiAcknowledge)
	h.mux.HandleFunc("DELETE "+APIPath, h.apiWithdraw)
	return h, nil
}

// Paths are the paths to route to the handler.
func Paths() []string { return []string{ListPath, PagePath, APIPath} }

// ServeHTTP sets the headers every answer has, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	}
	h.mux.ServeHTTP(w, r)
}
