// SPDX-License-Identifier: Apache-2.0

package faulttest

import (
	"testing"
	"time"
)

// A revoked token must show as breach_api_up 0 (BreachAPITokenRejected
// needs it) whichever request draws the first 401.
func TestRevokedTokenMarksTheAPIDown(t *testing.T) {
	h := newHarness(t).start()
	h.advanceUntil("the first round", time.Minute, func() bool { return h.healthy(3) })
	// /me went out at 4m; the addresses are due at 5m, so a /breaches
	// request draws the first 401.
	h.advance(4*time.Minute + 30*time.Second)
	h.api.SetToken("svc_ak_rotated-token")
	h.advance(10 * time.Minute)
	s := h.scrape()
	if n := requestsTotal(s, "401"); n == 0 {
		t.Fatal("no 401 was counted")
	}
	if up := lookup(s, "breach_api_up", "account", "default"); up != 0 {
		t.Errorf("breach_api_up = %v after 10 minutes of 401s, want 0", up)
	}
}
