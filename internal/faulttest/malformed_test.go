// SPDX-License-Identifier: Apache-2.0

package faulttest

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// replyFor answers every request with the body body(email) returns, email
// being the address asked for (empty for /me).
func replyFor(body func(email string) string) func(*harness) {
	return func(h *harness) {
		h.api.Misbehave(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body(r.URL.Query().Get("email")))
		})
	}
}

// Replies that break the spec but are valid JSON could wipe or zero the
// address's values without counting anything: each is a bad_body failure
// (for /me too: none is a Me), the last good values stay, and the exporter
// recovers when the API does.
func TestRepliesAgainstTheSpecKeepTheLastGoodValues(t *testing.T) {
	replies := []struct {
		name string
		body func(email string) string
	}{
		{"sources null", func(e string) string { return fmt.Sprintf(`{"email":%q,"sources":null}`, e) }},
		{"sources missing", func(e string) string { return fmt.Sprintf(`{"email":%q}`, e) }},
		{"empty object", func(string) string { return `{}` }},
		{"a source with only its name", func(e string) string {
			return fmt.Sprintf(`{"email":%q,"sources":[{"source":"archive"}]}`, e)
		}},
		{"another address's reply", func(string) string { return string(sim.BreachesBody("mallory@example.com", sources(4)...)) }},
		{"breach_count 1.5", func(e string) string {
			return fmt.Sprintf(`{"email":%q,"sources":[{"source":"archive","breach_count":1.5,"source_dbs":[],"fields_exposed":[],`+
				`"has_plaintext_password":false,"last_scanned_at":"2026-01-01T00:00:00.000Z","last_changed_at":"2026-01-01T00:00:00.000Z"}]}`, e)
		}},
	}
	const afterMe = meInterval + 2*step
	for _, r := range replies {
		t.Run(r.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) })
			testFault(t, fault{
				name: r.name, on: replyFor(r.body),
				code: "200", kind: "bad_body", maxRequests: perAddressBound, firstSuccess: afterMe,
			})
		})
	}
}
