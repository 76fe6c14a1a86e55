// SPDX-License-Identifier: Apache-2.0

// Command breach_exporter polls the breach monitoring service within its
// request budget, serves the cached state as Prometheus metrics, and receives
// the service's signed webhook alerts on a separate listener.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
	"github.com/breach-exporter/breach_exporter/internal/listen"
	"github.com/breach-exporter/breach_exporter/internal/logging"
	"github.com/breach-exporter/breach_exporter/webhook"
)

const name = "breach_exporter"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns when ctx ends (SIGINT/SIGTERM) or a
// listener fails, after shutting the listeners down gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := kingpin.New(name, "Prometheus exporter and alerting bridge for the breach monitoring service.")
	var (
		configFile    = app.Flag("config.file", "Path to the configuration file.").Default(name + ".yml").String()
		configCheck   = app.Flag("config.check", "Validate the configuration (file, token and secrets), print the result and exit 0 (valid) or 1.").Bool()
		webFlags      = kingpinflag.AddFlags(app, ":9799")
		telemetryPath = app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
		hookAddress   = app.Flag("webhook.listen-address", "Address of the separate webhook listener, e.g. :9800. Empty disables the receiver.").Default("").String()
		hookWebConfig = app.Flag("webhook.web-config.file", "exporter-toolkit web config (TLS, basic auth) for the webhook listener alone.").Default("").String()
		hookPath      = app.Flag("webhook.path", "Path of the webhook endpoint on the webhook listener.").Default("/webhook").String()
		webMaxReqs    = app.Flag("web.max-requests", "Maximum number of parallel scrape requests. Use 0 to disable.").Default(strconv.Itoa(collector.DefaultMaxRequests)).Int()
		webMaxConns   = app.Flag("web.max-connections", "Maximum number of connections each metrics listening address holds open at once; more wait until one closes.").Default("512").Int()
		hookMaxConns  = app.Flag("webhook.max-connections", "Maximum number of connections the webhook listener holds open at once; more wait until one closes.").Default(strconv.Itoa(webhook.DefaultMaxConnections)).Int()
		hookPerClient = app.Flag("webhook.max-connections-per-client", "Maximum number of connections one client (an IPv4 address or an IPv6 /64) holds open on the webhook listener; more are closed at once. Behind a reverse proxy every connection comes from the proxy: set it to --webhook.max-connections there.").Default(strconv.Itoa(webhook.DefaultMaxConnectionsPerClient)).Int()
		storagePath   = app.Flag("storage.path", "Folder of the state snapshot, which keeps the cached answers, the schedule, discovered addresses and the webhook duplicate memory across restarts. Empty turns persistence off.").Default("data/").String()
		snapInterval  = app.Flag("storage.snapshot-interval", "How often at most the state snapshot is written (only when something changed), besides once at shutdown.").Default("1m").Duration()
		logLevel      = app.Flag("log.level", "Only log messages with the given severity or above. One of: ["+strings.Join(logging.Levels, ", ")+"]").Default("info").Enum(logging.Levels...)
		logFormat     = app.Flag("log.format", "Output format of log messages. One of: ["+strings.Join(logging.Formats, ", ")+"]").Default("logfmt").Enum(logging.Formats...)
	)
	app.Version(version.Print(name))
	app.HelpFlag.Short('h')
	app.UsageWriter(stdout)
	app.ErrorWriter(stderr)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}

	logger, slogger := logging.New(stderr, *logLevel, *logFormat)
	webhookOn := *hookAddress != ""
	if webhookOn && (!strings.HasPrefix(*hookPath, "/") || *hookPath == webhook.HealthyPath) {
		fmt.Fprintf(stderr, "%s: --webhook.path %q must start with / and differ from %s\n", name, *hookPath, webhook.HealthyPath)
		return 2
	}

	if *webMaxReqs < 0 {
		fmt.Fprintf(stderr, "%s: --web.max-requests must be 0 (no limit) or more, got %d\n", name, *webMaxReqs)
		return 2
	}
	if *webMaxConns < 1 || *hookMaxConns < 1 {
		fmt.Fprintf(stderr, "%s: --web.max-connections and --webhook.max-connections must be at least 1\n", name)
		return 2
	}
	if *hookPerClient < 1 || *hookPerClient > *hookMaxConns {
		fmt.Fprintf(stderr, "%s: --webhook.max-connections-per-client must be between 1 and --webhook.max-connections (%d), got %d\n", name, *hookMaxConns, *hookPerClient)
		return 2
	}

	// Read by exporter-toolkit as it serves; checked with the config.
	webConfigs := []config.WebConfig{{Flag: "--web.config.file", File: *webFlags.WebConfigFile}}
	if webhookOn {
		webConfigs = append(webConfigs, config.WebConfig{Flag: "--webhook.web-config.file", File: *hookWebConfig})
	}
	if *configCheck {
		// The start's own load path: file, token, secrets, HTTP client and
		// web configs; and the address files, which a start would read on
		// its own.
		return checkConfig(ctx, *configFile, config.LoadOptions{Webhook: webhookOn, WebConfigs: webConfigs, AddressFiles: true}, stdout, stderr)
	}

	level.Info(logger).Log("msg", "Starting "+name, "version", version.Info(), "build_context", version.BuildContext())

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	listenMetrics, err := listen.NewMetrics(reg)
	if err != nil {
		level.Error(logger).Log("msg", "Cannot register the listener metrics", "err", err)
		return 1
	}
	if *snapInterval <= 0 {
		fmt.Fprintf(stderr, "%s: --storage.snapshot-interval must be greater than 0, got %s\n", name, *snapInterval)
		return 2
	}
	exp, err := exporter.New(exporter.Options{
		ConfigFile:       *configFile,
		UserAgent:        name + "/" + version.Version,
		Logger:           logger,
		Registerer:       reg,
		Webhook:          webhookOn,
		StoragePath:      *storagePath,
		SnapshotInterval: *snapInterval,
		WebConfigs:       webConfigs,
		MaxRequests:      *webMaxReqs,
	})
	if err != nil {
		level.Error(logger).Log("msg", "Cannot start", "config", *configFile, "err", err)
		return 1
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()

	mux, err := newMux(untilShutdown{exp, ctx}, exp.MetricsHandler(reg), *telemetryPath)
	if err != nil {
		level.Error(logger).Log("msg", "Cannot build the landing page", "err", err)
		return 1
	}
	webServer := newWebServer(mux)
	webLimit := listen.Limit{Name: "web", MaxConnections: *webMaxConns, Metrics: listenMetrics}
	servers := []*listener{{
		name:   "web",
		server: webServer,
		serve:  func(l *slog.Logger) error { return listen.Serve(webServer, webFlags, webLimit, l) },
	}}
	if webhookOn {
		hookServer := webhook.NewServer(exp.WebhookHandler(), *hookPath)
		hookLimit := listen.Limit{Name: "webhook", MaxConnections: *hookMaxConns, PerClient: *hookPerClient, Metrics: listenMetrics}
		servers = append(servers, &listener{
			name:   "webhook",
			server: hookServer,
			serve: func(l *slog.Logger) error {
				return webhook.Serve(hookServer, *hookAddress, *hookWebConfig, hookLimit, l)
			},
		})
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		exp.Run(ctx)
	}()
	go reloadOnSIGHUP(ctx, exp, logger)

	failed := make(chan error, len(servers))
	for _, l := range servers {
		go func() {
			if err := l.run(slogger); err != nil {
				failed <- err
			}
		}()
	}
	code := 0
	select {
	case <-ctx.Done():
		level.Info(logger).Log("msg", "Shutting down")
	case err := <-failed:
		level.Error(logger).Log("msg", "Listener failed", "err", err)
		code = 1
	}
	stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range servers {
		if err := l.server.Shutdown(shutdownCtx); err != nil {
			level.Warn(logger).Log("msg", "Listener did not shut down cleanly", "listener", l.name, "err", err)
		}
	}
	wg.Wait()
	// The last snapshot, once nothing can change the state any more.
	if err := exp.Close(); err != nil {
		level.Error(logger).Log("msg", "State snapshot at shutdown failed; the previous one stays", "err", err)
		code = 1
	}
	return code
}

// checkConfig is --config.check: every problem on its own line, then the
// verdict. SIGINT or SIGTERM (ctx) ends it even while a file read hangs (a
// hung network mount: a named pipe or a device is refused at once).
func checkConfig(ctx context.Context, file string, o config.LoadOptions, stdout, stderr io.Writer) int {
	type result struct {
		bundle *config.Bundle
		err    error
	}
	done := make(chan result, 1)
	go func() {
		bundle, err := config.LoadBundle(file, o)
		done <- result{bundle, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		fmt.Fprintf(stderr, "%s: %s was not checked: interrupted while reading the files\n", name, file)
		return 1
	}
	bundle, err := r.bundle, r.err
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s is invalid:\n%v\n", name, file, err)
		return 1
	}
	for _, w := range bundle.Warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", name, w)
	}
	fmt.Fprintf(stdout, "%s: %s is valid\n", name, file)
	return 0
}

type listener struct {
	name   string
	server *http.Server
	serve  func(*slog.Logger) error
}

// run serves until Shutdown (nil) or a failure such as a port in use.
func (l *listener) run(logger *slog.Logger) error {
	err := l.serve(logger.With("listener", l.name))
	if err == nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("%s listener: %w", l.name, err)
}

func reloadOnSIGHUP(ctx context.Context, exp *exporter.Exporter, logger log.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := exp.Reload(ctx); err == nil {
				level.Info(logger).Log("msg", "Reloaded on SIGHUP")
			}
		}
	}
}
