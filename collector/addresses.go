package collector

import (
	"cmp"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/registry"
)

// The per-address series are most of a scrape: about 70 per address, so
// 700,000 at 10,000 addresses. Three things keep that cheap (bench/README.md
// has the figures):
//   - each series' label pairs are built once per scrape and shared, instead
//     of MustNewConstMetric's copies per series;
//   - series go out in exposition order (by label values, label names in
//     alphabetical order), so neither a registry nor Gather sorts them;
//   - Gather builds the metric families itself (sink.go).

// pairs interns label pairs for one scrape.
type pairs map[[2]string]*dto.LabelPair

func (p pairs) get(name, value string) *dto.LabelPair {
	k := [2]string{name, value}
	lp, ok := p[k]
	if !ok {
		lp = &dto.LabelPair{Name: &k[0], Value: &k[1]}
		p[k] = lp
	}
	return lp
}

// sorted returns a sorted copy of values, for label values in order.
func sorted(values []string) []string {
	s := slices.Clone(values)
	slices.Sort(s)
	return s
}

var (
	statesInOrder = sorted(breach.States)
	fieldsInOrder = sorted(breach.KnownFields)
	// The pairs breach_alerts_total has from the start, {severity, source}
	// in label order: BreachCriticalAlertReceived and the dashboards take
	// increase() of it, which does not see a series' first value.
	alertsFromStart = func() [][2]string {
		var out [][2]string
		for _, sev := range sorted(breach.KnownSeverities) {
			for _, src := range sorted(breach.KnownSources) {
				out = append(out, [2]string{sev, src})
			}
		}
		return out
	}()
)

// emitAddresses emits every per-address series, addresses sorted by their
// label value; with alerts, the alert series too.
func emitAddresses(s *familySink, p pairs, entries []registry.Entry, alerts bool) {
	slices.SortFunc(entries, func(a, b registry.Entry) int { return cmp.Compare(a.Label, b.Label) })
	for i := range entries {
		e := &entries[i]
		addr := &dto.LabelPair{Name: p.get("address", "").Name, Value: &e.Label}
		emitAddress(s, p, addr, e, alerts)
	}
}

func emitAddress(s *familySink, p pairs, addr *dto.LabelPair, a *registry.Entry, withAlerts bool) {
	sources := distinctSources(a.Sources)
	// One allocation for all of the address's series.
	n := len(statesInOrder) + 1
	for _, src := range sources {
		n += 5 + len(src.SourceDBs) + len(fieldsInOrder) + len(src.FieldsExposed)
	}
	counters := 0
	if withAlerts {
		counters = len(alertsFromStart)
		if a.Alerts != nil {
			counters += len(a.Alerts.Counts) + len(a.Alerts.NewDatabases) + len(a.Alerts.ExposedFields) + len(a.Alerts.NewPlaintext)
			n += len(a.Alerts.LastObserved)
		}
	}
	s.begin(n, counters)
	n += counters
	emit := s.add
	// Label slices are cut from one array too; full slice expressions keep
	// an append by anyone from writing into a neighbour.
	buf := make([]*dto.LabelPair, 0, 3*n)
	labelsOf := func(lp ...*dto.LabelPair) []*dto.LabelPair {
		start := len(buf)
		buf = append(buf, lp...)
		return buf[start:len(buf):len(buf)]
	}

	for _, st := range statesInOrder {
		emit(addressState, boolValue(st == a.State), labelsOf(addr, p.get("state", st)))
	}
	refreshed := 0.0
	if !a.LastRefresh.IsZero() {
		refreshed = unixSeconds(a.LastRefresh)
	}
	emit(addressLastRefresh, refreshed, labelsOf(addr))

	var dbs, fields []labelledValue
	for _, src := range sources {
		labels := labelsOf(addr, p.get("source", src.Source))
		names := distinct(src.SourceDBs)
		emit(sourceBreaches, float64(src.BreachCount), labels)
		emit(sourceDatabases, float64(len(names)), labels)
		emit(sourcePlaintext, boolValue(src.HasPlaintextPassword), labels)
		emit(sourceLastScanned, unixSeconds(src.LastScannedAt), labels)
		emit(sourceLastChanged, unixSeconds(src.LastChangedAt), labels)
		for _, db := range names {
			dbs = append(dbs, labelledValue{db, src.Source, 1})
		}
		// Every known field is always present so that "became exposed" is a
		// 0 -> 1 change rather than a series appearing; unknown ones follow.
		exposed := make(map[string]bool, len(src.FieldsExposed))
		for _, f := range src.FieldsExposed {
			exposed[f] = true
		}
		for _, f := range fieldsInOrder {
			fields = append(fields, labelledValue{f, src.Source, boolValue(exposed[f])})
			delete(exposed, f)
		}
		for _, f := range distinct(src.FieldsExposed) {
			if exposed[f] {
				fields = append(fields, labelledValue{f, src.Source, 1})
			}
		}
	}
	slices.SortFunc(dbs, labelledValue.compare)
	for _, t := range dbs {
		emit(sourceDatabaseInfo, t.value, labelsOf(addr, p.get("database", t.first), p.get("source", t.source)))
	}
	slices.SortFunc(fields, labelledValue.compare)
	for _, t := range fields {
		emit(sourceFieldExposed, t.value, labelsOf(addr, p.get("field", t.first), p.get("source", t.source)))
	}
	if withAlerts {
		emitAlerts(emit, p, addr, a.Alerts, labelsOf)
	}
}

// labelledValue is a series of a family whose labels are address, one more
// label (first) and source, in that order.
type labelledValue struct {
	first, source string
	value         float64
}

func (a labelledValue) compare(b labelledValue) int {
	return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.source, b.source))
}

// emitAlerts emits the address's alert series: breach_alerts_total for the
// known severities and sources always, the rest once an alert created them.
func emitAlerts(emit func(*family, float64, []*dto.LabelPair), p pairs, addr *dto.LabelPair, a *registry.Alerts,
	labelsOf func(...*dto.LabelPair) []*dto.LabelPair) {
	if a == nil {
		a = &registry.Alerts{}
	}
	counts := make([]labelledValue, 0, len(alertsFromStart)+len(a.Counts))
	for _, k := range alertsFromStart {
		counts = append(counts, labelledValue{k[0], k[1], a.Counts[[2]string{k[1], k[0]}]})
	}
	for k, v := range a.Counts {
		if !breach.Known(breach.KnownSeverities, k[1]) || !breach.Known(breach.KnownSources, k[0]) {
			counts = append(counts, labelledValue{k[1], k[0], v})
		}
	}
	slices.SortFunc(counts, labelledValue.compare)
	for _, t := range counts {
		emit(alerts, t.value, labelsOf(addr, p.get("severity", t.first), p.get("source", t.source)))
	}

	fields := make([]labelledValue, 0, len(a.ExposedFields))
	for k, v := range a.ExposedFields {
		fields = append(fields, labelledValue{k[1], k[0], v})
	}
	slices.SortFunc(fields, labelledValue.compare)
	for _, t := range fields {
		emit(alertExposedFields, t.value, labelsOf(addr, p.get("field", t.first), p.get("source", t.source)))
	}
	for _, src := range sortedKeys(a.NewDatabases) {
		emit(alertNewDatabases, a.NewDatabases[src], labelsOf(addr, p.get("source", src)))
	}
	for _, src := range sortedKeys(a.NewPlaintext) {
		emit(alertNewPlaintext, a.NewPlaintext[src], labelsOf(addr, p.get("source", src)))
	}
	for _, src := range sortedKeys(a.LastObserved) {
		emit(alertLastObserved, unixSeconds(a.LastObserved[src]), labelsOf(addr, p.get("source", src)))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// distinctSources drops repeated feeds (the first wins) and sorts by name:
// a repeated feed would be a duplicate series, and one duplicate fails the
// whole scrape.
func distinctSources(sources []breach.SourceState) []breach.SourceState {
	seen := make(map[string]bool, len(sources))
	out := make([]breach.SourceState, 0, len(sources))
	for _, s := range sources {
		if !seen[s.Source] {
			seen[s.Source] = true
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b breach.SourceState) int { return cmp.Compare(a.Source, b.Source) })
	return out
}

func distinct(values []string) []string {
	seen := make(map[string]bool, len(values))
	out := make([]string, 0, len(values))
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
