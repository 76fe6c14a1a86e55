// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
)

// BudgetResult is how much of the request budget the scheduler used
// against the simulator while every address was waiting to be read.
type BudgetResult struct {
	RequestsPerMinute int     `json:"requests_per_minute"` // the exporter's api.requests_per_minute
	ServerLimit       int     `json:"server_limit"`        // the simulator's limit per minute
	Addresses         int     `json:"addresses"`
	Minutes           float64 `json:"fake_minutes"`
	Sent              int     `json:"sent"`
	// Allowed is min(budget, limit) per minute over the run.
	Allowed     float64 `json:"allowed"`
	Fraction    float64 `json:"fraction"`
	RateLimited int     `json:"rate_limited"`
	WallSeconds float64 `json:"wall_seconds"`
}

// stepClock is a fake clock that tells the driver the deadline of every
// timer created on it, so the driver can jump straight to the instant the
// scheduler waits for instead of stepping through time blindly.
type stepClock struct {
	*clockwork.FakeClock
	deadlines chan time.Time
	done      chan struct{} // closed when the driver stops listening
}

func (c *stepClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.deadlines <- c.Now().Add(d):
	case <-c.done:
	}
	return t
}

// MeasureBudget runs the exporter, with requestsPerMinute as its budget,
// against the simulator (60 per minute, fixed Unix-minute windows) for the
// given fake time. There are twice as many addresses as the run can read,
// so work is pending throughout. The fake clock starts off the minute
// boundary so that the scheduler's pacing and the server's windows do not
// line up by luck.
func MeasureBudget(requestsPerMinute int, run time.Duration) (BudgetResult, error) {
	const serverLimit = 60
	res := BudgetResult{
		RequestsPerMinute: requestsPerMinute,
		ServerLimit:       serverLimit,
		Addresses:         2 * int(float64(requestsPerMinute)*run.Minutes()+1),
		Minutes:           run.Minutes(),
	}
	start := time.Date(2026, 1, 5, 9, 0, 17, 250e6, time.UTC)
	clock := &stepClock{
		FakeClock: clockwork.NewFakeClockAt(start),
		deadlines: make(chan time.Time),
		done:      make(chan struct{}),
	}
	creds := newCredentials()
	emails := benchEmails(res.Addresses)
	api, err := newSimulatorAPI(creds, emails, clock.FakeClock)
	if err != nil {
		return res, err
	}
	defer api.stop()
	r, err := newExporter(exporterSetup{baseURL: api.baseURL, emails: emails, requestsPerMinute: requestsPerMinute, clock: clock}, creds)
	if err != nil {
		return res, err
	}
	defer r.close()

	stop := r.run()
	wallStart := time.Now()
	err = drive(clock, start.Add(run))
	res.WallSeconds = time.Since(wallStart).Seconds()
	close(clock.done)
	stop()
	if err != nil {
		return res, err
	}

	res.Sent = api.requests()
	res.RateLimited = api.sim.Stats().RateLimited
	res.Allowed = float64(min(requestsPerMinute, serverLimit)) * run.Minutes()
	res.Fraction = float64(res.Sent) / res.Allowed
	return res, nil
}

// drive advances the clock to each deadline the scheduler waits for, until
// the next one is at or past end: every request then went out before end.
func drive(clock *stepClock, end time.Time) error {
	// A scheduler that stops asking for timers is stuck; a real-time bound
	// turns that into an error instead of a hang.
	stuck := time.NewTimer(time.Minute)
	defer stuck.Stop()
	for {
		select {
		case deadline := <-clock.deadlines:
			if !deadline.Before(end) {
				return nil
			}
			clock.Advance(deadline.Sub(clock.Now()))
			stuck.Reset(time.Minute)
		case <-stuck.C:
			return errors.New("budget run: the scheduler asked for no timer within a minute of real time")
		}
	}
}

// String summarises the run for logs.
func (r BudgetResult) String() string {
	return fmt.Sprintf("budget %d/min vs limit %d/min over %.0f fake min: sent %d of %.0f allowed (%.3f), %d 429s",
		r.RequestsPerMinute, r.ServerLimit, r.Minutes, r.Sent, r.Allowed, r.Fraction, r.RateLimited)
}
