// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"cmp"
	"slices"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// fieldSource is one series of breach_addresses_field_exposed, its labels
// in exposition order.
type fieldSource struct{ field, source string }

// addFleet adds the aggregates over every watched address: per state, per
// feed, per feed and field. The spec's values are always there (a
// dashboard sees 0, not nothing); values outside it, which the watchlist
// bounds, when some address has them.
//
// A plaintext password a feed reports is the exposure the acknowledgements
// handle: handled while the acknowledgement in force covers the feed
// (acknowledged), else open.
func (r *rendering) addFleet(entries []watchlist.Entry, acks *acknowledge.Set) {
	states := map[string]float64{}
	breached, plaintext := map[string]float64{}, map[string]float64{}
	open, handled := map[string]float64{}, map[string]float64{}
	fields := map[fieldSource]float64{}
	for _, s := range breach.KnownSources {
		breached[s], plaintext[s], open[s], handled[s] = 0, 0, 0, 0
		for _, f := range breach.KnownFields {
			fields[fieldSource{f, s}] = 0
		}
	}
	for i := range entries {
		e := &entries[i]
		states[e.State]++
		// The watchlist keeps each feed, and each field of a feed, once.
		for _, src := range e.Sources {
			breached[src.Source] += boolValue(src.BreachCount > 0)
			plaintext[src.Source] += boolValue(src.HasPlaintextPassword)
			if src.HasPlaintextPassword {
				if _, _, _, covers := acknowledged(e, acks, src.Source); covers {
					handled[src.Source]++
				} else {
					open[src.Source]++
				}
			}
			for _, f := range src.FieldsExposed {
				fields[fieldSource{f, src.Source}]++
			}
		}
	}
	for _, st := range statesInOrder {
		r.add(fleetStates, states[st], label{"state", st})
	}
	for _, s := range sortedKeys(breached) {
		r.add(fleetBreached, breached[s], label{"source", s})
	}
	for _, s := range sortedKeys(plaintext) {
		r.add(fleetPlaintext, plaintext[s], label{"source", s})
		r.add(fleetPlaintextOpen, open[s], label{"source", s})
		r.add(fleetPlaintextHandled, handled[s], label{"source", s})
	}
	keys := make([]fieldSource, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b fieldSource) int {
		return cmp.Or(cmp.Compare(a.field, b.field), cmp.Compare(a.source, b.source))
	})
	for _, k := range keys {
		r.add(fleetFieldExposed, fields[k], label{"field", k.field}, label{"source", k.source})
	}
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
