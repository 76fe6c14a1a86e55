// SPDX-License-Identifier: Apache-2.0

package api

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API request metrics, by account. One set serves every
// Client of the process, so a reload that builds a new Client keeps
// counting on the same series.
type Metrics struct {
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// accountMetrics are one account's share of Metrics: the vectors with the
// account label set.
type accountMetrics struct {
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration prometheus.ObserverVec
}

// codesFromStart are the status codes whose series exist at 0 from the
// first scrape, because the shipped rules take increase() of them: a series
// born at its first value shows no increase.
var codesFromStart = []string{"200", "401", "429"}

// failureKinds are the kinds breach_api_request_failures_total counts; 403
// and 404 are answers about an address, not failures.
var failureKinds = []Kind{KindTransport, KindBadBody, KindServer, KindRateLimited, KindUnauthorized, KindBadRequest, KindUnexpected}

// NewMetrics registers the request metrics on reg; each account's series
// the rules read are present at 0 from its first Client on.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_api_requests_total",
			Help: "Requests sent to the breach API, by endpoint and HTTP status code (\"error\" when no response arrived).",
		}, []string{"account", "endpoint", "code"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_api_request_failures_total",
			Help: "Failed requests to the breach API, by endpoint and kind: transport, bad_body (a 200 that was not usable), server_error, rate_limited, unauthorized, bad_request, unexpected_status.",
		}, []string{"account", "endpoint", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "breach_api_request_duration_seconds",
			Help:    "Duration of requests to the breach API, by endpoint.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"account", "endpoint"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.failures, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// account returns the named account's series, creating at 0 those the rules
// read.
func (m *Metrics) account(name string) *accountMetrics {
	l := prometheus.Labels{"account": name}
	a := &accountMetrics{
		requests: m.requests.MustCurryWith(l),
		failures: m.failures.MustCurryWith(l),
		duration: m.duration.MustCurryWith(l),
	}
	for _, ep := range []string{EndpointMe, EndpointBreaches} {
		a.duration.WithLabelValues(ep)
		for _, code := range codesFromStart {
			a.requests.WithLabelValues(ep, code)
		}
		for _, k := range failureKinds {
			a.failures.WithLabelValues(ep, k.String())
		}
	}
	return a
}

// Ensure creates at 0 the named account's series the rules read, before
// its first client: from the start, and from the reload that adds it.
func (m *Metrics) Ensure(name string) { m.account(name) }

// Forget removes the named account's series: a reload removed the account,
// and its series must go as an address's do.
func (m *Metrics) Forget(name string) {
	l := prometheus.Labels{"account": name}
	m.requests.DeletePartialMatch(l)
	m.failures.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
}

// failed counts a failed call; 403 and 404 are not failures.
func (m *accountMetrics) failed(endpoint string, e *Error) {
	if e.Kind == KindUnverified || e.Kind == KindNotMonitored {
		return
	}
	m.failures.WithLabelValues(endpoint, e.Kind.String()).Inc()
}
