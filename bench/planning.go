// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/scheduler"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// PlanningOptions size the planning measurement: what one request costs
// the scheduler at a small and at a large number of addresses.
type PlanningOptions struct {
	Small, Large int // addresses; none: not measured
	Requests     int // timed requests per run, after a warm-up
	Runs         int // runs per size, alternating; the fastest is kept
}

// PlanningResult is the scheduler's own cost per request at one number of
// addresses: deciding which request goes next and when, and recording the
// answer in the watchlist, with an API that answers at once on a fake
// clock, so that nothing but the scheduler's work is timed.
type PlanningResult struct {
	Addresses         int     `json:"addresses"`
	Requests          int     `json:"requests"`
	SecondsPerRequest float64 `json:"seconds_per_request"`
}

// goalPlanningRatio: a request costs at most twice as much at the large
// size as at the small one (planning does not walk every address).
const goalPlanningRatio = 2.0

// planningWarmUp requests go out before the timing starts: the first plan
// reads every address into the scheduler's index.
const planningWarmUp = 50

func measurePlanning(r *Report, o PlanningOptions, progress io.Writer) error {
	if o.Small == 0 || o.Large == 0 {
		return nil
	}
	best := map[int]PlanningResult{}
	for run := range max(o.Runs, 1) {
		for _, n := range []int{o.Small, o.Large} {
			fmt.Fprintf(progress, "planning: %d addresses, %d requests, run %d\n", n, o.Requests, run+1)
			res, err := MeasurePlanning(n, o.Requests)
			if err != nil {
				return fmt.Errorf("planning at %d addresses: %w", n, err)
			}
			if b, ok := best[n]; !ok || res.SecondsPerRequest < b.SecondsPerRequest {
				best[n] = res
			}
		}
	}
	r.Planning = []PlanningResult{best[o.Small], best[o.Large]}
	return nil
}

// MeasurePlanning runs the scheduler alone over addresses never read, all
// due, at 60 requests a minute of fake time, and times requests after the
// warm-up.
func MeasurePlanning(addresses, requests int) (PlanningResult, error) {
	res := PlanningResult{Addresses: addresses, Requests: requests}
	cfg := &config.Config{
		API:     config.APIConfig{RequestsPerMinute: 60},
		Refresh: config.RefreshConfig{Interval: model.Duration(24 * time.Hour), MeInterval: model.Duration(24 * time.Hour)},
		Labels:  config.LabelsConfig{Address: breach.LabelEmail},
	}
	for _, e := range benchEmails(addresses) {
		cfg.Addresses = append(cfg.Addresses, config.Address{Email: e})
	}
	token := func() (string, error) { return "svc_ak_bench", nil }
	cur := config.NewCurrent(&config.Bundle{Config: cfg, Accounts: []*config.AccountBundle{{
		Name: breach.DefaultAccount, Config: cfg.AccountsInForce()[0], Token: config.NewTokenSource("svc_ak_bench", token),
	}}})
	w := watchlist.New()
	w.Sync(nil, cfg.Watched(), breach.LabelEmail, 0)

	clock := &stepClock{
		FakeClock: clockwork.NewFakeClockAt(time.Date(2026, 1, 5, 9, 0, 17, 250e6, time.UTC)),
		deadlines: make(chan time.Time),
		done:      make(chan struct{}),
	}
	client := &instantAPI{times: make([]time.Time, 0, planningWarmUp+requests+1), want: planningWarmUp + requests + 1, full: make(chan struct{})}
	s := scheduler.New(scheduler.Options{
		Watchlist: w,
		Config:    cur,
		Account:   breach.DefaultAccount,
		Connect:   func(*config.Bundle, *config.AccountBundle) scheduler.Client { return client },
		Clock:     clock,
		Logger:    log.NewNopLogger(),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	err := driveUntil(clock, client.full)
	close(clock.done)
	cancel()
	<-done
	if err != nil {
		return res, err
	}
	t := client.times
	res.SecondsPerRequest = t[len(t)-1].Sub(t[planningWarmUp]).Seconds() / float64(requests)
	return res, nil
}

// driveUntil advances the clock to each deadline the scheduler waits for,
// until full is closed.
func driveUntil(clock *stepClock, full <-chan struct{}) error {
	stuck := time.NewTimer(time.Minute)
	defer stuck.Stop()
	for {
		select {
		case <-full:
			return nil
		case deadline := <-clock.deadlines:
			clock.Advance(deadline.Sub(clock.Now()))
			stuck.Reset(time.Minute)
		case <-stuck.C:
			return errors.New("planning run: the scheduler asked for no timer within a minute of real time")
		}
	}
}

// instantAPI answers every request at once, and notes the real time of
// each until it has want of them.
type instantAPI struct {
	mu    sync.Mutex
	times []time.Time
	want  int
	full  chan struct{}
}

func (a *instantAPI) note() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.times) == planningWarmUp {
		// The garbage of the set-up (the watchlist and the index built
		// for every address) is collected before the timing starts, or
		// its collection would be billed to the first requests timed.
		runtime.GC()
	}
	if len(a.times) < a.want {
		a.times = append(a.times, time.Now())
		if len(a.times) == a.want {
			close(a.full)
		}
	}
}

func (a *instantAPI) Me(context.Context) (api.Me, breach.RateLimit, error) {
	a.note()
	return api.Me{Plan: "pro"}, breach.RateLimit{}, nil
}

func (a *instantAPI) Breaches(context.Context, string) (api.Breaches, breach.RateLimit, error) {
	a.note()
	return api.Breaches{}, breach.RateLimit{}, nil
}

// planningFigures states the cost per request at the large size against
// the small one.
func planningFigures(ps []PlanningResult) []Figure {
	if len(ps) != 2 {
		return nil
	}
	small, large := ps[0], ps[1]
	name := fmt.Sprintf("scheduler cost per request, %d addresses", large.Addresses)
	return []Figure{
		newFigure(name, "us/request", large.SecondsPerRequest*1e6, small.SecondsPerRequest*1e6, fmt.Sprintf("%d addresses", small.Addresses)).
			withGoal(fmt.Sprintf("ratio <= %.0f", goalPlanningRatio), large.SecondsPerRequest <= goalPlanningRatio*small.SecondsPerRequest),
	}
}
