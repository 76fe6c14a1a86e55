// SPDX-License-Identifier: Apache-2.0

// Package cluster is what the replicas of one deployment share through
// Redis or Valkey (the config's optional store section): one request
// budget per API key, claims on the work, and one ordered stream of the
// events that change the state every replica serves. Without a store none
// of it runs, and one replica needs no setup.
//
// The package only moves bytes and keeps the store's clock: what an event
// means is the exporter's (internal/exporter).
package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Options configure a Client.
type Options struct {
	URL       string // redis:// or rediss:// (TLS)
	Password  string // from store.password_file; when set, it replaces the URL's
	KeyPrefix string // every key starts with it and a colon
	// Replica names this process in claims and in the events it publishes.
	Replica    string
	Registerer prometheus.Registerer
	Logger     log.Logger
}

// Event is one entry of the shared stream, in the store's order.
type Event struct {
	ID     string // the stream's ID: ordered, unique
	Kind   string
	Origin string // Options.Replica of the publisher
	Data   []byte
}

// The operations breach_exporter_store_errors_total counts, each
// pre-created at 0 so that a rate over them exists from the start.
var operations = []string{"reserve", "pause", "claim", "release", "publish", "read", "follow", "checkpoint", "ping"}

const (
	defaultPrefix = "breach_exporter"
	// The client's bounds on one command: a store that does not answer in
	// them is down for this replica, which then works alone until it does.
	dialTimeout = 2 * time.Second
	ioTimeout   = 2 * time.Second
	// Run's pings: how often, and how long one may take.
	pingEvery   = 5 * time.Second
	pingTimeout = 2 * time.Second
)

// Client is the client of the shared store. Every method is safe for
// concurrent use and bounded in time: none blocks past its context or the
// client's timeouts.
type Client struct {
	rdb     *redis.Client
	prefix  string
	replica string
	logger  log.Logger

	// Tests of this package shorten them.
	pingEvery   time.Duration
	followBlock time.Duration

	up      prometheus.Gauge
	errs    *prometheus.CounterVec
	missed  prometheus.Counter
	upNow   atomic.Bool
	stateMu sync.Mutex
	state   int // stateUnknown until the first outcome, then stateUp or stateDown

	// gapAt is where the last gap in the stream was reported from, so
	// that a reader retrying from there reports it once.
	gapMu sync.Mutex
	gapAt string
}

const (
	stateUnknown = iota
	stateUp
	stateDown
)

// Open checks the options and builds the client. It does not need the
// store to be up: Run connects, and reconnects, with backoff.
func Open(o Options) (*Client, error) {
	ro, err := clientOptions(o)
	if err != nil {
		return nil, err
	}
	if o.Replica == "" {
		// Claims and Release tell replicas apart by it.
		return nil, errors.New("store: the replica needs a name")
	}
	logger := o.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	s := &Client{
		prefix:      o.KeyPrefix,
		replica:     o.Replica,
		logger:      logger,
		pingEvery:   pingEvery,
		followBlock: 2 * time.Second,
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_store_up",
			Help: "1 when the shared store (Redis or Valkey) took the last command or health check, 0 when it did not answer, refused it, or has not answered yet.",
		}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_store_errors_total",
			Help: "Commands to the shared store that failed, by operation.",
		}, []string{"operation"}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_events_missed_total",
			Help: "Times the shared store's event stream had been trimmed past events this replica had not read yet.",
		}),
	}
	if s.prefix == "" {
		s.prefix = defaultPrefix
	}
	for _, op := range operations {
		s.errs.WithLabelValues(op)
	}
	if o.Registerer != nil {
		collectors := []prometheus.Collector{s.up, s.errs, s.missed}
		for i, c := range collectors {
			if err := o.Registerer.Register(c); err != nil {
				// All or none: a second Open on the registry may then work.
				for _, done := range collectors[:i] {
					o.Registerer.Unregister(done)
				}
				return nil, fmt.Errorf("store: registering its metrics: %w", err)
			}
		}
	}
	quietClient.Do(func() { redis.SetLogger(quiet{}) })
	s.rdb = redis.NewClient(ro)
	return s, nil
}

// go-redis logs its connection failures to stderr on its own; here they
// are the errors the methods return, counted and logged once per outage
// (setUp), in the exporter's log stream.
var quietClient sync.Once

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// clientOptions turns the URL into the client's options without any
// network I/O. Its errors never quote the URL: it may hold a password.
func clientOptions(o Options) (*redis.Options, error) {
	if o.URL == "" {
		return nil, errors.New("store: the url is empty")
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return nil, errors.New("store: the url does not parse as a URL (redis://host:port or rediss://host:port)")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("store: the url's scheme must be redis or rediss (TLS), not %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("store: the url names no host")
	}
	ro, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("store: the url: %w", err)
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	// The URL's query may set any of these; what it leaves unset gets the
	// bounds every method's promise rests on.
	if ro.DialTimeout == 0 {
		ro.DialTimeout = dialTimeout
	}
	if ro.ReadTimeout == 0 {
		ro.ReadTimeout = ioTimeout
	}
	if ro.WriteTimeout == 0 {
		ro.WriteTimeout = ioTimeout
	}
	if ro.DialerRetries == 0 {
		// go-redis dials up to 5 times per command by default: each dial
		// is bounded, their sum would not be.
		ro.DialerRetries = 1
	}
	if ro.PoolTimeout == 0 {
		ro.PoolTimeout = ioTimeout + time.Second
	}
	if ro.MaxRetries == 0 {
		// One retry covers a pooled connection the store closed (a
		// restart); more would stretch the time a command may take.
		ro.MaxRetries = 1
	}
	if ro.Protocol == 0 {
		// RESP2: every Redis and Valkey speaks it, and nothing here needs
		// RESP3's push messages.
		ro.Protocol = 2
	}
	// A caller's deadline bounds the socket too, not only the wait for a
	// pooled connection.
	ro.ContextTimeoutEnabled = true
	ro.DisableIdentity = true
	return ro, nil
}

// Run keeps breach_exporter_store_up true while the store takes writes,
// until ctx ends. A PING would answer on a store that refuses every write
// (out of memory, read-only, a failing RDB save), which does none of the
// work: so the check writes a short-lived key of this replica's.
func (s *Client) Run(ctx context.Context) {
	t := time.NewTicker(s.pingEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := s.rdb.Set(pctx, s.key("alive", s.replica), "1", 3*s.pingEvery).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.outcome(ctx, "ping", err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Up reports whether the store answered the last command.
func (s *Client) Up() bool { return s.upNow.Load() }

// Close closes the client.
func (s *Client) Close() error { return s.rdb.Close() }

// outcome records what one command said about the store and returns err:
// an answer means the store is up; no answer, or an error reply, counts as
// an error of op and means it is down, also when the caller's deadline
// passed first. None of the commands is refused in normal operation: a
// store that refuses them (out of memory, read-only) does none of the
// work. A caller that gave up (its context cancelled) learns nothing about
// the store.
func (s *Client) outcome(ctx context.Context, op string, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		s.setUp(true, nil)
		return err
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return err
	}
	s.failed(op, err)
	return err
}

func (s *Client) failed(op string, err error) {
	s.errs.WithLabelValues(op).Inc()
	s.setUp(false, err)
}

// setUp sets the gauge and logs each change of state once.
func (s *Client) setUp(up bool, err error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	next := stateDown
	if up {
		next = stateUp
	}
	s.upNow.Store(up)
	if next == s.state {
		return
	}
	s.state = next
	if up {
		s.up.Set(1)
		level.Info(s.logger).Log("msg", "The shared store answers")
		return
	}
	s.up.Set(0)
	level.Warn(s.logger).Log("msg", "The shared store does not answer; this replica works on its own until it does", "err", err)
}

// key names one of the deployment's keys in the store.
func (s *Client) key(parts ...string) string {
	return s.prefix + ":" + strings.Join(parts, ":")
}

// micros is d in whole microseconds, the store-side unit of time, never
// below zero.
func micros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// millis is d in whole milliseconds, at least 1: the store's expiries.
func millis(d time.Duration) int64 {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		return 1
	}
	return ms
}

// Reserve takes the next request slot of the key's budget, spacing apart
// from the slot before it on the store's clock, and returns how long to
// wait before sending (0: now). A slot is never handed out twice, and a
// pause (Pause) pushes every later slot past its end.
func (s *Client) Reserve(ctx context.Context, key string, spacing time.Duration) (time.Duration, error) {
	wait, err := reserveScript.Run(ctx, s.rdb, []string{s.key("budget", key)}, micros(spacing)).Int64()
	if err = s.outcome(ctx, "reserve", err); err != nil {
		return 0, fmt.Errorf("store: reserve: %w", err)
	}
	return time.Duration(max(wait, 0)) * time.Microsecond, nil
}

// Pause holds every replica's requests on key for d from now on the
// store's clock (a 429's reset); a shorter pause never shortens a longer one.
func (s *Client) Pause(ctx context.Context, key string, d time.Duration) error {
	err := pauseScript.Run(ctx, s.rdb, []string{s.key("budget", key)}, micros(d)).Err()
	if err = s.outcome(ctx, "pause", err); err != nil {
		return fmt.Errorf("store: pause: %w", err)
	}
	return nil
}

// Claim takes item of scope for lease: true when no other replica holds
// it and, unless urgent, its ready time (Release) has passed.
func (s *Client) Claim(ctx context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error) {
	u := "0"
	if urgent {
		u = "1"
	}
	got, err := claimScript.Run(ctx, s.rdb,
		[]string{s.key("ready", scope), s.key("claim", scope, item)},
		item, s.replica, millis(lease), u).Int64()
	if err = s.outcome(ctx, "claim", err); err != nil {
		return false, fmt.Errorf("store: claim: %w", err)
	}
	return got == 1, nil
}

// Release gives a claim of this replica's back and makes item ready again
// in readyIn on the store's clock.
func (s *Client) Release(ctx context.Context, scope, item string, readyIn time.Duration) error {
	err := releaseScript.Run(ctx, s.rdb,
		[]string{s.key("ready", scope), s.key("claim", scope, item)},
		item, s.replica, micros(readyIn)).Err()
	if err = s.outcome(ctx, "release", err); err != nil {
		return fmt.Errorf("store: release: %w", err)
	}
	return nil
}

// parseID splits a stream ID into its milliseconds and sequence number.
func parseID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}
