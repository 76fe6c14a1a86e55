// SPDX-License-Identifier: Apache-2.0

package addrfile

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics shows every Source's files: one collector, so that several
// Sources (one per account) share the families.
type Metrics struct {
	mu      sync.Mutex
	sources []*Source
}

var (
	descAddresses = prometheus.NewDesc("breach_exporter_address_file_addresses",
		"Valid addresses in the last good content of an address file, those also in an earlier source included.", []string{"file"}, nil)
	descInvalid = prometheus.NewDesc("breach_exporter_address_file_invalid_lines",
		"Lines of the last good content of an address file that hold no valid address, skipped; in a file of addresses_sd_files, also a group, target or label that is not usable.", []string{"file"}, nil)
	descDuplicates = prometheus.NewDesc("breach_exporter_address_file_duplicate_addresses",
		"Addresses of an address file already watched from the config or an earlier file (case-insensitive), not watched twice: the first source and its owner labels stand.", []string{"file"}, nil)
	descSuccess = prometheus.NewDesc("breach_exporter_address_file_last_read_success_timestamp_seconds",
		"When an address file was last read and parsed successfully (Unix seconds); 0 if never since it was first matched.", []string{"file"}, nil)
	descUp = prometheus.NewDesc("breach_exporter_address_file_up",
		"1 when the last read of an address file gave a usable list (or its unchanged last good content), 0 when it failed: its last good content stays. A file is read at start, on a reload and when a file changes, so a broken file stays at 0 until it is fixed.", []string{"file"}, nil)
	descErrors = prometheus.NewDesc("breach_exporter_address_file_read_errors_total",
		"Reads of an address file that failed (unreadable, not UTF-8, not a YAML list, no valid address); its last good content stays.", []string{"file"}, nil)
	descOverLimit = prometheus.NewDesc("breach_exporter_address_files_over_limit",
		"Files the addresses_files globs matched past the limit of 100 a glob, not read.", nil, nil)
)

// NewMetrics registers the address file metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Metrics) add(s *Source) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, s)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descAddresses, descInvalid, descDuplicates, descSuccess, descUp, descErrors, descOverLimit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the files of each Source's
// last read, each from its first read on, read errors at 0 included; and,
// once any Source has globs, the files over the limit. A file that the
// globs of two Sources (two accounts) match is shown once, as the first
// Source reads it: its addresses are the first account's too (the merge
// keeps the first).
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := m.sources
	m.mu.Unlock()
	overLimit, globs := 0, false
	shown := map[string]bool{}
	for _, s := range sources {
		s.mu.Lock()
		globs = globs || s.globs
		for _, path := range s.order {
			if shown[path] {
				continue
			}
			shown[path] = true
			st := s.files[path]
			var success, up float64
			if !st.success.IsZero() {
				success = float64(st.success.UnixMilli()) / 1000
			}
			if !st.failed {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descAddresses, prometheus.GaugeValue, float64(len(st.addresses)), path)
			ch <- prometheus.MustNewConstMetric(descInvalid, prometheus.GaugeValue, float64(st.invalid), path)
			ch <- prometheus.MustNewConstMetric(descDuplicates, prometheus.GaugeValue, float64(st.duplicates), path)
			ch <- prometheus.MustNewConstMetric(descSuccess, prometheus.GaugeValue, success, path)
			ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, up, path)
			ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, st.errors, path)
		}
		overLimit += s.overLimit
		s.mu.Unlock()
	}
	if globs {
		ch <- prometheus.MustNewConstMetric(descOverLimit, prometheus.GaugeValue, float64(overLimit))
	}
}
