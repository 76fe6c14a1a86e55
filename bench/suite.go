// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// SuiteOptions size a full run.
type SuiteOptions struct {
	// Exe is a binary that serves ScrapeChildCommand (cmd/breach_bench):
	// each scrape measurement runs alone in it, on one core.
	Exe string
	// ScrapeSizes maps an address count to the number of timed scrapes.
	ScrapeSizes []ScrapeSize
	// ScrapeRuns is how many processes measure each way at each size,
	// alternating ours and the baseline; the faster run of each is kept,
	// since other load on the machine only ever adds time.
	ScrapeRuns int
	// DeployedSizes are the address counts at which the built exporter
	// binary is measured as deployed (MeasureDeployed), with how many
	// scrapes of each process.
	DeployedSizes []ScrapeSize
	// UserCost is what a real Prometheus pays, default against every
	// detail family; no Addresses: not measured.
	UserCost UserCostOptions
	Webhook  WebhookOptions
	// WebhookAccounts is intake with many accounts against one; no
	// Accounts: not measured.
	WebhookAccounts WebhookAccountsOptions
	// WebhookStore is intake with the store against one replica's
	// durable intake; no Rounds: not measured.
	WebhookStore WebhookOptions
	// Replicas is polling with several replicas sharing one key through
	// the store; no Replicas: not measured.
	Replicas ReplicasOptions
	// Planning is the scheduler's cost per request at a small and a large
	// number of addresses; no sizes: not measured.
	Planning PlanningOptions
	// Owners is the cost of owner labels; no Addresses: not measured.
	Owners OwnersOptions
	// Checkpoint is the store's checkpoint at scale; no Addresses: not
	// measured.
	Checkpoint CheckpointOptions
	// Only names the one part to run (OnlyWebhookAccounts, OnlyReplicas,
	// OnlyWebhookStore, OnlyPlanning, OnlyOwners, OnlyUserCost,
	// OnlyCheckpoint); empty: all.
	Only string
	// BudgetRun is the fake time each budget run lasts.
	BudgetRun time.Duration
	// Budgets are the api.requests_per_minute values to run.
	Budgets []int
	// LatencyAddresses are watched while LatencySamples alerts are timed.
	LatencyAddresses int
	LatencySamples   int
	Progress         io.Writer // one line per step
}

// ScrapeSize is one address count and how many scrapes to time.
type ScrapeSize struct {
	Addresses int
	Scrapes   int
}

// Goals: the collector-only figures, the process as deployed, its start-up
// and its state snapshot.
const (
	goalDeployedRatio   = 0.3  // of the promhttp baseline, at deployedLarge
	goalDeployedSeconds = 1.0  // a scrape at deployedLarge, one core
	goalDeployedStretch = 0.5  // the same, the stretch goal
	goalDeployedRSS     = 1024 // MiB, peak, at deployedLarge
	goalDeployedXL      = 2.0  // seconds, a scrape at deployedXL
	goalStartSeconds    = 1.0  // exec to serving the restored values, at deployedLarge
	goalSnapshotSeconds = 1.0  // writing the snapshot, at deployedLarge
	deployedLarge       = 10000
	deployedXL          = 20000
	deployedStarts      = 3 // starts timed per size, the fastest kept

	goalWebhookRatio = 0.6 // with the journal's fsync before every 204
	// One replica's durable intake against the durable floor (the bare
	// server plus the same journal): the share our own code leaves.
	goalWebhookDurableRatio = 0.85
	// Intake with 20 accounts, signed by the last one's secret, against
	// one account.
	goalWebhookAccountsRatio = 0.7
	goalScrapeRatio          = 1.2
	goalScrapeSeconds        = 1.0   // for the largest size, on one core
	goalBudgetUse            = 0.95  // of the allowed requests
	goalLatency              = 1.0   // seconds from alert to gauge
	largeScrape              = 10000 // addresses the one-second goal is about
)

// RunSuite measures everything and returns the report with its figures.
func RunSuite(o SuiteOptions) (*Report, error) {
	if o.Exe == "" {
		return nil, errors.New("suite: no binary for the scrape measurements")
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	r := &Report{Started: time.Now().UTC(), Machine: ThisMachine(), LoadBefore: loadAverage()}
	if o.Only != "" {
		var err error
		switch o.Only {
		case OnlyWebhook:
			err = measureWebhook(r, o.Webhook, progress)
		case OnlyWebhookAccounts:
			err = measureWebhookAccounts(r, o.WebhookAccounts, progress)
		case OnlyWebhookStore:
			err = measureWebhookStore(r, o.WebhookStore, progress)
		case OnlyReplicas:
			err = measureReplicas(r, o.Replicas, progress)
		case OnlyPlanning:
			err = measurePlanning(r, o.Planning, progress)
		case OnlyOwners:
			err = measureOwners(r, o.Owners, progress)
		case OnlyUserCost:
			err = measureUserCost(r, o, progress)
		case OnlyCheckpoint:
			err = measureCheckpoint(r, o.Checkpoint, progress)
		default:
			return r, fmt.Errorf("suite: no part %q to run alone (only %s)", o.Only, OnlyParts)
		}
		r.finish()
		return r, err
	}
	if err := checkBaseline(25); err != nil {
		return r, err
	}

	for _, size := range o.ScrapeSizes {
		pair := ScrapePair{Addresses: size.Addresses}
		for run := range max(o.ScrapeRuns, 1) {
			for _, impl := range []string{ImplCollector, ImplGaugeVec} {
				fmt.Fprintf(progress, "scrape: %d addresses, %s, run %d\n", size.Addresses, impl, run+1)
				res, err := MeasureScrapeIsolated(o.Exe, impl, size.Addresses, size.Scrapes)
				if err != nil {
					return r, err
				}
				best := &pair.Ours
				if impl == ImplGaugeVec {
					best = &pair.Baseline
				}
				if run == 0 || res.SecondsPerScrape < best.SecondsPerScrape {
					*best = res
				}
			}
		}
		r.Scrape = append(r.Scrape, pair)
	}

	if len(o.DeployedSizes) > 0 {
		dir, err := os.MkdirTemp("", "breach-bench-build-")
		if err != nil {
			return r, err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(progress, "deployed: building %s\n", ExporterPackage)
		exporterBin, err := BuildExporter(dir)
		if err != nil {
			return r, err
		}
		for _, size := range o.DeployedSizes {
			fmt.Fprintf(progress, "deployed: %d addresses, the exporter binary then the promhttp baseline, %d scrapes each\n", size.Addresses, size.Scrapes)
			d, err := MeasureDeployed(DeployedOptions{Exporter: exporterBin, Bench: o.Exe, Addresses: size.Addresses, Scrapes: size.Scrapes, Starts: deployedStarts})
			if err != nil {
				return r, fmt.Errorf("deployed, %d addresses: %w", size.Addresses, err)
			}
			r.Deployed = append(r.Deployed, d)
		}
	}

	if o.UserCost.Addresses > 0 {
		if err := measureUserCost(r, o, progress); err != nil {
			return r, err
		}
	}

	if err := measureWebhook(r, o.Webhook, progress); err != nil {
		return r, err
	}
	if err := measureWebhookAccounts(r, o.WebhookAccounts, progress); err != nil {
		return r, err
	}
	if err := measureWebhookStore(r, o.WebhookStore, progress); err != nil {
		return r, err
	}
	if err := measureReplicas(r, o.Replicas, progress); err != nil {
		return r, err
	}
	if err := measureCheckpoint(r, o.Checkpoint, progress); err != nil {
		return r, err
	}

	for _, rpm := range o.Budgets {
		fmt.Fprintf(progress, "budget: %d/min for %s of fake time\n", rpm, o.BudgetRun)
		b, err := MeasureBudget(rpm, o.BudgetRun)
		if err != nil {
			return r, fmt.Errorf("budget %d/min: %w", rpm, err)
		}
		r.Budget = append(r.Budget, b)
	}
	if err := measurePlanning(r, o.Planning, progress); err != nil {
		return r, err
	}
	if err := measureOwners(r, o.Owners, progress); err != nil {
		return r, err
	}

	fmt.Fprintf(progress, "alert latency: %d samples\n", o.LatencySamples)
	lat, err := MeasureAlertLatency(o.LatencyAddresses, o.LatencySamples)
	if err != nil {
		return r, fmt.Errorf("alert latency: %w", err)
	}
	r.Latency = &lat

	r.finish()
	return r, nil
}

// SuiteOptions.Only's parts, each run alone rather than the whole suite.
const (
	// OnlyWebhook is the intake against the bare and durable servers (a
	// minute).
	OnlyWebhook = "webhook"
	// OnlyWebhookAccounts is the many-accounts intake (a few seconds).
	OnlyWebhookAccounts = "webhook-accounts"
	// OnlyWebhookStore is intake with the store against without.
	OnlyWebhookStore = "webhook-store"
	// OnlyReplicas is polling with several replicas (a few minutes of
	// real time: the service's windows are real minutes).
	OnlyReplicas = "replicas"
	// OnlyPlanning is the scheduler's cost per request (seconds).
	OnlyPlanning = "planning"
	// OnlyOwners is the cost of owner labels (about a minute).
	OnlyOwners = "owners"
	// OnlyUserCost is what a real Prometheus pays (o.UserCost).
	OnlyUserCost = "user-cost"
	// OnlyCheckpoint is the store's checkpoint at scale (a few minutes of
	// real time: the snapshot interval is a real minute).
	OnlyCheckpoint = "checkpoint"
)

// OnlyParts lists them for messages and flags.
const OnlyParts = OnlyWebhook + ", " + OnlyWebhookAccounts + ", " + OnlyWebhookStore + ", " + OnlyReplicas + ", " + OnlyPlanning + ", " + OnlyOwners + ", " + OnlyUserCost + ", " + OnlyCheckpoint

func measureWebhook(r *Report, o WebhookOptions, progress io.Writer) error {
	fmt.Fprintf(progress, "webhook: %d clients, %d rounds of %d requests per server\n", o.Clients, o.Rounds, o.Requests)
	res, err := MeasureWebhook(o)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	r.Webhook = &res
	return nil
}

func measureWebhookStore(r *Report, o WebhookOptions, progress io.Writer) error {
	if o.Rounds == 0 {
		return nil
	}
	fmt.Fprintf(progress, "webhook store: with a store against without, %d clients, %d rounds of %d requests each\n", o.Clients, o.Rounds, o.Requests)
	res, err := MeasureWebhookStore(o)
	if err != nil {
		return fmt.Errorf("webhook store: %w", err)
	}
	r.WebhookStore = &res
	return nil
}

func measureReplicas(r *Report, o ReplicasOptions, progress io.Writer) error {
	if o.Replicas == 0 {
		return nil
	}
	cleanup, err := buildUnlessGiven(&o.Exporter, "replicas", progress)
	defer cleanup()
	if err != nil {
		return err
	}
	span := fmt.Sprintf("%d whole windows", o.Windows)
	if o.Windows < 1 {
		span = o.Run.String()
	}
	fmt.Fprintf(progress, "replicas: %d replicas sharing a store and 1 alone, %d addresses, %d/min, %s of real time\n", o.Replicas, o.Addresses, o.RequestsPerMinute, span)
	res, err := MeasureReplicas(o)
	if err != nil {
		return fmt.Errorf("replicas: %w", err)
	}
	r.Replicas = &res
	return nil
}

// buildUnlessGiven builds the exporter binary into *exe when it names
// none; cleanup removes what it built.
func buildUnlessGiven(exe *string, part string, progress io.Writer) (cleanup func(), err error) {
	if *exe != "" {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "breach-bench-build-")
	if err != nil {
		return func() {}, err
	}
	fmt.Fprintf(progress, "%s: building %s\n", part, ExporterPackage)
	*exe, err = BuildExporter(dir)
	return func() { os.RemoveAll(dir) }, err
}

func measureCheckpoint(r *Report, o CheckpointOptions, progress io.Writer) error {
	if o.Addresses == 0 {
		return nil
	}
	cleanup, err := buildUnlessGiven(&o.Exporter, "checkpoint", progress)
	defer cleanup()
	if err != nil {
		return err
	}
	fmt.Fprintf(progress, "checkpoint: %d addresses, a replica of a real redis-server, %d quiet minutes of real time, %d starts from the store\n", o.Addresses, o.QuietMinutes, o.Starts)
	res, err := MeasureCheckpoint(o)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	r.Checkpoint = &res
	return nil
}

func measureWebhookAccounts(r *Report, o WebhookAccountsOptions, progress io.Writer) error {
	if o.Accounts == 0 {
		return nil
	}
	fmt.Fprintf(progress, "webhook accounts: %d accounts against 1, %d clients, %d rounds of %d requests each\n", o.Accounts, o.Clients, o.Rounds, o.Requests)
	res, err := MeasureWebhookAccounts(o)
	if err != nil {
		return fmt.Errorf("webhook accounts: %w", err)
	}
	r.WebhookAccounts = &res
	return nil
}

// finish adds the figures and the end of the run to the report.
func (r *Report) finish() {
	r.Figures = figures(r)
	r.LoadAfter = loadAverage()
	r.Duration = time.Since(r.Started).Round(time.Second).String()
}

func figures(r *Report) []Figure {
	var fs []Figure
	if w := r.Webhook; w != nil {
		fs = append(fs,
			newFigure("webhook accepted alerts", "per s", w.OursPerSecond, w.BaselinePerSecond, "bare HMAC net/http").
				withRatio(w.Ratio).
				withGoal(fmt.Sprintf("ratio >= %.1f", goalWebhookRatio), w.Ratio >= goalWebhookRatio),
			// What the disk allows: the bare server that also syncs each
			// alert to the same journal before its 204. The ours column of
			// this line is that server.
			newFigure("webhook durable floor: bare HMAC + journal", "per s", w.DurablePerSecond, w.BaselinePerSecond, "bare HMAC net/http").
				withRatio(w.DurableRatio),
			newFigure("webhook accepted alerts vs durable floor", "per s", w.OursPerSecond, w.DurablePerSecond, "bare HMAC + journal").
				withRatio(w.OursToDurable).
				withGoal(fmt.Sprintf("ratio >= %.2f", goalWebhookDurableRatio), w.OursToDurable >= goalWebhookDurableRatio),
			newFigure("webhook server allocs", "per request", w.OursServerAllocs, w.BaselineServerAllocs, "bare HMAC handler"),
			newFigure("webhook server heap", "B/request", w.OursServerBytes, w.BaselineServerBytes, "bare HMAC handler"),
			newFigure("webhook process CPU (client too)", "us/request", w.OursCPUMicros, w.BaselineCPUMicros, "bare HMAC net/http"),
			newFigure("webhook process CPU vs durable floor (client too)", "us/request", w.OursCPUMicros, w.DurableCPUMicros, "bare HMAC + journal"),
			newFigure("webhook process allocs (client too)", "per request", w.OursProcessAllocs, w.BaselineProcessAllocs, "bare HMAC net/http"),
		)
	}
	if w := r.WebhookAccounts; w != nil {
		fs = append(fs, newFigure(fmt.Sprintf("webhook accepted alerts, %d accounts (last one's secret)", w.Accounts), "per s", w.ManyPerSecond, w.OnePerSecond, "1 account").
			withRatio(w.Ratio).
			withGoal(fmt.Sprintf("ratio >= %.1f", goalWebhookAccountsRatio), w.Ratio >= goalWebhookAccountsRatio))
	}
	for _, p := range r.Scrape {
		o, b := p.Ours, p.Baseline
		n := fmt.Sprintf("%d addr", p.Addresses)
		fs = append(fs,
			newFigure("collector-only scrape time "+n+" (1 core)", "s", o.SecondsPerScrape, b.SecondsPerScrape, "GaugeVecs").
				withGoal(fmt.Sprintf("ratio <= %.1f", goalScrapeRatio), o.SecondsPerScrape <= goalScrapeRatio*b.SecondsPerScrape),
		)
		if p.Addresses == largeScrape {
			fs = append(fs, newFigure("collector-only scrape time "+n+" vs 1 s", "s", o.SecondsPerScrape, goalScrapeSeconds, "goal").
				withGoal(fmt.Sprintf("< %.0f s", goalScrapeSeconds), o.SecondsPerScrape < goalScrapeSeconds))
		}
		fs = append(fs,
			newFigure("collector-only scrape size "+n, "bytes", float64(o.BytesPerScrape), float64(b.BytesPerScrape), "GaugeVecs"),
			newFigure("collector-only scrape allocated "+n, "B/scrape", o.AllocBytesPerScrape, b.AllocBytesPerScrape, "GaugeVecs"),
			newFigure("collector-only state memory "+n, "B/address", o.StateBytesPerAddress, b.StateBytesPerAddress, "GaugeVecs"),
			newFigure("collector-only peak RSS "+n, "MiB", mib(o.PeakRSSBytes), mib(b.PeakRSSBytes), "GaugeVecs"),
		)
	}
	fs = append(fs, replicatedFigures(r)...)
	fs = append(fs, deployedFigures(r.Deployed)...)
	fs = append(fs, userCostFigures(r.UserCost)...)
	fs = append(fs, checkpointFigures(r.Checkpoint)...)
	for _, b := range r.Budget {
		name := fmt.Sprintf("budget used at %d/min", b.RequestsPerMinute)
		fs = append(fs,
			newFigure(name, "requests", float64(b.Sent), b.Allowed, "allowed").
				withGoal(fmt.Sprintf("ratio >= %.2f", goalBudgetUse), b.Fraction >= goalBudgetUse),
			newFigure(fmt.Sprintf("429s at %d/min", b.RequestsPerMinute), "responses", float64(b.RateLimited), 0, "").
				withGoal("0", b.RateLimited == 0),
		)
	}
	fs = append(fs, planningFigures(r.Planning)...)
	fs = append(fs, ownersFigures(r.Owners)...)
	if l := r.Latency; l != nil {
		fs = append(fs,
			newFigure("alert to gauge, median", "s", l.MedianSeconds, l.FloorSeconds, "one GET /breaches").
				withGoal(fmt.Sprintf("< %.0f s", goalLatency), l.MedianSeconds < goalLatency),
			newFigure("alert to gauge, max", "s", l.MaxSeconds, l.FloorSeconds, "one GET /breaches").
				withGoal(fmt.Sprintf("< %.0f s", goalLatency), l.MaxSeconds < goalLatency),
		)
	}
	return fs
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// deployedFigures are the built binary's, against the promhttp process.
func deployedFigures(ds []DeployedResult) []Figure {
	var fs []Figure
	for _, d := range ds {
		o, b := d.Ours, d.Baseline
		n := fmt.Sprintf("%d addr", d.Addresses)
		base := "promhttp vectors"
		steady := newFigure("deployed scrape "+n+", median (gzip, 1 core)", "s", o.Seconds, b.Seconds, base)
		if d.Addresses == deployedLarge {
			steady = steady.withGoal(fmt.Sprintf("ratio <= %.1f", goalDeployedRatio), o.Seconds <= goalDeployedRatio*b.Seconds)
		}
		fs = append(fs,
			newFigure("deployed scrape "+n+", first after alerts", "s", o.FirstSeconds, b.FirstSeconds, base),
			steady)
		switch d.Addresses {
		case deployedLarge:
			fs = append(fs,
				newFigure("deployed scrape "+n+" vs 1 s", "s", o.Seconds, goalDeployedSeconds, "goal").
					withGoal(fmt.Sprintf("< %.0f s", goalDeployedSeconds), o.Seconds < goalDeployedSeconds),
				newFigure("deployed scrape "+n+" vs 0.5 s", "s", o.Seconds, goalDeployedStretch, "goal").
					withGoal(fmt.Sprintf("< %.1f s", goalDeployedStretch), o.Seconds < goalDeployedStretch))
		case deployedXL:
			fs = append(fs, newFigure("deployed scrape "+n+" vs 2 s", "s", o.Seconds, goalDeployedXL, "goal").
				withGoal(fmt.Sprintf("< %.0f s", goalDeployedXL), o.Seconds < goalDeployedXL))
		}
		peak := newFigure("deployed peak RSS (VmHWM) "+n, "MiB", mib(o.PeakRSSBytes), mib(b.PeakRSSBytes), base+" after load")
		if d.Addresses == deployedLarge {
			peak = peak.withGoal(fmt.Sprintf("< %d MiB", goalDeployedRSS), mib(o.PeakRSSBytes) < goalDeployedRSS)
		}
		fs = append(fs,
			newFigure("deployed CPU per scrape "+n, "s", o.CPUSeconds, b.CPUSeconds, base),
			newFigure("deployed bytes on the wire "+n, "bytes", float64(o.WireBytes), float64(b.WireBytes), base),
			newFigure("deployed bytes uncompressed "+n, "bytes", float64(o.Bytes), float64(b.Bytes), base),
			newFigure("deployed series "+n, "series", float64(o.Series), float64(b.Series), base),
			newFigure("deployed series per address "+n, "series", float64(o.AddressSeries)/float64(d.Addresses),
				float64(b.AddressSeries)/float64(d.Addresses), base),
			newFigure("deployed RSS (VmRSS) "+n, "MiB", mib(o.RSSBytes), mib(b.RSSBytes), base),
			peak,
		)
		start := newFigure(fmt.Sprintf("start: exec to restored /metrics %s, best of %d", n, len(d.StartSamples)), "s", d.StartSeconds, 0, "")
		shutdown := newFigure("snapshot write: SIGTERM to exit "+n, "s", d.ShutdownSeconds, 0, "")
		if d.Addresses == deployedLarge {
			start = start.withGoal(fmt.Sprintf("< %.0f s", goalStartSeconds), d.StartSeconds < goalStartSeconds)
			shutdown = shutdown.withGoal(fmt.Sprintf("< %.0f s", goalSnapshotSeconds), d.ShutdownSeconds < goalSnapshotSeconds)
		}
		fs = append(fs, newFigure(fmt.Sprintf("start: exec to listening %s, best of %d", n, len(d.StartSamples)), "s", d.ListeningSeconds, 0, ""), start, shutdown,
			newFigure("snapshot Encode+Write in-process "+n, "s", d.EncodeWriteSeconds, 0, ""),
			newFigure("snapshot size "+n, "bytes", float64(d.SnapshotBytes), 0, ""),
			newFigure("deployed signed alerts accepted "+n+" (4 clients)", "per s", perSecond(d.AlertsAccepted, d.AlertSeconds), 0, ""),
		)
	}
	return fs
}

func perSecond(n int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) / seconds
}

// replicatedFigures are the store's: intake with it, and polling with
// several replicas sharing one key.
func replicatedFigures(r *Report) []Figure {
	var fs []Figure
	if w := r.WebhookStore; w != nil {
		fs = append(fs,
			newFigure("webhook accepted alerts with the store", "per s", w.StorePerSecond, w.AlonePerSecond, "1 replica, journal, no store").
				withRatio(w.Ratio).
				withGoal(fmt.Sprintf("ratio >= %.1f", goalWebhookStoreRatio), w.Ratio >= goalWebhookStoreRatio),
			newFigure("webhook alerts into the store's count", "per s", w.ForwardedPerSecond, w.AlonePerSecond, "1 replica, journal, no store"),
			newFigure("webhook CPU per alert with the store (client, redis too)", "us/alert", w.StoreCPUMicros, w.AloneCPUMicros, "1 replica, journal, no store"),
		)
	}
	if p := r.Replicas; p != nil {
		s, a := p.Shared, p.Alone
		n := fmt.Sprintf("%d replicas", s.Replicas)
		budget := float64(p.RequestsPerMinute)
		fs = append(fs,
			newFigure(fmt.Sprintf("polling %s, one key at %d/min: requests per window", n, p.RequestsPerMinute), "requests", s.PerWindow, budget, "the key's budget").
				withGoal(fmt.Sprintf("ratio >= %.2f", goalReplicasBudget), s.Used >= goalReplicasBudget),
			newFigure(fmt.Sprintf("polling 1 replica alone at %d/min: requests per window", p.RequestsPerMinute), "requests", a.PerWindow, budget, "the key's budget"),
			newFigure("polling "+n+" vs 1 alone: requests per window", "requests", s.PerWindow, a.PerWindow, "1 replica, no store"),
			newFigure("polling "+n+": most requests in one window", "requests", float64(s.MaxPerWindow), budget, "the key's budget").
				withGoal(fmt.Sprintf("<= %d", p.RequestsPerMinute), s.MaxPerWindow <= p.RequestsPerMinute),
			newFigure("polling "+n+": 429s", "responses", float64(s.RateLimited), 0, "").
				withGoal("0", s.RateLimited == 0),
		)
	}
	return fs
}

// measureUserCost builds the exporter and measures what a real Prometheus
// pays for it (o.UserCost) into r.
func measureUserCost(r *Report, o SuiteOptions, progress io.Writer) error {
	u := o.UserCost
	fmt.Fprintf(progress, "user cost: %d addresses, a real Prometheus, default then every detail family, then %d replicas\n", u.Addresses, u.Replicas)
	dir, err := os.MkdirTemp("", "breach-bench-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if u.Exporter, err = BuildExporter(dir); err != nil {
		return err
	}
	u.Bench = o.Exe
	uc, err := MeasureUserCost(u)
	if err != nil {
		return fmt.Errorf("user cost: %w", err)
	}
	r.UserCost = &uc
	return nil
}
