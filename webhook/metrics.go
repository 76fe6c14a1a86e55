package webhook

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/api"
)

// Outcomes of breach_webhook_requests_total; every request gets exactly one.
const (
	outcomeAccepted             = "accepted"
	outcomeDuplicate            = "duplicate"
	outcomeStale                = "stale"
	outcomeUnknownEvent         = "unknown_event"
	outcomeInvalidSignature     = "invalid_signature"
	outcomeMalformed            = "malformed"
	outcomeTooLarge             = "too_large"
	outcomeMethodNotAllowed     = "method_not_allowed"
	outcomeUnsupportedMediaType = "unsupported_media_type"
)

var outcomes = []string{
	outcomeAccepted, outcomeDuplicate, outcomeStale, outcomeUnknownEvent,
	outcomeInvalidSignature, outcomeMalformed, outcomeTooLarge,
	outcomeMethodNotAllowed, outcomeUnsupportedMediaType,
}

// knownSeverities are the spec's severity values, pre-initialised per address.
var knownSeverities = []string{"critical", "warning", "info"}

// Label values taken from a signed body are capped so that one value cannot
// be arbitrarily large. The number of distinct values is not capped: the
// sender is authenticated, and values outside the spec's enums are counted
// on purpose (forward compatibility).
const (
	maxAddressLabelBytes = 256 // an email address is at most 254 bytes
	maxValueLabelBytes   = 128
)

type metrics struct {
	requests       map[string]prometheus.Counter // by outcome
	duration       prometheus.Histogram
	alerts         *prometheus.CounterVec
	newDatabases   *prometheus.CounterVec
	exposedFields  *prometheus.CounterVec
	newPlaintext   *prometheus.CounterVec
	lastObservedAt *prometheus.GaugeVec

	// mu serialises alert accounting with the series bookkeeping of Update,
	// and guards what follows.
	mu sync.Mutex
	// label is the current address label function, kept here rather than
	// read from the request's settings so that an alert racing a reload
	// cannot create a series under a label the reload just dropped.
	label func(email string) string
	// series tracks, per raw address, the address label its series carry,
	// so a reload can drop series it no longer owns.
	series map[string]addressSeries
	// newest observed_at per (address label, source), in Unix seconds: the
	// gauge only moves forward.
	newest map[[2]string]float64
}

type addressSeries struct {
	label      string
	configured bool // pre-initialised because the address is configured
	alerted    bool // holds counts from at least one accepted alert
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_webhook_requests_total",
		Help: "Webhook requests received, by outcome; every request has exactly one outcome.",
	}, []string{"outcome"})
	m := &metrics{
		requests: make(map[string]prometheus.Counter, len(outcomes)),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "breach_webhook_request_duration_seconds",
			Help:    "Time to read, verify and answer a webhook request.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_alerts_total",
			Help: "Accepted alert.created webhooks.",
		}, []string{"address", "source", "severity"}),
		newDatabases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_alert_new_databases_total",
			Help: "Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).",
		}, []string{"address", "source"}),
		exposedFields: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_alert_exposed_fields_total",
			Help: "Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.",
		}, []string{"address", "source", "field"}),
		newPlaintext: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_alert_new_plaintext_passwords_total",
			Help: "Accepted alerts whose delta introduced a new plaintext password.",
		}, []string{"address", "source"}),
		lastObservedAt: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breach_alert_last_observed_timestamp_seconds",
			Help: "observed_at of the newest accepted alert, as a Unix time.",
		}, []string{"address", "source"}),
		series: make(map[string]addressSeries),
		newest: make(map[[2]string]float64),
	}
	for _, c := range []prometheus.Collector{
		requests, m.duration, m.alerts, m.newDatabases, m.exposedFields, m.newPlaintext, m.lastObservedAt,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range outcomes {
		m.requests[o] = requests.WithLabelValues(o)
	}
	return m, nil
}

// syncAddresses makes the series match a new address list and label
// function: configured addresses get zeroed series; series of addresses no
// longer configured that never received an alert are dropped, and so are
// series whose label changed (a switch to hash mode must not leave raw
// emails behind; the counts restart under the new label).
func (m *metrics) syncAddresses(addresses []string, label func(string) string) {
	m.mu.Lock()
	defer m.mu.Unlock()

	// candidates maps every raw address that has or may need series to
	// whether it is configured.
	candidates := make(map[string]bool, len(addresses)+len(m.series))
	for _, a := range addresses {
		candidates[a] = true
	}
	oldLabels := make(map[string]bool, len(m.series))
	for raw, s := range m.series {
		oldLabels[s.label] = true
		if !candidates[raw] {
			candidates[raw] = false
		}
	}
	next := make(map[string]addressSeries, len(candidates))
	keep := make(map[string]bool, len(candidates))
	for raw, isConfigured := range candidates {
		s := addressSeries{label: addressLabel(label, raw), configured: isConfigured}
		if old, ok := m.series[raw]; ok && old.alerted && old.label == s.label {
			s.alerted = true
		}
		if s.configured || s.alerted {
			next[raw] = s
			keep[s.label] = true
		}
	}
	for l := range oldLabels {
		if !keep[l] {
			m.deleteAddress(l)
		}
	}
	m.series = next
	m.label = label
	for _, s := range next {
		if s.configured {
			m.initialise(s.label)
		}
	}
}

func (m *metrics) deleteAddress(label string) {
	match := prometheus.Labels{"address": label}
	m.alerts.DeletePartialMatch(match)
	m.newDatabases.DeletePartialMatch(match)
	m.exposedFields.DeletePartialMatch(match)
	m.newPlaintext.DeletePartialMatch(match)
	m.lastObservedAt.DeletePartialMatch(match)
	for key := range m.newest {
		if key[0] == label {
			delete(m.newest, key)
		}
	}
}

// initialise creates the zero series of breach_alerts_total for a
// configured address, so that increase() sees its first alert. The other
// per-address alert series (new databases, exposed fields, plaintext, the
// timestamp gauge) are created with the address's first alert: the feed
// gauges carry that information from the first scrape.
func (m *metrics) initialise(label string) {
	for _, source := range api.KnownSources {
		for _, severity := range knownSeverities {
			m.alerts.WithLabelValues(label, source, severity)
		}
	}
}

// countAlert records an accepted alert.
func (m *metrics) countAlert(a Alert) {
	m.mu.Lock()
	defer m.mu.Unlock()

	address := addressLabel(m.label, a.Address)
	s := m.series[a.Address]
	s.label, s.alerted = address, true
	m.series[a.Address] = s

	source := labelValue(a.Source, maxValueLabelBytes)
	m.alerts.WithLabelValues(address, source, labelValue(a.Severity, maxValueLabelBytes)).Inc()
	m.newDatabases.WithLabelValues(address, source).Add(float64(len(a.Delta.NewSourceDBs)))
	for _, field := range a.Delta.NewlyExposedFields {
		m.exposedFields.WithLabelValues(address, source, labelValue(field, maxValueLabelBytes)).Inc()
	}
	newPlaintext := m.newPlaintext.WithLabelValues(address, source)
	if a.Delta.HasNewPlaintext {
		newPlaintext.Inc()
	}

	observed := float64(a.ObservedAt.UnixMilli()) / 1e3
	key := [2]string{address, source}
	if newest, ok := m.newest[key]; !ok || observed > newest {
		m.newest[key] = observed
		m.lastObservedAt.WithLabelValues(address, source).Set(observed)
	}
}

func addressLabel(label func(string) string, address string) string {
	return labelValue(label(address), maxAddressLabelBytes)
}

// labelValue makes s a safe label value: valid UTF-8 (client_golang panics
// otherwise) and at most max bytes, cut on a rune boundary.
func labelValue(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
