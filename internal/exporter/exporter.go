// Package exporter wires the parts of breach_exporter together: config, API
// client, scheduler, cache, collector and webhook receiver, and swaps them as
// one when the config is reloaded. main only parses flags and runs listeners.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	commoncfg "github.com/prometheus/common/config"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/scheduler"
	"github.com/breach-exporter/breach_exporter/internal/state"
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
}

// Exporter is the running program minus its listeners.
type Exporter struct {
	opts   Options
	logger log.Logger
	clock  clockwork.Clock

	store     *state.Store
	collector *collector.Collector
	scheduler *scheduler.Scheduler
	client    *swappableClient
	hook      *webhook.Handler // nil when the receiver is off

	reloads chan chan error

	mu  sync.RWMutex
	cfg *config.Config

	requests        *prometheus.CounterVec
	failures        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	reloadOK        prometheus.Gauge
	reloadTime      prometheus.Gauge
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
	e := &Exporter{
		opts:    o,
		logger:  o.Logger,
		clock:   o.Clock,
		store:   state.NewStore(),
		reloads: make(chan chan error),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_api_requests_total",
			Help: "Requests sent to the breach API, by endpoint and HTTP status code (\"error\" when no response arrived).",
		}, []string{"endpoint", "code"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_api_request_failures_total",
			Help: "Failed requests to the breach API, by endpoint and kind: transport, bad_body (a 200 that was not usable), server_error, rate_limited, unauthorized, bad_request, unexpected_status.",
		}, []string{"endpoint", "kind"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "breach_api_request_duration_seconds",
			Help:    "Duration of requests to the breach API, by endpoint.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"endpoint"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_successful",
			Help: "1 when the last config load succeeded, else 0.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_config_last_reload_success_timestamp_seconds",
			Help: "When the config was last loaded successfully (Unix seconds).",
		}),
	}

	cfg, secrets, err := e.load()
	if err != nil {
		return nil, err
	}
	client, err := e.newClient(cfg)
	if err != nil {
		return nil, err
	}
	e.cfg = cfg
	e.client = &swappableClient{current: client, onPlan: e.checkPlan, failures: e.failures}
	e.collector = collector.New(e.store, cfg.AddressLabel, cfg.API.RequestsPerMinute)
	e.scheduler = scheduler.New(scheduler.Options{
		Client:       e.client,
		Store:        e.store,
		Clock:        e.clock,
		Logger:       log.With(e.logger, "component", "scheduler"),
		AddressLabel: func(email string) string { return e.config().AddressLabel(email) },
	}, settings(cfg))

	if o.Webhook {
		e.hook, err = webhook.NewHandler(o.Registerer, e.clock, log.With(e.logger, "component", "webhook"),
			e.onAlert, webhookSettings(cfg, secrets))
		if err != nil {
			return nil, err
		}
	}
	for _, c := range []prometheus.Collector{
		versioncollector.NewCollector("breach_exporter"),
		e.requests, e.failures, e.requestDuration, e.reloadOK, e.reloadTime,
	} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	// Zero series from the start, so that increase() sees the first failure,
	// the first 401 and the first 429.
	for _, ep := range []string{api.EndpointMe, api.EndpointBreaches} {
		e.requestDuration.WithLabelValues(ep)
		for _, code := range []string{"200", "401", "429"} {
			e.requests.WithLabelValues(ep, code)
		}
		for _, k := range []api.Kind{api.KindTransport, api.KindBadBody, api.KindServer, api.KindRateLimited,
			api.KindUnauthorized, api.KindBadRequest, api.KindUnexpected} {
			e.failures.WithLabelValues(ep, k.String())
		}
	}
	e.markReload(true)
	return e, nil
}

// load reads and validates the config file and (with the receiver on) the
// webhook secrets; newClient reads and checks the token. Together they are
// everything that can make a reload fail.
func (e *Exporter) load() (*config.Config, [][]byte, error) {
	cfg, err := config.Load(e.opts.ConfigFile)
	if err != nil {
		return nil, nil, err
	}
	secrets, err := cfg.Webhook.ReadSecrets()
	if err != nil {
		return nil, nil, err
	}
	if e.opts.Webhook && len(secrets) == 0 {
		return nil, nil, errors.New("webhook: the receiver is enabled (--webhook.listen-address) but no secret is configured: set webhook.secret_files or BREACH_EXPORTER_WEBHOOK_SECRET")
	}
	return cfg, secrets, nil
}

// CheckConfig validates a config file the way a start or reload would.
func CheckConfig(file string, withWebhook bool) error {
	e := &Exporter{opts: Options{ConfigFile: file, Webhook: withWebhook}}
	cfg, _, err := e.load()
	if err != nil {
		return err
	}
	_, err = e.newClient(cfg)
	return err
}

func (e *Exporter) newClient(cfg *config.Config) (*api.Client, error) {
	httpClient, err := commoncfg.NewClientFromConfig(commoncfg.HTTPClientConfig{
		TLSConfig:   cfg.API.TLSConfig,
		ProxyConfig: cfg.API.ProxyConfig,
	}, "breach_api", commoncfg.WithUserAgent(e.opts.UserAgent))
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	token, err := cfg.API.ReadToken()
	if err != nil {
		return nil, err
	}
	tokens := &tokenSource{token: token, read: cfg.API.ReadToken, logger: e.logger}
	return api.New(api.Options{
		BaseURL:        cfg.API.BaseURL,
		HTTPClient:     httpClient,
		Token:          tokens.get,
		OnUnauthorized: tokens.reread,
		UserAgent:      e.opts.UserAgent,
		Timeout:        time.Duration(cfg.API.Timeout),
		Observe: func(endpoint, code string, d time.Duration) {
			e.requests.WithLabelValues(endpoint, code).Inc()
			e.requestDuration.WithLabelValues(endpoint).Observe(d.Seconds())
		},
	})
}

// Run polls the API and serves reload requests until ctx ends. Reloads go
// through this one goroutine so that SIGHUP and /-/reload never race.
func (e *Exporter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.scheduler.Run(ctx)
	}()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case done := <-e.reloads:
			done <- e.reload()
		}
	}
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

func (e *Exporter) reload() error {
	cfg, secrets, err := e.load()
	var client *api.Client
	if err == nil {
		client, err = e.newClient(cfg)
	}
	if err == nil && e.hook != nil {
		err = e.hook.Update(webhookSettings(cfg, secrets))
	}
	if err != nil {
		e.markReload(false)
		level.Error(e.logger).Log("msg", "Config reload failed; keeping the previous config", "err", err)
		return err
	}
	e.mu.Lock()
	e.cfg = cfg
	e.mu.Unlock()
	e.client.swap(client)
	e.collector.Update(cfg.AddressLabel, cfg.API.RequestsPerMinute)
	e.scheduler.Update(settings(cfg))
	e.markReload(true)
	level.Info(e.logger).Log("msg", "Config reloaded", "addresses", len(cfg.Addresses))
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

func (e *Exporter) config() *config.Config {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.cfg
}

// Gatherer serves registry and the cached breach series together. The
// collector is not registered in registry: it gathers its own families,
// which at 10,000 addresses halves the cost of a scrape (bench/README.md).
func (e *Exporter) Gatherer(registry prometheus.Gatherer) prometheus.Gatherer {
	return collector.Merge{registry, e.collector}
}

// WebhookHandler is the receiver's handler, nil when it is off.
func (e *Exporter) WebhookHandler() http.Handler {
	if e.hook == nil {
		return nil
	}
	return e.hook
}

// onAlert re-reads the alerted address at once. An address the config does
// not list is polled from now on when discovery is on (logged once, by Add).
func (e *Exporter) onAlert(a webhook.Alert) {
	cfg := e.config()
	if e.scheduler.Refresh(a.Address) {
		return
	}
	if !cfg.Webhook.Discover() {
		return
	}
	if e.scheduler.Add(a.Address) {
		level.Info(e.logger).Log("msg", "Alert for an address not in the config; polling it from now on (webhook.discover_addresses)",
			"address", cfg.AddressLabel(a.Address))
	}
}

// checkPlan warns once per plan when webhooks are configured on a plan that
// the service does not deliver them to.
func (e *Exporter) checkPlan(plan string) {
	if e.hook == nil || (plan != "free" && plan != "personal") {
		return
	}
	level.Warn(e.logger).Log("msg", "A webhook secret is configured but the service delivers webhooks only to the pro and business plans", "plan", plan)
}

func settings(cfg *config.Config) scheduler.Settings {
	return scheduler.Settings{
		Addresses:         cfg.Emails(),
		RequestsPerMinute: cfg.API.RequestsPerMinute,
		Interval:          time.Duration(cfg.Refresh.Interval),
		MeInterval:        time.Duration(cfg.Refresh.MeInterval),
	}
}

func webhookSettings(cfg *config.Config, secrets [][]byte) webhook.Settings {
	return webhook.Settings{
		Secrets:         secrets,
		MaxBodyBytes:    cfg.Webhook.MaxBodyBytes,
		DedupWindow:     time.Duration(cfg.Webhook.DedupWindow),
		DedupMaxEntries: cfg.Webhook.DedupMaxEntries,
		MaxEventAge:     time.Duration(cfg.Webhook.MaxEventAge),
		Label:           cfg.AddressLabel,
		Addresses:       cfg.Emails(),
	}
}
