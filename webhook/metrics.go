// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	outcomeUnavailable          = "unavailable" // 503: could not be made durable
)

var outcomes = []string{
	outcomeAccepted, outcomeDuplicate, outcomeStale, outcomeUnknownEvent,
	outcomeInvalidSignature, outcomeMalformed, outcomeTooLarge,
	outcomeMethodNotAllowed, outcomeUnsupportedMediaType, outcomeUnavailable, outcomeNotFound,
}

// Reasons of breach_webhook_alerts_untracked_total: why an accepted alert
// was not counted under an address label.
const (
	untrackedDiscoveryOff   = "discovery_off"
	untrackedDiscoveryLimit = "discovery_limit"
	// An account's secret verified an alert for another account's
	// address: never counted for that address.
	untrackedOtherAccount = "other_account"
	// The account whose secret verified the alert is no longer configured
	// (a reload removed it; the journal replays its alert, or a replica
	// that still has it forwarded it). Unlike the others, this count is
	// not kept in the state snapshot: a release before it could not read
	// the snapshot back. It starts at 0 after a restart.
	untrackedRemovedAccount = "removed_account"
)

// metrics are the receiver's own series, none per address: those are the
// watchlist's, so they follow the address wherever it goes.
type metrics struct {
	requests       map[string]prometheus.Counter // by outcome
	duration       prometheus.Histogram
	untracked      map[string]prometheus.Counter // by reason
	futureObserved prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_webhook_requests_total",
		Help: "Webhook requests received, by outcome; every request has exactly one outcome.",
	}, []string{"outcome"})
	untracked := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_webhook_alerts_untracked_total",
		Help: "Accepted alerts not counted under an address label, by reason: the address is not watched and was not discovered (discovery_off, discovery_limit), or it is another account's than the one whose secret verified the alert (other_account), or that account is no longer configured (removed_account).",
	}, []string{"reason"})
	m := &metrics{
		requests: make(map[string]prometheus.Counter, len(outcomes)),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "breach_webhook_request_duration_seconds",
			Help:    "Time to read, verify and answer a webhook request.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		untracked:      map[string]prometheus.Counter{},
		futureObserved: newFutureObservedCounter(),
	}
	for _, c := range []prometheus.Collector{requests, m.duration, untracked, m.futureObserved} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, o := range outcomes {
		m.requests[o] = requests.WithLabelValues(o)
	}
	for _, r := range []string{untrackedDiscoveryOff, untrackedDiscoveryLimit, untrackedOtherAccount, untrackedRemovedAccount} {
		m.untracked[r] = untracked.WithLabelValues(r)
	}
	return m, nil
}

// Counts returns the counters kept across a restart. Called where no
// alert is being applied (the journal's writer), it is consistent with
// Remembered and the watchlist's alert counts.
func (h *Handler) Counts() breach.WebhookCounts {
	return breach.WebhookCounts{
		Accepted:                counterValue(h.metrics.requests[outcomeAccepted]),
		UntrackedDiscoveryOff:   counterValue(h.metrics.untracked[untrackedDiscoveryOff]),
		UntrackedDiscoveryLimit: counterValue(h.metrics.untracked[untrackedDiscoveryLimit]),
		UntrackedOtherAccount:   counterValue(h.metrics.untracked[untrackedOtherAccount]),
	}
}

// RestoreCounts adds counts from before a restart. Call it before serving.
func (h *Handler) RestoreCounts(c breach.WebhookCounts) {
	h.metrics.requests[outcomeAccepted].Add(c.Accepted)
	h.metrics.untracked[untrackedDiscoveryOff].Add(c.UntrackedDiscoveryOff)
	h.metrics.untracked[untrackedDiscoveryLimit].Add(c.UntrackedDiscoveryLimit)
	h.metrics.untracked[untrackedOtherAccount].Add(c.UntrackedOtherAccount)
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
