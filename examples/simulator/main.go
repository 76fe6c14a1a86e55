// SPDX-License-Identifier: Apache-2.0

// Command simulator serves a simulated breach monitoring service on
// loopback: the JSON API with its rate limit, periodic sweeps that change
// the scan state, and signed webhook alerts. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// demoToken is public on purpose: the simulator holds no real data.
const demoToken = sim.TokenPrefix + "demo_0123456789abcdef"

const shutdownTimeout = 5 * time.Second

type config struct {
	listenAddress     string
	token             string
	tokenSetByUser    bool
	tokenFile         string
	plan              string
	addressesFile     string
	accountsFile      string
	rateLimit         int
	sweepInterval     time.Duration
	holdExposed       bool
	seed              int64
	webhookURL        string
	webhookSecretFile string
	adminAddress      string
	logLevel          string
}

func main() {
	var c config
	app := kingpin.New("simulator", "Simulated breach monitoring service (API, sweeps and signed webhooks) for demos and tests.")
	app.HelpFlag.Short('h')
	app.Flag("web.listen-address", "Address to serve the API and /openapi.json on.").Default("127.0.0.1:8099").StringVar(&c.listenAddress)
	app.Flag("api.token", "The accepted API key (svc_ak_...).").Default(demoToken).IsSetByUser(&c.tokenSetByUser).StringVar(&c.token)
	app.Flag("api.token-file", "File holding the accepted API key; overrides the demo default of --api.token.").StringVar(&c.tokenFile)
	app.Flag("plan", "Plan reported by /me; webhooks are delivered only for pro and business.").Default("pro").EnumVar(&c.plan, sim.Plans()...)
	app.Flag("addresses.file", "YAML list of {email, verified}; default: a built-in demo set of 8 addresses, one unverified.").StringVar(&c.addressesFile)
	app.Flag("accounts.file", "YAML list of further accounts (keys) to serve, each {token or token_file, plan, addresses or addresses_file, webhook_secret_file}; the flags above are the first account. See README.md.").StringVar(&c.accountsFile)
	app.Flag("rate-limit", "Requests per fixed (Unix-minute aligned) minute per token.").Default("60").IntVar(&c.rateLimit)
	app.Flag("sweep.interval", "Time between sweeps.").Default("30s").DurationVar(&c.sweepInterval)
	app.Flag("sweep.hold-exposed", "Sweeps leave a feed alone once it exposes the password, so an acknowledged exposure stays closed until POST /admin/news changes it (the demo's pace).").BoolVar(&c.holdExposed)
	app.Flag("seed", "Seed of the initial state and of every sweep's changes.").Default("1").Int64Var(&c.seed)
	app.Flag("webhook.url", "URL to POST alert.created webhooks to; empty: no deliveries.").StringVar(&c.webhookURL)
	app.Flag("webhook.secret-file", "File holding the webhook HMAC secret (trailing whitespace is trimmed); required with --webhook.url.").StringVar(&c.webhookSecretFile)
	app.Flag("admin.listen-address", "Loopback address for the test controls (faults, token, plan, addresses, feeds; see README.md); empty: off.").Default("").StringVar(&c.adminAddress)
	app.Flag("log.level", "Only log messages with the given severity or above.").Default("info").EnumVar(&c.logLevel, "debug", "info", "warn", "error")
	kingpin.MustParse(app.Parse(os.Args[1:]))

	logger := log.NewLogfmtLogger(log.NewSyncWriter(os.Stderr))
	logger = level.NewFilter(logger, level.Allow(level.ParseDefault(c.logLevel, level.InfoValue())))
	logger = log.With(logger, "ts", log.DefaultTimestampUTC, "caller", log.DefaultCaller)

	if err := run(c, logger); err != nil {
		level.Error(logger).Log("msg", "simulator failed", "err", err)
		os.Exit(1)
	}
}

func run(c config, logger log.Logger) error {
	opts, err := options(c, logger)
	if err != nil {
		return err
	}
	if c.sweepInterval <= 0 {
		return fmt.Errorf("--sweep.interval must be positive, got %s", c.sweepInterval)
	}
	if err := loopbackOnly(c.adminAddress); err != nil {
		return err
	}
	listener, err := net.Listen("tcp", c.listenAddress)
	if err != nil {
		return err
	}
	var adminListener net.Listener
	if c.adminAddress != "" {
		if adminListener, err = net.Listen("tcp", c.adminAddress); err != nil {
			listener.Close()
			return err
		}
	}
	base := "http://" + listener.Addr().String()
	// The simulator has no dashboard; alert links point at where it would be.
	opts.DashboardBaseURL = base + "/dashboard"
	s, err := sim.New(opts)
	if err != nil {
		listener.Close()
		if adminListener != nil {
			adminListener.Close()
		}
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(listener) }()
	var admin *http.Server
	if adminListener != nil {
		admin = &http.Server{Handler: s.AdminHandler(ctx), ReadHeaderTimeout: 10 * time.Second}
		go func() { served <- admin.Serve(adminListener) }()
		level.Info(logger).Log("msg", "test controls listening", "admin", "http://"+adminListener.Addr().String()+"/admin/")
	}
	sweeps := make(chan struct{})
	go func() {
		defer close(sweeps)
		s.Run(ctx, c.sweepInterval)
	}()

	level.Info(logger).Log("msg", "simulator listening", "api", base+sim.APIPrefix, "openapi", base+"/openapi.json",
		"plan", c.plan, "accounts", 1+len(opts.MoreAccounts), "sweep_interval", c.sweepInterval, "seed", c.seed, "webhook_url", c.webhookURL)
	if opts.Token == demoToken {
		// Printed because it is public; a token read from a file is not.
		level.Info(logger).Log("msg", "using the demo API token", "token", demoToken)
	}

	select {
	case <-ctx.Done():
		level.Info(logger).Log("msg", "shutting down")
	case err := <-served:
		stop()
		<-sweeps
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if admin != nil {
		if adminErr := admin.Shutdown(shutdownCtx); err == nil {
			err = adminErr
		}
	}
	<-sweeps
	// Run's context is done, so pending retries give up at once.
	s.Flush(shutdownCtx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// loopbackOnly refuses to serve the test controls beyond this machine:
// anyone who reaches them can change the token and every feed.
func loopbackOnly(address string) error {
	if address == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("--admin.listen-address: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--admin.listen-address %q: the test controls listen on loopback only (127.0.0.1, ::1 or localhost)", address)
	}
	return nil
}

func options(c config, logger log.Logger) (opts sim.Options, err error) {
	opts = sim.Options{
		Token:      c.token,
		Plan:       c.plan,
		RateLimit:  c.rateLimit,
		Seed:       c.seed,
		WebhookURL: c.webhookURL,
		Logger:     logger,
	}
	opts.HoldExposed = c.holdExposed
	if c.rateLimit <= 0 {
		return opts, fmt.Errorf("--rate-limit must be positive, got %d", c.rateLimit)
	}
	if c.tokenFile != "" {
		if c.tokenSetByUser {
			return opts, errors.New("--api.token and --api.token-file are mutually exclusive")
		}
		if opts.Token, err = readToken("--api.token-file", c.tokenFile); err != nil {
			return opts, err
		}
	}
	if c.addressesFile != "" {
		if opts.Addresses, err = readAddresses("--addresses.file", c.addressesFile); err != nil {
			return opts, err
		}
	}
	if c.accountsFile != "" {
		if opts.MoreAccounts, err = readAccounts(c.accountsFile); err != nil {
			return opts, err
		}
	}
	switch {
	case c.webhookURL != "" && c.webhookSecretFile == "":
		return opts, errors.New("--webhook.url needs --webhook.secret-file")
	case c.webhookSecretFile != "":
		if opts.WebhookSecret, err = readSecret("--webhook.secret-file", c.webhookSecretFile); err != nil {
			return opts, err
		}
	}
	return opts, nil
}
