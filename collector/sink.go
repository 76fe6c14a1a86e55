package collector

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A sink receives the series of one scrape. Label pairs are sorted by name,
// shared and never modified; begin announces how many series follow, so
// that they can be allocated together.
type sink interface {
	begin(n int)
	gauge(f *family, v float64, labels []*dto.LabelPair)
}

// metricSink feeds a registry through Collect.
type metricSink struct {
	ch     chan<- prometheus.Metric
	gauges []gauge
}

// gauge is a prometheus.Metric over shared label pairs: building them once
// per scrape instead of once per series (MustNewConstMetric) is most of what
// makes a large scrape cheap.
type gauge struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	out    dto.Gauge
}

func (g *gauge) Desc() *prometheus.Desc { return g.desc }

func (g *gauge) Write(m *dto.Metric) error {
	g.out.Value = &g.value
	m.Label = g.labels
	m.Gauge = &g.out
	return nil
}

func (s *metricSink) begin(n int) { s.gauges = make([]gauge, 0, n) }

func (s *metricSink) gauge(f *family, v float64, labels []*dto.LabelPair) {
	s.gauges = append(s.gauges, gauge{desc: f.desc, labels: labels, value: v})
	s.ch <- &s.gauges[len(s.gauges)-1]
}

// familySink builds the exposition's metric families directly, for Gather.
type familySink struct {
	byFamily map[*family]*dto.MetricFamily
	metrics  []dto.Metric
	gauges   []dto.Gauge
	values   []float64
}

func (s *familySink) begin(n int) {
	s.metrics = make([]dto.Metric, 0, n)
	s.gauges = make([]dto.Gauge, 0, n)
	s.values = make([]float64, 0, n)
}

func (s *familySink) gauge(f *family, v float64, labels []*dto.LabelPair) {
	mf, ok := s.byFamily[f]
	if !ok {
		mf = &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: dto.MetricType_GAUGE.Enum()}
		s.byFamily[f] = mf
	}
	s.values = append(s.values, v)
	s.gauges = append(s.gauges, dto.Gauge{Value: &s.values[len(s.values)-1]})
	s.metrics = append(s.metrics, dto.Metric{Label: labels, Gauge: &s.gauges[len(s.gauges)-1]})
	mf.Metric = append(mf.Metric, &s.metrics[len(s.metrics)-1])
}

// Gather implements prometheus.Gatherer: the same series as Collect, built
// straight into metric families. It skips the registry's per-series
// consistency check and sort, which cost as much as building the series:
// the series are unique by construction (the API's repeats are dropped) and
// already in exposition order. Serve it beside the registry with Merge, and
// do not also register the collector there.
func (c *Collector) Gather() ([]*dto.MetricFamily, error) {
	s := &familySink{byFamily: make(map[*family]*dto.MetricFamily, len(families))}
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
