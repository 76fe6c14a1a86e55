// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"fmt"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// BenchmarkRenderBlock is the cost of rendering one fully populated address
// (four feeds, every field, three databases, moved alert counters): what a
// first scrape after a start pays per address.
func BenchmarkRenderBlock(b *testing.B) {
	reg := watchlist.New()
	reg.Sync(nil, []breach.Address{{Email: "user000001@example.com"}}, breach.LabelEmail, 0)
	var sources []breach.SourceState
	for k, s := range breach.KnownSources {
		sources = append(sources, breach.SourceState{Source: s, BreachCount: int64(k + 3),
			SourceDBs:     []string{fmt.Sprintf("%s-corpus-1", s), fmt.Sprintf("%s-corpus-2", s), fmt.Sprintf("%s-corpus-3", s)},
			FieldsExposed: breach.KnownFields, HasPlaintextPassword: true, LastScannedAt: polled, LastChangedAt: changed})
	}
	reg.Answered(breach.Key("user000001@example.com"), breach.Verified, sources, polled)
	reg.RecordAlert(breach.DefaultAccount, "user000001@example.com", watchlist.AlertDelta{Source: "index", Severity: "critical", NewDatabases: 2,
		ExposedFields: []string{"password", "dob"}, NewPlaintext: true, ObservedAt: polled})
	e := reg.View().Entries[0]
	sc := newScratch()
	b.ReportAllocs()
	for b.Loop() {
		renderBlock(&e, nil, true, servedFamilies(&config.MetricsConfig{DetailFamilies: config.DetailFamilies}), sc)
	}
}
