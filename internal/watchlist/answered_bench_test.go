// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"fmt"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// bigAnswers returns two answers of one feed with n distinct database names
// each, the second sharing half of the first's: every Answered between them
// adds n/2 new databases and keeps n/2.
func bigAnswers(n int) (a, b []breach.SourceState) {
	names := make([]string, n+n/2)
	for i := range names {
		names[i] = fmt.Sprintf("leak-%07d", i)
	}
	feed := func(dbs []string) []breach.SourceState {
		return []breach.SourceState{{Source: "combolist", BreachCount: int64(len(dbs)), SourceDBs: dbs, FieldsExposed: []string{"password", "dob"}}}
	}
	return feed(names[:n]), feed(names[n/2:])
}

// BenchmarkAnswered measures one answer of an address whose feed lists n
// database names, diffed against an answer of as many (100,000 names
// took 15 s a scrape when the diff was quadratic).
func BenchmarkAnswered(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 300_000} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			r := New()
			r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
			first, second := bigAnswers(n)
			r.Answered("a@example.com", breach.Verified, first, at)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				answer := first
				if i%2 == 0 {
					answer = second
				}
				r.Answered("a@example.com", breach.Verified, answer, at)
			}
		})
	}
}
