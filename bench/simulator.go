// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// simulatorAPI is the service simulator on a loopback port.
type simulatorAPI struct {
	sim     *sim.Simulator
	baseURL string // ends in /api/v1
	stop    func()
}

// newSimulatorAPI serves a pro account holding emails, all verified, with
// the spec's 60 requests per minute. A nil clock is the real one.
func newSimulatorAPI(creds credentials, emails []string, clock clockwork.Clock) (*simulatorAPI, error) {
	addrs := make([]sim.Address, len(emails))
	for i, e := range emails {
		addrs[i] = sim.Address{Email: e, Verified: true}
	}
	s, err := sim.New(sim.Options{
		Token:     creds.token,
		Plan:      "pro",
		Addresses: addrs,
		RateLimit: sim.DefaultRateLimit,
		Seed:      1,
		Clock:     clock,
	})
	if err != nil {
		return nil, err
	}
	url, stop, err := serveLoopback(&http.Server{Handler: s.Handler()})
	if err != nil {
		return nil, err
	}
	return &simulatorAPI{sim: s, baseURL: url + sim.APIPrefix, stop: stop}, nil
}

// requests is how many API requests the simulator has answered, 429s
// included.
func (a *simulatorAPI) requests() int {
	total := 0
	for _, n := range a.sim.Stats().Requests {
		total += n
	}
	return total
}
