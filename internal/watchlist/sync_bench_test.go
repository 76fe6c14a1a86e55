// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"fmt"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// BenchmarkSync100k is an address files' change at 100,000 addresses: a
// tenth of them replaced by others, then back, under each kind of label.
func BenchmarkSync100k(b *testing.B) {
	before := make([]breach.Address, 100_000)
	after := make([]breach.Address, len(before))
	for i := range before {
		before[i] = breach.Address{Email: fmt.Sprintf("user%06d@example.com", i)}
		after[i] = before[i]
		if i%10 == 0 {
			after[i] = breach.Address{Email: fmt.Sprintf("replaced%06d@example.com", i)}
		}
	}
	for name, mode := range map[string]breach.Labeler{
		"email": breach.LabelEmail,
		"hmac":  breach.Keyed{Mode: breach.LabelHMAC, Key: []byte("0123456789abcdef")},
	} {
		b.Run(name, func(b *testing.B) {
			r := New()
			r.Sync(nil, before, mode, 1000)
			for i := 0; b.Loop(); i++ {
				lists := [][]breach.Address{after, before}
				r.Sync(nil, lists[i%2], mode, 1000)
			}
			if r.Len() != len(before) {
				b.Fatalf("%d watched, want %d", r.Len(), len(before))
			}
		})
	}
}
