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
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
	"github.com/breach-exporter/breach_exporter/internal/listen"
	"github.com/breach-exporter/breach_exporter/internal/logging"
	"github.com/breach-exporter/breach_exporter/webhook"
)

const name = "breach_exporter"

// listenerShutdownTimeout bounds the listeners' graceful shutdown after
// the drain: requests still running get this long to finish.
const listenerShutdownTimeout = 5 * time.Second

func main() {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	os.Exit(run(stopOn(signals), os.Args[1:], os.Stdout, os.Stderr))
}

// stopping is how the program is asked to end: drain ends with the first
// SIGTERM or SIGINT, which starts the shutdown (not ready at once, both
// listeners answering for --web.shutdown-delay); now ends with a second
// one, which cuts the delay short. now never ends before drain.
type stopping struct {
	drain, now context.Context
}

// stopOn is the stopping that signals (the first, then a second) make.
func stopOn(signals <-chan os.Signal) stopping {
	drain, startDrain := context.WithCancel(context.Background())
	now, stopNow := context.WithCancel(context.Background())
	go func() {
		<-signals
		startDrain()
		<-signals
		stopNow()
	}()
	return stopping{drain: drain, now: now}
}

// options are the command line's values.
type options struct {
	configFile, telemetryPath, hookAddress, hookWebConfig, hookPath string
	storagePath, logLevel, logFormat                                string
	configCheck                                                     bool
	webFlags                                                        *web.FlagConfig
	webMaxReqs, webMaxConns, hookMaxConns, hookPerClient            int
	snapInterval, shutdownDelay                                     time.Duration
	// The acknowledgement page (internal/ackweb).
	ackWrite              bool
	ackUserHeader, extURL string
	ackProxies            string
	// advertise is --web.advertise-url (advertise.go).
	advertise string
}

// newApp is the flag table: it parses into o.
func newApp(o *options, stdout, stderr io.Writer) *kingpin.Application {
	app := kingpin.New(name, "Prometheus exporter and alerting bridge for the breach monitoring service.")
	app.Flag("config.file", "Path to the configuration file.").Default(name + ".yml").StringVar(&o.configFile)
	app.Flag("config.check", "Validate the configuration (file, token and secrets), print the result and exit 0 (valid) or 1.").BoolVar(&o.configCheck)
	o.webFlags = kingpinflag.AddFlags(app, ":9799")
	app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&o.telemetryPath)
	app.Flag("web.shutdown-delay", "After SIGTERM or SIGINT, how long /-/ready answers 503 while both listeners keep serving, before they close: the time a load balancer or Kubernetes takes to stop sending here. A second signal ends the delay. 0 closes them at once.").Default("0s").DurationVar(&o.shutdownDelay)
	app.Flag("web.external-url", "The URL under which the exporter's web listener is reachable by people (behind a proxy, its URL there), e.g. https://breach.example.com/. The alerts link to its acknowledgement page through the series breach_exporter_acknowledgement_url_info. Empty: no link.").Default("").StringVar(&o.extURL)
	app.Flag("web.advertise-url", "With a store: the URL under which the other replicas reach this replica's web listener, e.g. http://10.1.2.3:9799 (in Kubernetes, the pod's IP). They pass the scrapes of the cluster's series (/metrics?scope=cluster) to the replica serving them. Empty: http:// and the first --web.listen-address, with this host's name where it has no host.").Default("").StringVar(&o.advertise)
	app.Flag("web.enable-acknowledgements", "Let authenticated users acknowledge on the page /acknowledge and the API /api/v1/acknowledgements (basic auth or client certificates in --web.config.file, or --web.acknowledgements.user-header). Needs --storage.path. Off: the pages only show the acknowledgements.").BoolVar(&o.ackWrite)
	app.Flag("web.acknowledgements.user-header", "Header carrying the user an authenticating proxy logged in (e.g. X-Forwarded-User); accepted only on connections from --web.acknowledgements.proxy.").Default("").StringVar(&o.ackUserHeader)
	app.Flag("web.acknowledgements.proxy", "Addresses or CIDR prefixes, comma-separated, of the authenticating proxies whose --web.acknowledgements.user-header is trusted.").Default("").StringVar(&o.ackProxies)
	app.Flag("webhook.listen-address", "Address of the separate webhook listener, e.g. :9800. Empty disables the receiver.").Default("").StringVar(&o.hookAddress)
	app.Flag("webhook.web-config.file", "exporter-toolkit web config (TLS, basic auth) for the webhook listener alone.").Default("").StringVar(&o.hookWebConfig)
	app.Flag("webhook.path", "Path of the webhook endpoint on the webhook listener.").Default("/webhook").StringVar(&o.hookPath)
	app.Flag("web.max-requests", "Maximum number of parallel scrape requests. Use 0 to disable.").Default(strconv.Itoa(collector.DefaultMaxRequests)).IntVar(&o.webMaxReqs)
	app.Flag("web.max-connections", "Maximum number of connections each metrics listening address holds open at once; more wait until one closes.").Default("512").IntVar(&o.webMaxConns)
	app.Flag("webhook.max-connections", "Maximum number of connections the webhook listener holds open at once; more wait until one closes.").Default(strconv.Itoa(webhook.DefaultMaxConnections)).IntVar(&o.hookMaxConns)
	app.Flag("webhook.max-connections-per-client", "Maximum number of connections one client (an IPv4 address or an IPv6 /64) holds open on the webhook listener; more are closed at once. Behind a reverse proxy every connection comes from the proxy: set it to --webhook.max-connections there.").Default(strconv.Itoa(webhook.DefaultMaxConnectionsPerClient)).IntVar(&o.hookPerClient)
	app.Flag("storage.path", "Folder of the state snapshot, which keeps the cached answers, the schedule, discovered addresses and the webhook duplicate memory across restarts. Empty turns persistence off.").Default("data/").StringVar(&o.storagePath)
	app.Flag("storage.snapshot-interval", "How often at most the state snapshot is written (only when something changed), besides once at shutdown.").Default("1m").DurationVar(&o.snapInterval)
	app.Flag("log.level", "Only log messages with the given severity or above. One of: ["+strings.Join(logging.Levels, ", ")+"]").Default("info").EnumVar(&o.logLevel, logging.Levels...)
	app.Flag("log.format", "Output format of log messages. One of: ["+strings.Join(logging.Formats, ", ")+"]").Default("logfmt").EnumVar(&o.logFormat, logging.Formats...)
	app.Version(version.Print(name))
	app.HelpFlag.Short('h')
	app.UsageWriter(stdout)
	app.ErrorWriter(stderr)
	return app
}

func (o *options) webhookOn() bool { return o.hookAddress != "" }

// validate is every check of the flags that needs no file: a failure is a
// usage error (exit 2).
func (o *options) validate() error {
	switch {
	case o.webhookOn() && (!strings.HasPrefix(o.hookPath, "/") || o.hookPath == webhook.HealthyPath):
		return fmt.Errorf("--webhook.path %q must start with / and differ from %s", o.hookPath, webhook.HealthyPath)
	case o.webMaxReqs < 0:
		return fmt.Errorf("--web.max-requests must be 0 (no limit) or more, got %d", o.webMaxReqs)
	case o.webMaxConns < 1 || o.hookMaxConns < 1:
		return errors.New("--web.max-connections and --webhook.max-connections must be at least 1")
	case o.hookPerClient < 1 || o.hookPerClient > o.hookMaxConns:
		return fmt.Errorf("--webhook.max-connections-per-client must be between 1 and --webhook.max-connections (%d), got %d", o.hookMaxConns, o.hookPerClient)
	case o.snapInterval <= 0:
		return fmt.Errorf("--storage.snapshot-interval must be greater than 0, got %s", o.snapInterval)
	case o.shutdownDelay < 0:
		return fmt.Errorf("--web.shutdown-delay must be 0 or more, got %s", o.shutdownDelay)
	}
	if _, err := o.advertiseURL(); err != nil {
		return err
	}
	return o.validateAcknowledgements()
}

// validateAcknowledgements checks the acknowledgement page's flags.
func (o *options) validateAcknowledgements() error {
	if _, err := ackweb.ParseProxies(o.ackProxies); err != nil {
		return err
	}
	if _, err := externalURL(o.extURL); err != nil {
		return err
	}
	switch {
	case o.ackWrite && o.storagePath == "":
		return errors.New("--web.enable-acknowledgements needs --storage.path: an acknowledgement made on the page is kept in the state folder")
	case (o.ackUserHeader == "") != (o.ackProxies == ""):
		return errors.New("--web.acknowledgements.user-header and --web.acknowledgements.proxy go together: the header is trusted only from the proxy")
	}
	return nil
}

// webConfigs are the web config files the flags name, read by
// exporter-toolkit as it serves and checked with the config.
func (o *options) webConfigs() []config.WebConfig {
	wc := []config.WebConfig{{Flag: "--web.config.file", File: *o.webFlags.WebConfigFile}}
	if o.webhookOn() {
		wc = append(wc, config.WebConfig{Flag: "--webhook.web-config.file", File: o.hookWebConfig})
	}
	return wc
}

// run is the whole program; it returns when stop.drain ends (SIGINT or
// SIGTERM) and the drain is over, or when a listener fails, after
// shutting the listeners down gracefully.
func run(stop stopping, args []string, stdout, stderr io.Writer) int {
	o := &options{}
	if _, err := newApp(o, stdout, stderr).Parse(args); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if o.configCheck {
		// The start's own load path: file, token, secrets, HTTP client and
		// web configs; and the address files, which a start would read on
		// its own.
		return checkConfig(stop.drain, o.configFile, config.LoadOptions{Webhook: o.webhookOn(), WebConfigs: o.webConfigs(), AddressFiles: true}, stdout, stderr)
	}

	logger, slogger := logging.New(stderr, o.logLevel, o.logFormat)
	level.Info(logger).Log("msg", "Starting "+name, "version", version.Info(), "build_context", version.BuildContext())
	p, err := start(o, logger, slogger)
	if err != nil {
		level.Error(logger).Log("msg", "Cannot start", "config", o.configFile, "err", err)
		return 1
	}
	return p.serve(stop)
}

// program is a started exporter with its listeners, not serving yet.
type program struct {
	o       *options
	logger  log.Logger
	slogger *slog.Logger
	exp     *exporter.Exporter
	ready   *readiness
	servers []*listener
	// runCtx is the exporter's, reloads' and listeners' context: it ends
	// after the drain, when the listeners close.
	runCtx  context.Context
	stopRun context.CancelFunc
}

// start loads the config and the state and builds the listeners.
func start(o *options, logger log.Logger, slogger *slog.Logger) (*program, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	listenMetrics, err := listen.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("listener metrics: %w", err)
	}
	advertise, _ := o.advertiseURL() // checked in validate
	exp, err := exporter.New(exporter.Options{
		ConfigFile:       o.configFile,
		UserAgent:        name + "/" + version.Version,
		Logger:           logger,
		Registerer:       reg,
		Webhook:          o.webhookOn(),
		StoragePath:      o.storagePath,
		SnapshotInterval: o.snapInterval,
		WebConfigs:       o.webConfigs(),
		MaxRequests:      o.webMaxReqs,
		AdvertiseURL:     advertise,
	})
	if err != nil {
		return nil, err
	}
	p := &program{o: o, logger: logger, slogger: slogger, exp: exp,
		ready: &readiness{Check: exp.Ready},
	}
	p.runCtx, p.stopRun = context.WithCancel(context.Background())
	ack, err := newAcknowledgements(o, exp, reg, logger)
	if err == nil {
		err = p.buildListeners(exp.MetricsHandler(reg), ack, listenMetrics)
	}
	if err != nil {
		p.stopRun()
		if cerr := exp.Close(); cerr != nil {
			level.Warn(logger).Log("msg", "Closing the state folder failed", "err", cerr)
		}
		return nil, err
	}
	return p, nil
}

// buildListeners makes the metrics listener and, with the receiver on,
// the webhook listener. While the program drains, both answer with
// Connection: close, so that a keep-alive sender reconnects, through its
// load balancer, to a replica that stays.
func (p *program) buildListeners(metrics, ack http.Handler, listenMetrics *listen.Metrics) error {
	o := p.o
	mux, err := newMux(untilShutdown{p.exp, p.runCtx}, metrics, o.telemetryPath, p.ready, ack)
	if err != nil {
		return fmt.Errorf("landing page: %w", err)
	}
	webServer := newWebServer(p.ready.closingWhileDraining(mux))
	webLimit := listen.Limit{Name: "web", MaxConnections: o.webMaxConns, Metrics: listenMetrics}
	p.servers = []*listener{{
		name:   "web",
		server: webServer,
		serve:  func(l *slog.Logger) error { return listen.Serve(webServer, o.webFlags, webLimit, l) },
	}}
	if !o.webhookOn() {
		return nil
	}
	hookServer := webhook.NewServer(p.exp.WebhookHandler(), o.hookPath)
	hookServer.Handler = p.ready.closingWhileDraining(hookServer.Handler)
	hookLimit := listen.Limit{Name: "webhook", MaxConnections: o.hookMaxConns, PerClient: o.hookPerClient, Metrics: listenMetrics}
	p.servers = append(p.servers, &listener{
		name:   "webhook",
		server: hookServer,
		serve: func(l *slog.Logger) error {
			return webhook.Serve(hookServer, o.hookAddress, o.hookWebConfig, hookLimit, l)
		},
	})
	return nil
}

// serve runs the exporter and the listeners until stop or a listener's
// failure, drains, shuts down, and returns the exit code.
func (p *program) serve(stop stopping) int {
	defer p.stopRun()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.exp.Run(p.runCtx)
	}()
	// Subscribed before the listeners say they listen: a SIGHUP sent once
	// they do is never lost (nor, when the parent ignores SIGHUP, ignored).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go reloadOnSIGHUP(p.runCtx, hup, p.exp, p.logger)

	failed := make(chan error, len(p.servers))
	for _, l := range p.servers {
		go func() {
			if err := l.run(p.slogger); err != nil {
				failed <- err
			}
		}()
	}
	code := p.drain(stop, failed)
	p.stopRun()
	p.shutdown()
	wg.Wait()
	// The last snapshot, once nothing can change the state any more.
	if err := p.exp.Close(); err != nil {
		level.Error(p.logger).Log("msg", "State snapshot at shutdown failed; the previous one stays", "err", err)
		code = 1
	}
	return code
}

// drain waits for stop.drain or a listener's failure. After a signal the
// program reads not ready at once and both listeners keep answering for
// --web.shutdown-delay, the time the load balancer (a Service's
// endpoints, an ingress, a cloud load balancer's health check) takes to
// stop sending here; stop.now or a failure cuts it short. It returns the
// exit code so far.
func (p *program) drain(stop stopping, failed <-chan error) int {
	select {
	case <-stop.drain.Done():
	case err := <-failed:
		level.Error(p.logger).Log("msg", "Listener failed", "err", err)
		return 1
	}
	p.ready.startDraining()
	if p.o.shutdownDelay <= 0 {
		level.Info(p.logger).Log("msg", "Shutting down")
		return 0
	}
	level.Info(p.logger).Log("msg", "Shutting down: not ready, serving until the delay ends (a second signal ends it now)", "delay", p.o.shutdownDelay)
	delay := time.NewTimer(p.o.shutdownDelay)
	defer delay.Stop()
	select {
	case <-delay.C:
		level.Info(p.logger).Log("msg", "Shutdown delay over; closing the listeners")
	case <-stop.now.Done():
		level.Info(p.logger).Log("msg", "Second signal: closing the listeners now")
	case err := <-failed:
		level.Error(p.logger).Log("msg", "Listener failed", "err", err)
		return 1
	}
	return 0
}

// shutdown closes the listeners gracefully: requests under way get
// listenerShutdownTimeout to finish.
func (p *program) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), listenerShutdownTimeout)
	defer cancel()
	for _, l := range p.servers {
		if err := l.server.Shutdown(ctx); err != nil {
			level.Warn(p.logger).Log("msg", "Listener did not shut down cleanly", "listener", l.name, "err", err)
		}
	}
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

func reloadOnSIGHUP(ctx context.Context, hup chan os.Signal, exp *exporter.Exporter, logger log.Logger) {
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
