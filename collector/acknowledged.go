// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// acknowledged is the exporter's one decision on an acknowledgement, which
// breach_source_acknowledged_timestamp_seconds and the fleet's open and
// handled counts both read: the entry in force for the address's feed
// source, whether it covers what the exporter has seen of the feed, and
// from which moment (acknowledge.Entry.Covers, on the watchlist's moments).
func acknowledged(e *watchlist.Entry, acks *acknowledge.Set, source string) (a acknowledge.Entry, effective time.Time, found, covers bool) {
	if a, found = acks.For(e.Address.Key(), source); !found {
		return a, effective, false, false
	}
	m := e.Feeds[source]
	effective, covers = a.Covers(e.Acknowledged[a.Key()], m.ChangeSeen, m.Critical)
	return a, effective, true, covers
}

// acknowledgeable returns the feeds of e an acknowledgement can cover,
// sorted: those the API lists for the address and those a critical webhook
// named, which page before the API lists them.
func acknowledgeable(e *watchlist.Entry, sources []string) []string {
	for source, m := range e.Feeds {
		if !m.Critical.IsZero() && !slices.Contains(sources, source) {
			sources = append(sources, source)
		}
	}
	slices.Sort(sources)
	return sources
}
