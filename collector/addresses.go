// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"cmp"
	"slices"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// block is one address's rendered lines: for each per-address family, its
// lines in exposition order, data[ends[i-1]:ends[i]] for family index i.
// A block is never modified once rendered.
type block struct {
	version uint64 // the watchlist entry's Version it renders
	label   string
	data    []byte
	ends    []int
}

// lines returns the block's lines of f.
func (b *block) lines(f *family) []byte {
	start := 0
	if f.index > 0 {
		start = b.ends[f.index-1]
	}
	return b.data[start:b.ends[f.index]]
}

// sorted returns a sorted copy of values, for label values in order.
func sorted(values []string) []string {
	s := slices.Clone(values)
	slices.Sort(s)
	return s
}

var (
	statesInOrder = sorted(breach.States)
	// The pairs breach_alerts_total has from the start, {severity, source}
	// in label order: BreachCredentialsExposed takes increase() of the
	// critical ones, which does not see a series' first value. The other
	// severities come with their first alert.
	alertsFromStart = func() [][2]string {
		var out [][2]string
		for _, src := range sorted(breach.KnownSources) {
			out = append(out, [2]string{breach.Critical, src})
		}
		return out
	}()
)

// labelledValue is a series of a family whose labels are address, one more
// label (first) and source, in that order.
type labelledValue struct {
	first, source string
	value         float64
}

func (a labelledValue) compare(b labelledValue) int {
	return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.source, b.source))
}

// blockWriter appends one address's series to its family's lines, those
// of the families served (on, by family index) only.
type blockWriter struct {
	lines [][]byte // per family index
	addr  label
	on    []bool
}

func (w *blockWriter) add(f *family, v float64, more ...label) {
	if w.on[f.index] {
		w.lines[f.index] = appendAddressSeries(w.lines[f.index], f.name, v, w.addr, more...)
	}
}

// addSorted sorts values into exposition order and adds them to f, whose
// labels are address, first (named firstLabel) and source.
func (w *blockWriter) addSorted(f *family, firstLabel string, values []labelledValue) {
	if !w.on[f.index] {
		return
	}
	slices.SortFunc(values, labelledValue.compare)
	for _, t := range values {
		w.add(f, t.value, label{firstLabel, t.first}, label{"source", t.source})
	}
}

// scratch holds the buffers one render reuses from address to address, so
// that rendering thousands of blocks does not grow thousands of buffers.
type scratch struct {
	lines        [][]byte // per family
	dbs, fields  []labelledValue
	counts, more []labelledValue
	owner        []label
}

func newScratch() *scratch { return &scratch{lines: make([][]byte, len(perAddress))} }

// renderBlock renders the served (on) per-address series of e, with the
// acknowledgements acks; with alerts, the alert series too.
func renderBlock(e *watchlist.Entry, acks *acknowledge.Set, withAlerts bool, on []bool, sc *scratch) *block {
	for i := range sc.lines {
		sc.lines[i] = sc.lines[i][:0]
	}
	w := &blockWriter{lines: sc.lines, addr: label{"address", e.Label}, on: on}

	// The account rides on the one series every address has: a join
	// brings it to the others (* on (address) group_left (account)).
	w.add(addressState, 1, label{"account", e.Address.AccountName()}, label{"state", e.State})
	if w.on[addressInfo.index] {
		info := append(sc.owner[:0], label{"account", e.Address.AccountName()})
		for _, l := range e.Owner {
			info = append(info, label{l.Name, l.Value})
		}
		w.add(addressInfo, 1, info...)
		sc.owner = info
	}
	refreshed := 0.0
	if !e.LastRefresh.IsZero() {
		refreshed = unixSeconds(e.LastRefresh)
	}
	w.add(addressLastRefresh, refreshed)
	// At 0 from the first scrape: the exposure rules take increase().
	w.add(addressNewDatabases, e.News.NewDatabases)
	w.add(addressNewSensitive, e.News.SensitiveFields)

	sources := sourcesByName(e.Sources)
	renderAcknowledged(w, e, acks, sources)
	renderSources(w, sources, sc)
	if withAlerts {
		renderAlerts(w, e.Alerts, sc)
	}

	b := &block{version: e.Version, label: e.Label, ends: make([]int, len(perAddress))}
	n := 0
	for _, l := range w.lines {
		n += len(l)
	}
	b.data = make([]byte, 0, n)
	for i, l := range w.lines {
		b.data = append(b.data, l...)
		b.ends[i] = len(b.data)
	}
	return b
}

// renderAcknowledged renders the acknowledgement in force for each feed of
// e that has one: those the API lists (sources) and those a critical
// webhook named.
func renderAcknowledged(w *blockWriter, e *watchlist.Entry, acks *acknowledge.Set, sources []breach.SourceState) {
	names := make([]string, len(sources))
	for i, src := range sources {
		names[i] = src.Source
	}
	for _, s := range acknowledgeable(e, names) {
		// 0 while the acknowledgement in force does not cover the feed:
		// the series stays, so that a failed scrape, which the rules
		// bridge with last_over_time, cannot bring back a covering value.
		if a, effective, ok, covers := acknowledged(e, acks, s); ok {
			v := 0.0
			if covers {
				v = unixSeconds(effective)
			}
			w.add(sourceAcknowledged, v, label{"source", s}, label{"by", a.By}, label{"comment", a.Comment})
		}
	}
}

// renderSources renders the series of each feed the API lists, sources
// in name order.
func renderSources(w *blockWriter, sources []breach.SourceState, sc *scratch) {
	dbs, fields := sc.dbs[:0], sc.fields[:0]
	for _, src := range sources {
		source := label{"source", src.Source}
		w.add(sourceBreaches, float64(src.BreachCount), source)
		w.add(sourcePlaintext, boolValue(src.HasPlaintextPassword), source)
		w.add(sourceLastScanned, unixSeconds(src.LastScannedAt), source)
		w.add(sourceLastChanged, unixSeconds(src.LastChangedAt), source)
		if w.on[sourceDatabases.index] || w.on[sourceDatabaseInfo.index] {
			// The watchlist keeps each name once.
			names := src.SourceDBs
			w.add(sourceDatabases, float64(len(names)), source)
			// The first MaxDatabasesPerFeed in name order; the watchlist
			// counted the rest as dropped when the answer came.
			if len(names) > watchlist.MaxDatabasesPerFeed {
				names = sorted(names)[:watchlist.MaxDatabasesPerFeed]
			}
			for _, db := range names {
				dbs = append(dbs, labelledValue{db, src.Source, 1})
			}
		}
		// Only the exposed categories: "became exposed" is a series
		// appearing, which only dashboards read.
		for _, f := range src.FieldsExposed { // each once (the watchlist)
			fields = append(fields, labelledValue{f, src.Source, 1})
		}
	}
	sc.dbs, sc.fields = dbs, fields
	w.addSorted(sourceDatabaseInfo, "database", dbs)
	w.addSorted(sourceFieldExposed, "field", fields)
}

// renderAlerts renders an address's alert series: breach_alerts_total for
// critical alerts of the known sources always, the rest once an alert
// created them.
func renderAlerts(w *blockWriter, a *watchlist.Alerts, sc *scratch) {
	counts, fields := sc.counts[:0], sc.more[:0]
	defer func() { sc.counts, sc.more = counts, fields }()
	for _, k := range alertsFromStart {
		v, _ := a.Value(watchlist.AlertsBySeverity, k[1], k[0])
		counts = append(counts, labelledValue{k[0], k[1], v})
	}
	for _, c := range a.Counts() {
		switch c.Family {
		case watchlist.AlertsBySeverity:
			if !slices.Contains(alertsFromStart, [2]string{c.Label, c.Source}) {
				counts = append(counts, labelledValue{c.Label, c.Source, c.Value})
			}
		case watchlist.ExposedFields:
			fields = append(fields, labelledValue{c.Label, c.Source, c.Value})
		}
	}
	w.addSorted(alerts, "severity", counts)
	w.addSorted(alertExposedFields, "field", fields)
	// The counts are sorted by family, then source: in exposition order.
	for _, c := range a.Counts() {
		switch c.Family {
		case watchlist.NewDatabases:
			w.add(alertNewDatabases, c.Value, label{"source", c.Source})
		case watchlist.NewPlaintext:
			w.add(alertNewPlaintext, c.Value, label{"source", c.Source})
		case watchlist.LastObserved:
			w.add(alertLastObserved, c.Value, label{"source", c.Source})
		}
	}
}

// sourcesByName returns the feeds sorted by name, for the exposition. The
// watchlist keeps each feed once: a repeated feed would be a duplicate
// series, and one duplicate fails the whole scrape.
func sourcesByName(sources []breach.SourceState) []breach.SourceState {
	return slices.SortedFunc(slices.Values(sources), func(a, b breach.SourceState) int { return cmp.Compare(a.Source, b.Source) })
}
