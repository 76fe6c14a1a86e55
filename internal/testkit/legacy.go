// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The names below keep the root package's system tests compiling while
// another branch moves them into internal/systemtest. They are aliases of
// the one stand-in, not a second one. Follow-up (issue 23, point 2): once
// that move is merged, port internal/systemtest to StandIn, sim.Verified,
// sim.Unverified and sim.Sign, and delete this file.

// API is the stand-in under its former name.
type API = StandIn

// NewAPI is NewStandIn under its former name.
func NewAPI(t testing.TB, clock clockwork.Clock) *API { return NewStandIn(t, clock) }

// Verified is sim.Verified under its former name.
func Verified(sources ...breach.SourceState) sim.Answer { return sim.Verified(sources...) }

// Unverified is sim.Unverified under its former name.
func Unverified() sim.Answer { return sim.Unverified() }

// Signature is sim.Sign under its former name.
func Signature(secret, body []byte) string { return sim.Sign(secret, body) }
