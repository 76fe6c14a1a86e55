// SPDX-License-Identifier: Apache-2.0

package addrhttp

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics shows the Sources in force (Show): one collector, so that the
// Sources of every account share the families, and a Source a reload
// removed takes its series with it.
type Metrics struct {
	mu      sync.Mutex
	sources []*Source
}

var (
	descUp = prometheus.NewDesc("breach_exporter_address_http_up",
		"1 when the last fetch of an addresses_http source gave its list (or said it is unchanged), 0 when it failed: its last good list stays.", []string{"url"}, nil)
	descSuccess = prometheus.NewDesc("breach_exporter_address_http_last_success_timestamp_seconds",
		"When an addresses_http source last gave its list or said it is unchanged (Unix seconds); 0 if never.", []string{"url"}, nil)
	descFailures = prometheus.NewDesc("breach_exporter_address_http_failures_total",
		"Fetches of an addresses_http source that failed, by reason: request (no answer, timeout), status (not 200 or 304), too_large (body past the limit), invalid (not a usable list), shrunk (held: lost more than max_shrink of its addresses at once).", []string{"url", "reason"}, nil)
	descAddresses = prometheus.NewDesc("breach_exporter_address_http_addresses",
		"Valid addresses in the last good list of an addresses_http source, those also in an earlier source included.", []string{"url"}, nil)
	descDuplicates = prometheus.NewDesc("breach_exporter_address_http_duplicate_addresses",
		"Addresses of an addresses_http source already watched from the config, a file or an earlier source (case-insensitive), not watched twice: the first source and its owner labels stand.", []string{"url"}, nil)
	descInvalid = prometheus.NewDesc("breach_exporter_address_http_invalid_entries",
		"Groups, targets and labels of the last good list of an addresses_http source that are not usable, skipped.", []string{"url"}, nil)
)

// NewMetrics registers the HTTP sources' metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

// Show makes the metrics show sources, and no other.
func (m *Metrics) Show(sources []*Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = slices.Clone(sources)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descSuccess, descFailures, descAddresses, descDuplicates, descInvalid} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: every source shown, from the
// start, each failure reason at 0 included.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := m.sources
	m.mu.Unlock()
	for _, s := range sources {
		s.mu.Lock()
		var up, success float64
		if s.up {
			up = 1
		}
		if !s.success.IsZero() {
			success = float64(s.success.UnixMilli()) / 1000
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, s.url)
		ch <- prometheus.MustNewConstMetric(descSuccess, prometheus.GaugeValue, success, s.url)
		for _, r := range Reasons {
			ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, s.failures[r], s.url, r)
		}
		ch <- prometheus.MustNewConstMetric(descAddresses, prometheus.GaugeValue, float64(len(s.addresses)), s.url)
		ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.GaugeValue, float64(s.duplicates), s.url)
		ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.GaugeValue, float64(s.invalid), s.url)
		s.mu.Unlock()
	}
}
