package collector

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// familySink builds the exposition's metric families for one scrape. Label
// pairs are sorted by name, shared and never modified; begin announces how
// many gauges and counters follow, so that they can be allocated together.
type familySink struct {
	byFamily map[*family]*dto.MetricFamily
	metrics  []dto.Metric
	gauges   []dto.Gauge
	counters []dto.Counter
	values   []float64
}

func (s *familySink) begin(gauges, counters int) {
	s.metrics = make([]dto.Metric, 0, gauges+counters)
	s.gauges = make([]dto.Gauge, 0, gauges)
	s.counters = make([]dto.Counter, 0, counters)
	s.values = make([]float64, 0, gauges+counters)
}

func (s *familySink) add(f *family, v float64, labels []*dto.LabelPair) {
	mf, ok := s.byFamily[f]
	if !ok {
		mf = &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: f.typ.Enum()}
		s.byFamily[f] = mf
	}
	s.values = append(s.values, v)
	value := &s.values[len(s.values)-1]
	// dto.Metric holds a lock and must not be copied: built in place.
	if f.typ == dto.MetricType_COUNTER {
		s.counters = append(s.counters, dto.Counter{Value: value})
		s.metrics = append(s.metrics, dto.Metric{Label: labels, Counter: &s.counters[len(s.counters)-1]})
	} else {
		s.gauges = append(s.gauges, dto.Gauge{Value: value})
		s.metrics = append(s.metrics, dto.Metric{Label: labels, Gauge: &s.gauges[len(s.gauges)-1]})
	}
	mf.Metric = append(mf.Metric, &s.metrics[len(s.metrics)-1])
}

// Gather implements prometheus.Gatherer. It builds the metric families
// itself instead of going through a registry, whose per-series consistency
// check and sort cost as much as building the series: the series are unique
// by construction (the API's repeats are dropped) and already in exposition
// order. Serve it beside the registry with Merge.
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	s := &familySink{byFamily: make(map[*family]*dto.MetricFamily)}
	c.emit(s)
	out := make([]*dto.MetricFamily, 0, len(s.byFamily))
	for _, mf := range s.byFamily {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

var _ prometheus.Gatherer = (*Collector)(nil)

// Merge gathers every gatherer and returns their families sorted by name.
// Unlike prometheus.Gatherers it does not check every series again, so the
// gatherers must not share a metric name.
type Merge []prometheus.Gatherer

// Gather implements prometheus.Gatherer.
func (m Merge) Gather() ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	for _, g := range m {
		families, err := g.Gather()
		if err != nil {
			return nil, err
		}
		out = append(out, families...)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}
