// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultMaxRequests is the default of --web.max-requests, node_exporter's.
const DefaultMaxRequests = 40

// Instrument wraps the /metrics handler h as promhttp wraps its own, so the
// exposition says about itself what every exporter's says:
// promhttp_metric_handler_requests_total by code (200, 500 and 503 from the
// first scrape on) and promhttp_metric_handler_requests_in_flight, both
// registered with reg (again on every call: reg keeps the first).
//
// Past maxRequests scrapes at once (0: no limit), a scrape is answered 503
// at once, as promhttp's HandlerOpts.MaxRequestsInFlight does, and counted
// under code 503: a flood of scrapes cannot pile up renders that each hold
// a copy of the exposition. h is ours rather than promhttp's (see Handler),
// so the limit is here.
func Instrument(reg prometheus.Registerer, h http.Handler, maxRequests int) http.Handler {
	return promhttp.InstrumentMetricHandler(reg, limitRequests(h, maxRequests))
}

// limitRequests serves at most max requests through h at once and answers
// 503 to the others without waiting.
func limitRequests(h http.Handler, max int) http.Handler {
	if max <= 0 {
		return h
	}
	slots := make(chan struct{}, max)
	refusal := fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			h.ServeHTTP(w, r)
		default:
			http.Error(w, refusal, http.StatusServiceUnavailable)
		}
	})
}
