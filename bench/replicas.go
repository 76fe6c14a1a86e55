// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Polling with several replicas: built exporter binaries sharing one
// redis-server and one API key against the simulator, which enforces the
// service's fixed 60-second window per token, in real time (the binaries
// run on the real clock, so the windows are real minutes). One replica
// alone, without a store, runs beside them in the same minutes against a
// simulator of its own: the budget one exporter uses today.

// goalReplicasBudget is the share of the key's budget the replicas use
// together while there is work, as one replica does.
const goalReplicasBudget = 0.95

// ReplicasOptions size MeasureReplicas.
type ReplicasOptions struct {
	Exporter          string // the built breach_exporter binary (BuildExporter)
	Replicas          int
	Addresses         int // enough that every replica always has work
	RequestsPerMinute int // api.requests_per_minute, the simulator's limit too
	// Windows is how many whole windows of the service are measured.
	// With 0, the run lasts Run and the figures are taken over all of it,
	// partial windows included (a smoke run: -quick).
	Windows int
	Run     time.Duration
}

// PollingRun is what the simulator saw of one group of exporters.
type PollingRun struct {
	Replicas int `json:"replicas"`
	// Windows are every window with a request, oldest first; Measured
	// those that lay wholly inside the run.
	Windows  []WindowCount `json:"windows"`
	Measured int           `json:"measured_windows"`
	// PerWindow is the mean of the measured windows' requests (without
	// measured windows: requests per minute over the run); Used is
	// PerWindow over the budget.
	PerWindow    float64 `json:"requests_per_window"`
	Used         float64 `json:"budget_used"`
	MaxPerWindow int     `json:"max_requests_per_window"`
	RateLimited  int     `json:"rate_limited"`
	// PerReplica is each replica's breach_api_requests_total at the end:
	// the work is shared, not done by one.
	PerReplica []int `json:"requests_per_replica"`
	// Reads are /breaches requests; Repeated those of an address already
	// read in the run (none is due again within it: the round of
	// Addresses at the budget is longer than the run).
	Reads    int `json:"reads"`
	Repeated int `json:"repeated_reads"`
}

// WindowCount is one fixed window of the simulator.
type WindowCount struct {
	Start       time.Time `json:"start"`
	Requests    int       `json:"requests"`
	RateLimited int       `json:"rate_limited"`
}

// ReplicasResult is the replicas and the one exporter alone, measured in
// the same minutes.
type ReplicasResult struct {
	Addresses         int        `json:"addresses"`
	RequestsPerMinute int        `json:"requests_per_minute"`
	Seconds           float64    `json:"seconds"`
	Shared            PollingRun `json:"shared"`
	Alone             PollingRun `json:"alone"`
}

// pollingGroup is the exporters that share one simulator.
type pollingGroup struct {
	api   *simulatorAPI
	token string
	dir   string // config, token, secret and every replica's state folder
	procs []*exporterProcess
}

// MeasureReplicas runs o.Replicas binaries sharing a store and one binary
// alone, each group against its own simulator, all on a refresh.interval
// of 1m so that every address is always due.
func MeasureReplicas(o ReplicasOptions) (ReplicasResult, error) {
	res := ReplicasResult{Addresses: o.Addresses, RequestsPerMinute: o.RequestsPerMinute}
	if o.Replicas < 2 || o.Addresses < 1 || o.RequestsPerMinute < 2 || (o.Windows < 1 && o.Run <= 0) {
		return res, errors.New("replicas: at least 2 replicas, 1 address, 2 requests a minute, and windows or a run time")
	}
	redis, err := startRedis()
	if err != nil {
		return res, err
	}
	defer redis.stop()

	start := func(replicas int, storeURL string) (*pollingGroup, error) {
		creds := newCredentials()
		emails := benchEmails(o.Addresses)
		api, err := newSimulatorAPI(creds, emails, nil)
		if err != nil {
			return nil, err
		}
		g := &pollingGroup{api: api, token: creds.token}
		dir, err := os.MkdirTemp("", "breach-bench-replicas-")
		if err != nil {
			return g, err
		}
		g.dir = dir
		setup := exporterSetup{baseURL: api.baseURL, emails: emails, requestsPerMinute: o.RequestsPerMinute,
			refreshInterval: "1m", storeURL: storeURL, storePrefix: "bench-" + randomHex(4)}
		if err := writeExporterFiles(dir, setup, creds); err != nil {
			return g, err
		}
		for i := range replicas {
			// Each replica has its own state folder, as deployed.
			p, err := startExporterProcess(o.Exporter, dir, filepath.Join(dir, fmt.Sprintf("data-%d", i)))
			if err != nil {
				return g, err
			}
			g.procs = append(g.procs, p)
		}
		return g, nil
	}
	stopAll := func(g *pollingGroup) {
		if g == nil {
			return
		}
		for _, p := range g.procs {
			p.kill()
		}
		if g.dir != "" {
			os.RemoveAll(g.dir)
		}
		g.api.stop()
	}
	shared, err := start(o.Replicas, redis.url())
	defer stopAll(shared)
	if err != nil {
		return res, err
	}
	alone, err := start(1, "")
	defer stopAll(alone)
	if err != nil {
		return res, err
	}
	client := newScrapeClient()
	defer client.CloseIdleConnections()
	for _, g := range []*pollingGroup{shared, alone} {
		for _, p := range g.procs {
			if err := waitServing(client, "http://"+p.web+"/-/healthy", p.exited); err != nil {
				return res, fmt.Errorf("%w\nexporter log:\n%s", err, p.logs.Bytes())
			}
		}
	}

	// The measured windows are the whole minutes after every process
	// serves; the run ends with the last of them.
	began := time.Now()
	from := began.Truncate(time.Minute).Add(time.Minute)
	until := from.Add(time.Duration(o.Windows) * time.Minute)
	if o.Windows < 1 {
		from, until = began, began.Add(o.Run)
	}
	for time.Now().Before(until) {
		// Waiting for the clock is the measurement here, not a way to
		// let something happen: the windows are real minutes.
		select {
		case <-time.After(time.Until(until)):
		case <-shared.procs[0].exited:
			return res, fmt.Errorf("a replica exited\n%s", shared.procs[0].logs.Bytes())
		}
	}
	for _, g := range []*pollingGroup{shared, alone} {
		for i, p := range g.procs {
			select {
			case <-p.exited:
				return res, fmt.Errorf("exporter %d exited during the run\n%s", i, p.logs.Bytes())
			default:
			}
		}
	}
	res.Seconds = time.Since(began).Seconds()
	if res.Shared, err = pollingCounts(client, shared, o, from, until); err != nil {
		return res, err
	}
	if res.Alone, err = pollingCounts(client, alone, o, from, until); err != nil {
		return res, err
	}
	return res, nil
}

// pollingCounts reads the group's simulator and exporters after the run.
func pollingCounts(client *http.Client, g *pollingGroup, o ReplicasOptions, from, until time.Time) (PollingRun, error) {
	run := PollingRun{Replicas: len(g.procs)}
	for _, p := range g.procs {
		s, err := scrapeOnce(client, "http://"+p.web+"/metrics", false)
		if err != nil {
			return run, err
		}
		run.PerReplica = append(run.PerReplica, int(sumSamples(s.body, "breach_api_requests_total", "")))
	}
	windows, dropped := g.api.sim.Windows(g.token)
	if dropped > 0 {
		return run, fmt.Errorf("the simulator dropped %d windows", dropped)
	}
	total := 0
	for _, w := range windows {
		run.Windows = append(run.Windows, WindowCount{Start: w.Start, Requests: w.Requests, RateLimited: w.RateLimited})
		run.RateLimited += w.RateLimited
		run.MaxPerWindow = max(run.MaxPerWindow, w.Requests)
		if !w.Start.Before(from) && !w.Start.Add(time.Minute).After(until) {
			run.Measured++
			total += w.Requests
		}
	}
	if o.Windows > 0 {
		if run.Measured != o.Windows {
			return run, fmt.Errorf("%d whole windows of the service in the run, want %d", run.Measured, o.Windows)
		}
		run.PerWindow = float64(total) / float64(run.Measured)
	} else {
		all := 0
		for _, w := range windows {
			all += w.Requests
		}
		run.PerWindow = float64(all) / until.Sub(from).Minutes()
	}
	run.Used = run.PerWindow / float64(o.RequestsPerMinute)
	for _, e := range benchEmails(o.Addresses) {
		n := g.api.sim.Reads(e)
		run.Reads += n
		run.Repeated += max(n-1, 0)
	}
	return run, nil
}
