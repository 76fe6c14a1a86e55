package collector

import (
	"cmp"
	"slices"

	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/state"
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

// statesInOrder are the address states sorted as label values.
var statesInOrder = func() []string {
	s := slices.Clone(state.States)
	slices.Sort(s)
	return s
}()

// fieldsInOrder are the known fields sorted as label values.
var fieldsInOrder = func() []string {
	f := slices.Clone(api.KnownFields)
	slices.Sort(f)
	return f
}()

type labelled struct {
	label string
	addr  *state.Address
}

// emitAddresses emits every per-address and per-feed series, addresses
// sorted by their label value.
func emitAddresses(s sink, p pairs, addresses []*state.Address, label func(string) string) {
	byLabel := make([]labelled, len(addresses))
	for i, a := range addresses {
		byLabel[i] = labelled{label: label(a.Email), addr: a}
	}
	slices.SortFunc(byLabel, func(a, b labelled) int { return cmp.Compare(a.label, b.label) })

	for _, l := range byLabel {
		addr := &dto.LabelPair{Name: p.get("address", "").Name, Value: &l.label}
		emitAddress(s, p, addr, l.addr)
	}
}

func emitAddress(s sink, p pairs, addr *dto.LabelPair, a *state.Address) {
	sources := distinctSources(a.Sources)
	// One allocation for all of the address's series.
	n := len(statesInOrder) + 1
	for _, src := range sources {
		n += 5 + len(src.SourceDBs) + len(fieldsInOrder) + len(src.FieldsExposed)
	}
	s.begin(n)
	emit := s.gauge
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

	type triple struct {
		middle, source string
		value          float64
	}
	var dbs, fields []triple
	for _, src := range sources {
		labels := labelsOf(addr, p.get("source", src.Source))
		names := distinct(src.SourceDBs)
		emit(sourceBreaches, float64(src.BreachCount), labels)
		emit(sourceDatabases, float64(len(names)), labels)
		emit(sourcePlaintext, boolValue(src.HasPlaintextPassword), labels)
		emit(sourceLastScanned, unixSeconds(src.LastScannedAt), labels)
		emit(sourceLastChanged, unixSeconds(src.LastChangedAt), labels)
		for _, db := range names {
			dbs = append(dbs, triple{db, src.Source, 1})
		}
		// Every known field is always present so that "became exposed" is a
		// 0 -> 1 change rather than a series appearing; unknown ones follow.
		exposed := make(map[string]bool, len(src.FieldsExposed))
		for _, f := range src.FieldsExposed {
			exposed[f] = true
		}
		for _, f := range fieldsInOrder {
			fields = append(fields, triple{f, src.Source, boolValue(exposed[f])})
			delete(exposed, f)
		}
		for _, f := range distinct(src.FieldsExposed) {
			if exposed[f] {
				fields = append(fields, triple{f, src.Source, 1})
			}
		}
	}
	byMiddle := func(a, b triple) int {
		return cmp.Or(cmp.Compare(a.middle, b.middle), cmp.Compare(a.source, b.source))
	}
	slices.SortFunc(dbs, byMiddle)
	for _, t := range dbs {
		emit(sourceDatabaseInfo, t.value, labelsOf(addr, p.get("database", t.middle), p.get("source", t.source)))
	}
	slices.SortFunc(fields, byMiddle)
	for _, t := range fields {
		emit(sourceFieldExposed, t.value, labelsOf(addr, p.get("field", t.middle), p.get("source", t.source)))
	}
}

// distinctSources drops repeated feeds (the first wins) and sorts by name:
// a repeated feed would be a duplicate series, and one duplicate fails the
// whole scrape.
func distinctSources(sources []api.SourceState) []api.SourceState {
	seen := make(map[string]bool, len(sources))
	out := make([]api.SourceState, 0, len(sources))
	for _, s := range sources {
		if !seen[s.Source] {
			seen[s.Source] = true
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b api.SourceState) int { return cmp.Compare(a.Source, b.Source) })
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
