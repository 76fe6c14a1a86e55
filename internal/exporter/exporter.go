// Package exporter wires the parts of breach_exporter together: the config
// snapshot in force, the address registry, the scheduler with its API
// client, the collector and the webhook receiver. A reload is one swap of
// the snapshot plus one sync of the registry. main only parses flags and
// runs listeners.
package exporter

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/registry"
	"github.com/breach-exporter/breach_exporter/internal/scheduler"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// Options are the parts of an Exporter that come from flags, not the file.
type Options struct {
	ConfigFile string
	UserAgent  string // "breach_exporter/<version>"
	Logger     log.Logger
	Registerer prometheus.Registerer
	Clock      clockwork.Clock // nil = real clock
	// Webhook turns the receiver on: its secrets become mandatory.
	Webhook bool
	// StoragePath is the folder of the state snapshot; empty turns
	// persistence off.
	StoragePath string
	// SnapshotInterval is the most often the snapshot is written.
	SnapshotInterval time.Duration
}

// Exporter is the running program minus its listeners.
type Exporter struct {
	opts   Options
	logger log.Logger
	clock  clockwork.Clock

	config    *config.Current
	registry  *registry.Registry
	collector *collector.Collector
	scheduler *scheduler.Scheduler
	hook      *webhook.Handler // nil when the receiver is off
	store     *persist.Store   // nil when persistence is off

	reloads chan chan error
	// What the last snapshot saved, so an unchanged state is not written
	// again: the registry's generation and the webhook's count of bodies
	// remembered. Owned by Run, and by Save after Run has returned.
	savedGeneration, savedSeen uint64

	reloadOK   prometheus.Gauge
	reloadTime prometheus.Gauge
}

// New loads the config and builds every part. Any problem is returned: the
// program must not start half-configured.
func New(o Options) (*Exporter, error) {
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	snap, err := config.LoadSnapshot(o.ConfigFile, o.loadOptions())
	if err != nil {
		return nil, err
	}
	apiMetrics, err := api.NewMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	e := &Exporter{
		opts:     o,
		logger:   o.Logger,
		clock:    o.Clock,
		config:   config.NewCurrent(snap),
		registry: registry.New(),
		reloads:  make(chan chan error),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_successful",
			Help: "1 when the last config load succeeded, else 0.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_success_timestamp_seconds",
			Help: "When the config was last loaded successfully (Unix seconds).",
		}),
	}
	var saved *persist.State
	if o.StoragePath != "" {
		if e.store, err = persist.Open(o.StoragePath, o.Registerer, log.With(e.logger, "component", "persist")); err != nil {
			return nil, fmt.Errorf("--storage.path %q: %w", o.StoragePath, err)
		}
		if st, ok := e.store.Load(); ok {
			saved = &st
			e.registry.Restore(st.Registry)
		}
	}
	// The first sync drops what the snapshot holds and the config no
	// longer allows.
	e.syncRegistry(snap)
	if saved != nil {
		e.store.Restored(e.registry.Len())
		level.Info(e.logger).Log("msg", "Restored the state snapshot", "addresses", e.registry.Len(), "remembered_webhooks", len(saved.Seen))
	}
	e.collector = collector.New(e.registry, e.config, o.Webhook)
	e.scheduler = scheduler.New(scheduler.Options{
		Registry: e.registry,
		Config:   e.config,
		Connect:  connect(apiMetrics),
		Clock:    e.clock,
		Logger:   log.With(e.logger, "component", "scheduler"),
		Webhook:  o.Webhook,
	})
	if o.Webhook {
		e.hook, err = webhook.NewHandler(o.Registerer, webhook.Options{
			Config:   e.config,
			Registry: e.registry,
			Clock:    e.clock,
			Logger:   log.With(e.logger, "component", "webhook"),
		})
		if err != nil {
			return nil, err
		}
		if saved != nil {
			e.hook.Restore(saved.Seen)
		}
	}
	e.savedGeneration, e.savedSeen = e.changes()
	for _, c := range []prometheus.Collector{versioncollector.NewCollector("breach_exporter"), e.reloadOK, e.reloadTime} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	e.markReload(true)
	return e, nil
}

func (o Options) loadOptions() config.LoadOptions {
	return config.LoadOptions{UserAgent: o.UserAgent, Webhook: o.Webhook}
}

// connect builds the API client of a config snapshot; every client counts
// into the same metrics.
func connect(m *api.Metrics) func(*config.Snapshot) scheduler.Client {
	return func(s *config.Snapshot) scheduler.Client {
		return api.New(api.Options{
			BaseURL:      s.BaseURL,
			HTTPClient:   s.HTTPClient,
			Token:        s.Token.Get,
			Timeout:      time.Duration(s.Config.API.Timeout),
			MaxBodyBytes: config.APIMaxResponseBytes,
			Metrics:      m,
		})
	}
}

// syncRegistry makes the registry watch what snap configures: its
// addresses under its label mode, and discovered ones within its limit (none
// with discovery off).
func (e *Exporter) syncRegistry(snap *config.Snapshot) {
	cfg := snap.Config
	e.registry.Sync(cfg.Watched(), cfg.Labels.Address, cfg.Webhook.DiscoveryLimit())
}

// Run polls the API, serves reload requests and writes the state snapshot
// every interval until ctx ends. Reloads go through this one goroutine so
// that SIGHUP and /-/reload never race. Call Save after Run returns and the
// listeners are shut down, for the last snapshot.
func (e *Exporter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.scheduler.Run(ctx)
	}()
	var tick <-chan time.Time
	if e.store != nil {
		t := e.clock.NewTicker(e.opts.SnapshotInterval)
		defer t.Stop()
		tick = t.Chan()
	}
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case done := <-e.reloads:
			done <- e.reload()
		case <-tick:
			if err := e.Save(); err != nil {
				level.Error(e.logger).Log("msg", "State snapshot failed; the previous one stays", "err", err)
			}
		}
	}
}

// changes returns what tells whether the state worth saving changed; it
// copies nothing.
func (e *Exporter) changes() (generation, seen uint64) {
	generation = e.registry.Generation()
	if e.hook != nil {
		seen = e.hook.RememberedChanges()
	}
	return generation, seen
}

// Save writes the state snapshot when anything changed since the last one;
// without persistence it does nothing.
func (e *Exporter) Save() error {
	if e.store == nil {
		return nil
	}
	// Checked before anything is copied: most ticks find nothing new.
	if generation, seen := e.changes(); generation == e.savedGeneration && seen == e.savedSeen {
		return nil
	}
	st := persist.State{}
	var generation, seen uint64
	st.Registry, generation = e.registry.Save()
	if e.hook != nil {
		st.Seen, seen = e.hook.Remembered()
	}
	if err := e.store.Save(st, e.clock.Now()); err != nil {
		return err
	}
	e.savedGeneration, e.savedSeen = generation, seen
	return nil
}

// Reload asks Run to reload the config and waits for the outcome.
func (e *Exporter) Reload(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case e.reloads <- done:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reload loads a new snapshot and, only when all of it loaded, puts it in
// force and syncs the registry to it; a failure keeps the old one whole.
func (e *Exporter) reload() error {
	snap, err := config.LoadSnapshot(e.opts.ConfigFile, e.opts.loadOptions())
	if err != nil {
		e.markReload(false)
		level.Error(e.logger).Log("msg", "Config reload failed; keeping the previous config", "err", err)
		return err
	}
	e.config.Store(snap)
	e.syncRegistry(snap)
	e.markReload(true)
	level.Info(e.logger).Log("msg", "Config reloaded", "addresses", len(snap.Config.Addresses))
	return nil
}

func (e *Exporter) markReload(ok bool) {
	if ok {
		e.reloadOK.Set(1)
		e.reloadTime.Set(float64(e.clock.Now().UnixMilli()) / 1000)
		return
	}
	e.reloadOK.Set(0)
}

// MetricsHandler serves registry and the per-address series together at
// /metrics. The collector is not a registry collector: it renders each
// address's lines once and copies them into every scrape, which at 10,000
// addresses is what keeps a scrape under a second (bench/README.md).
func (e *Exporter) MetricsHandler(registry prometheus.Gatherer) http.Handler {
	return collector.NewHandler(e.collector, registry, e.logger)
}

// WebhookHandler is the receiver's handler, nil when it is off.
func (e *Exporter) WebhookHandler() *webhook.Handler { return e.hook }
