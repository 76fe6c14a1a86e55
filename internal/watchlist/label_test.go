// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Logs name addresses by their label: under hmac, never by the unkeyed
// hash, which a list of candidates could confirm, even for an address the
// watchlist no longer holds.
func TestLabelUnderHMAC(t *testing.T) {
	key := []byte("0123456789abcdef")
	r := New()
	r.Sync(nil, []breach.Address{{Email: "Alice@Example.com"}}, breach.Keyed{Mode: breach.LabelHMAC, Key: key}, 10)
	if got, want := r.Label("alice@example.com"), breach.HMACLabel(key, "alice@example.com"); got != want {
		t.Errorf("watched: %q, want %q", got, want)
	}
	if got, want := r.Label("gone@example.com"), breach.HMACLabel(key, "gone@example.com"); got != want {
		t.Errorf("not watched: %q, want %q", got, want)
	}
	if entries := r.View().Entries; len(entries) != 1 || entries[0].Label != breach.HMACLabel(key, "alice@example.com") {
		t.Errorf("entries %+v, want one labelled by its HMAC", entries)
	}
}
