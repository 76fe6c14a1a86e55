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
	"crypto/tls"
	"errors"
	"fmt"
	"net"
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

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

// Options configure a Client.
type Options struct {
	// URL is one server: redis:// or rediss:// (TLS). URL and Servers
	// exclude each other.
	URL string
	// Servers are host:port addresses: a cluster's nodes, or with
	// MasterName the Sentinels.
	Servers    []string
	MasterName string
	Username   string // the ACL user; when set, it replaces the URL's
	Password   string // from store.password_file; when set, it replaces the URL's
	// SentinelPassword is the Sentinels' password.
	SentinelPassword string
	// TLS, when set, makes every connection TLS (the Sentinels' too).
	TLS       *tls.Config
	KeyPrefix string // every key starts with it and a colon
	// Replica names this process in claims and in the events it publishes.
	Replica string
	// Deployment is the deployment's identity (config.StoreConfig): the
	// first replica writes it into the store, and a replica whose
	// identity differs refuses the store (Join).
	Deployment string
	// Keys sign what this replica writes and verify what it reads
	// (sign.go); without them it writes unsigned entries, as the
	// previous release did.
	Keys Keys
	// AcceptUnsigned keeps this replica reading unsigned entries after
	// the deployment is signed only (latch.go): a rollback to the
	// previous release.
	AcceptUnsigned bool
	Registerer     prometheus.Registerer
	Logger         log.Logger
}

// Event is one entry of the shared stream, in the store's order.
type Event struct {
	ID     string // the stream's ID: ordered, unique
	Kind   string
	Origin string // Options.Replica of the publisher
	Data   []byte
	// Oversized is the entry's size in the store when it is over
	// MaxEventBytes: then the store did not send it (Kind, Origin and Data
	// are empty), and the reader skips and counts it.
	Oversized int64
	// Rewound marks the first event read after the stream was found to
	// end before the reader's place (deleted, emptied, rolled back): its
	// ID may come before the last one applied, and is new all the same.
	Rewound bool
	// Prev is the newest ID the stream had given when the entry was added
	// (luaStream's prev); empty in an entry of the release before it, or
	// when it is not a stream ID before the entry's.
	Prev string
}

// The operations breach_exporter_store_errors_total counts, each
// pre-created at 0 so that a rate over them exists from the start.
var operations = []string{"reserve", "pause", "claim", "release", "publish", "read", "follow", "checkpoint", opServe, opHealth}

// opServe is the serving replica's lease and the stream ID last served
// (serving.go).
const opServe = "serve"

// opHealth is the health check's operation: its write of the alive key is
// the one proof that writes work.
const opHealth = "ping"

const (
	defaultPrefix = "breach_exporter"
	// The client's bounds on one command: a store that does not answer in
	// them is down for this replica, which then works alone until it does.
	dialTimeout = 2 * time.Second
	ioTimeout   = 2 * time.Second
	// Run's pings: how often, and how long one may take.
	pingEvery   = 5 * time.Second
	pingTimeout = 2 * time.Second
	// logEvery paces the lines of the store going down: a store that
	// comes and goes logs a pair of lines a minute, with the count of
	// those left out.
	logEvery = time.Minute
)

// StopBound is the most a store that hangs holds up a replica's stop:
// from Interrupt on, every command, in flight then or sent later by
// whatever still runs (an API outcome's publish, a claim's release, the
// last checkpoint, the serving lease's release), ends by one deadline
// StopBound after it, all together: not each after a timeout of its own,
// one after another. A store that answers takes milliseconds for them.
const StopBound = 2 * time.Second

// errStopped refuses a command sent after the stop's deadline: it is not
// sent, and says nothing about the store.
var errStopped = errors.New("the stop's time for the store is over")

// Client is the client of the shared store. Every method is safe for
// concurrent use and bounded in time: none blocks past its context or the
// client's timeouts.
type Client struct {
	rdb redis.UniversalClient
	// prefix starts every key: Options.KeyPrefix, in braces on a cluster
	// (key); name is Options.KeyPrefix as configured, for messages.
	prefix  string
	name    string
	auth    bool // a user or a password is set
	replica string
	logger  log.Logger

	// Tests of this package shorten them.
	pingEvery    time.Duration
	pollEvery    time.Duration // Follow's poll while entries come (read.go)
	pollIdle     time.Duration // ... and the longest it grows to while none do
	recheckEvery time.Duration // Follow's check of its place while idle

	up      prometheus.Gauge
	errs    *prometheus.CounterVec
	missed  prometheus.Counter
	resets  *prometheus.CounterVec
	foreign *prometheus.CounterVec
	// unverified counts what was skipped for its signature (sign.go);
	// signedGauge is 1 once the deployment is signed only (latch.go).
	unverified  *prometheus.CounterVec
	signedGauge prometheus.Gauge
	stateMu     sync.Mutex
	state       int // stateUnknown until the first outcome, then stateUp or stateDown
	// reads and writes: whether the last command of each kind worked.
	// The store is up when both do: one that answers reads and refuses
	// writes does none of the work.
	reads, writes bool
	// refused: a write was refused (out of memory, read-only) since the
	// last health check that worked.
	refused    bool
	logs       *ratelog.Limiter
	downLogged bool // the last change to down was logged: its end is too

	// conns are the open connections, closed at once by Interrupt;
	// stopAt is the stop's deadline (StopBound after Interrupt), in Unix
	// nanoseconds, 0 until then.
	conns  connSet
	stopAt atomic.Int64
	// identity is Options.Deployment; joined tells whether the store
	// holds it (joinUnknown until the first check).
	identity string
	joined   atomic.Int32
	// holder is the other deployment's identity the store held when this
	// replica was locked out, for the errors of the commands it refuses.
	holder atomic.Pointer[string]
	// foreignAt is the ID of the last checkpoint of another deployment
	// counted, so that one is counted once (foreignCheckpoint).
	foreignMu sync.Mutex
	foreignAt string
	// storeReplicas is how many replicas the store has, from the last
	// health check: with any, a publish waits for one to have it.
	storeReplicas atomic.Int32
	waitRefused   atomic.Bool
	// added wakes Follow when this replica added to the stream: it reads
	// its own events back at once, not at its next poll.
	added          chan struct{}
	evictionWarned atomic.Bool
	formatsWarned  atomic.Bool
	// clockOffset is the store's clock minus this replica's, in ms, as
	// last read: what is far ahead is judged on the store's clock.
	clockOffset atomic.Int64

	// keys sign and verify, with macs (sign.go); latched and latchAfter
	// are latch.go's; formats is the SCAN for the alive keys (formats.go).
	keys           Keys
	macs           sync.Map // string(secret) -> *sync.Pool of its HMACs
	acceptUnsigned bool
	latched        atomic.Bool
	formats        formatsPass
	latchAfter     time.Duration

	// budgets are the budget keys this replica used lately (Reserve,
	// Pause), so that it can tell a budget the store lost.
	budgetMu sync.Mutex
	budgets  map[string]budgetUse

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
		name:           o.KeyPrefix,
		auth:           ro.Username != "" || ro.Password != "",
		replica:        o.Replica,
		logger:         logger,
		pingEvery:      pingEvery,
		pollEvery:      pollEvery,
		pollIdle:       pollIdle,
		recheckEvery:   2 * time.Second,
		added:          make(chan struct{}, 1),
		identity:       o.Deployment,
		keys:           o.Keys,
		latchAfter:     latchAfter,
		formats:        newFormatsPass(),
		acceptUnsigned: o.AcceptUnsigned,
		logs:           ratelog.New(logEvery, nil),
		up: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "breach_exporter_store_up",
			Help: "1 when reads and writes on the shared store (Redis or Valkey) work: the last write and the last read it was sent both succeeded; 0 when it did not answer, refused one, or has not answered yet.",
		}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_store_errors_total",
			Help: "Commands to the shared store that failed, by operation.",
		}, []string{"operation"}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_events_missed_total",
			Help: "Times the shared store's event stream had been trimmed past events this replica had not read yet.",
		}),
		resets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_store_stream_resets_total",
			Help: "Times this replica found stream IDs that would stall reading, by reason: ahead (entries or a checkpoint far ahead of the store's clock, removed or ignored), recreated (the stream ends before this replica's place in it: deleted, emptied or rolled back; reading goes on from its end).",
		}, []string{"reason"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_store_foreign_total",
			Help: "What this replica refused as another deployment's under its key prefix, by what: write (a write the store refused because it holds another deployment's identity; the replica then uses the store no more), event (a stream entry of another deployment, not applied), checkpoint (a checkpoint of another deployment, not loaded).",
		}, []string{"what"}),
	}
	s.unverified, s.signedGauge = signingMetrics()
	for _, reason := range []string{resetAhead, resetRecreated} {
		s.resets.WithLabelValues(reason)
	}
	for _, what := range []string{foreignWrite, foreignEvent, foreignCheckpoint} {
		s.foreign.WithLabelValues(what)
	}
	if s.name == "" {
		s.name = defaultPrefix
	}
	for _, op := range operations {
		s.errs.WithLabelValues(op)
	}
	if o.Registerer != nil {
		collectors := []prometheus.Collector{s.up, s.errs, s.missed, s.resets, s.foreign, s.unverified, s.signedGauge}
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
	s.connect(ro)
	return s, nil
}

// connect makes the client of ro's topology and the keys' prefix.
func (s *Client) connect(ro *redis.UniversalOptions) {
	// Every connection is known, so that Interrupt ends the commands in
	// flight at once: go-redis watches a deadline, not a cancellation.
	dial := redis.NewDialer(&redis.Options{DialTimeout: ro.DialTimeout, TLSConfig: ro.TLSConfig})
	ro.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return s.conns.add(c), nil
	}
	s.rdb = redis.NewUniversalClient(ro)
	s.rdb.AddHook(gate{s})
	s.prefix = s.name
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		// One hash tag for every key of the deployment: one slot, so that
		// a script or a command may name several (docs/replicas.md).
		s.prefix = "{" + s.name + "}"
	}
}

// go-redis logs its connection failures to stderr on its own; here they
// are the errors the methods return, counted and logged once per outage
// (setUp), in the exporter's log stream.
var quietClient sync.Once

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// clientOptions turns the options into the client's without any network
// I/O: one server (URL), a cluster (Servers) or Sentinels (Servers and
// MasterName). Its errors never quote the URL: it may hold a password.
func clientOptions(o Options) (*redis.UniversalOptions, error) {
	var ro *redis.UniversalOptions
	switch {
	case o.URL != "" && len(o.Servers) > 0:
		return nil, errors.New("store: url and servers exclude each other")
	case len(o.Servers) > 0:
		// Servers without a master name are a cluster, also when only one
		// of its nodes is listed.
		ro = &redis.UniversalOptions{Addrs: o.Servers, MasterName: o.MasterName, IsClusterMode: o.MasterName == ""}
	default:
		simple, err := parseURL(o.URL)
		if err != nil {
			return nil, err
		}
		ro = universal(simple)
	}
	if o.Username != "" {
		ro.Username = o.Username
	}
	if o.Password != "" {
		ro.Password = o.Password
	}
	ro.SentinelPassword = o.SentinelPassword
	if o.TLS != nil {
		ro.TLSConfig = o.TLS.Clone()
	}
	bound(ro)
	return ro, nil
}

// parseURL reads the one server's URL.
func parseURL(raw string) (*redis.Options, error) {
	if raw == "" {
		return nil, errors.New("store: the url is empty")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("store: the url does not parse as a URL (redis://host:port or rediss://host:port)")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("store: the url's scheme must be redis or rediss (TLS), not %q", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("store: the url names no host")
	}
	ro, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("store: the url: %w", err)
	}
	return ro, nil
}

// universal is the one server's options as the universal client's, with
// what the URL's query may set (redis.ParseURL).
func universal(o *redis.Options) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Addrs: []string{o.Addr}, DB: o.DB, ClientName: o.ClientName, Protocol: o.Protocol,
		Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff, MaxRetryBackoff: o.MaxRetryBackoff,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolFIFO: o.PoolFIFO, PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout,
		MinIdleConns: o.MinIdleConns, MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns,
		ConnMaxIdleTime: o.ConnMaxIdleTime, ConnMaxLifetime: o.ConnMaxLifetime,
	}
}

// bound gives what the options leave unset the bounds every method's
// promise rests on.
func bound(ro *redis.UniversalOptions) {
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
}

// shard is the client of the one server that holds the deployment's keys:
// the client itself on one server or through Sentinels (the primary), the
// primary of the keys' hash slot on a cluster. WAIT and INFO go there: on
// a cluster client they would go to any node.
func (s *Client) shard(ctx context.Context) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, s.key("events"))
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("store: a client of type %T", s.rdb)
}

// Run keeps breach_exporter_store_up true while the store takes writes
// and reads, until ctx ends. A PING would answer on a store that refuses
// every write (out of memory, read-only, a failing RDB save), which does
// none of the work: so the check writes a short-lived key of this
// replica's, and checks the deployment's identity (Join) in the same step.
// It also paces the SCAN for the replicas' formats (formats.go).
func (s *Client) Run(ctx context.Context) {
	t := time.NewTicker(s.pingEvery)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.paceFormats(ctx) })
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := s.check(pctx)
		if err == nil {
			s.countReplicas(pctx)
			s.watchFormats(pctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Up reports whether reads and writes on the store worked last, as
// breach_exporter_store_up says: false before the first answer.
func (s *Client) Up() bool {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	return s.state == stateUp
}

// Interrupt starts the stop: every command in flight ends now, and every
// later one by the stop's deadline, StopBound from now (stopping). A
// second call keeps the first deadline.
func (s *Client) Interrupt() {
	s.stopAt.CompareAndSwap(0, time.Now().Add(StopBound).UnixNano())
	s.conns.interrupt()
}

// stopping bounds ctx by the stop's deadline once Interrupt was called,
// so that the commands a stop sends share it; past it, it returns
// errStopped. The deadline bounds the wait for a connection, its dial
// and its reads and writes (ContextTimeoutEnabled).
func (s *Client) stopping(ctx context.Context) (context.Context, context.CancelFunc, error) {
	at := s.stopAt.Load()
	if at == 0 {
		return ctx, func() {}, nil
	}
	deadline := time.Unix(0, at)
	if !time.Now().Before(deadline) {
		return ctx, func() {}, errStopped
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	return ctx, cancel, nil
}

// Close closes the client. It never waits for the store: a command in
// flight ends at once.
func (s *Client) Close() error {
	s.conns.interrupt()
	return s.rdb.Close()
}

// outcome records what a write said about the store and returns err: an
// answer means reads and writes work; an error reply (out of memory,
// read-only) that writes do not; no answer, that neither does, also when
// the caller's deadline passed first. Each failure counts as an error of
// op. None of the commands is refused in normal operation. A caller that
// gave up (its context cancelled) learns nothing about the store.
func (s *Client) outcome(ctx context.Context, op string, err error) error {
	return s.record(ctx, op, err, true)
}

// readOutcome is outcome for a command that only reads: its success says
// nothing about writes.
func (s *Client) readOutcome(ctx context.Context, op string, err error) error {
	return s.record(ctx, op, err, false)
}

func (s *Client) record(ctx context.Context, op string, err error, write bool) error {
	if err == nil || errors.Is(err, redis.Nil) {
		s.setUp(true, write, nil, op == opHealth)
		return err
	}
	err = s.lockOut(err)
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, errNotJoined) || errors.Is(err, errStopped) {
		return err
	}
	s.errs.WithLabelValues(op).Inc()
	s.setUp(false, write, err, op == opHealth)
	return err
}

// setUp records one command's outcome, sets the gauge and logs each
// change of state, at most a pair of lines per logEvery.
func (s *Client) setUp(ok, write bool, err error, health bool) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	s.note(ok, write, err, health)
	up := s.reads && s.writes
	next := stateDown
	if up {
		next = stateUp
	}
	if next == s.state || (!up && s.state == stateUnknown && err == nil) {
		return // no change, or a read before the first write
	}
	first := s.state == stateUnknown
	s.state = next
	if up {
		s.up.Set(1)
		if first || s.downLogged {
			level.Info(s.logger).Log("msg", "The shared store answers")
		}
		return
	}
	s.up.Set(0)
	suppressed, log := s.logs.Allow("down")
	s.downLogged = log
	if log {
		level.Warn(s.logger).Log("msg", "The shared store does not answer, or refuses writes; this replica works on its own until it takes them", "err", err, ratelog.SuppressedKey, suppressed)
	}
}

// note records whether reads and writes work after one command.
//
// Once the store refused a write, only the health check proves that
// writes work again: it always writes, while a script may answer without
// writing (a claim not due, a slot not taken, a duplicate), also on a
// store that refuses writes, and store_up would flicker to 1 until the
// next refused write. After a store that did not answer at all, any
// write that succeeds proves it.
func (s *Client) note(ok, write bool, err error, health bool) {
	var reply redis.Error
	switch {
	case ok:
		s.reads = true
		if write && (health || !s.refused) {
			s.writes, s.refused = true, false
		}
	case errors.As(err, &reply):
		// It answered, refusing this kind of command.
		s.writes = s.writes && !write
		s.refused = s.refused || write
		s.reads = s.reads && write
	default:
		s.reads, s.writes = false, false
	}
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
//
// A slot more than horizon away is not taken (ok false): ask again after
// wait - horizon. So every request is sent within horizon of its
// reservation, and a budget the store lost (a restart, a flush, a
// failover to a replica that had not got it) starts again horizon plus
// spacing after the first replica that had used it notices: by then every
// slot handed out before, and every pause of at most horizon, is over, so
// a fixed minute never holds the old slots and the new ones together.
func (s *Client) Reserve(ctx context.Context, key string, spacing, horizon time.Duration) (wait time.Duration, ok bool, err error) {
	lost, _ := s.budgetUsed(key)
	restart := horizon + spacing
	got, err := s.run(ctx, reserveScript, s.rdb, []string{s.key("budget", key)},
		micros(spacing), micros(horizon), lost, micros(restart)).Int64Slice()
	if err == nil && len(got) != 2 {
		err = fmt.Errorf("the script replied %d numbers, not 2", len(got))
	}
	if err = s.outcome(ctx, "reserve", err); err != nil {
		return 0, false, fmt.Errorf("store: reserve: %w", err)
	}
	s.useBudget(key, restart)
	return time.Duration(max(got[1], 0)) * time.Microsecond, got[0] == 1, nil
}

// Pause holds every replica's requests on key for d from now on the
// store's clock (a 429's reset); a shorter pause never shortens a longer one.
func (s *Client) Pause(ctx context.Context, key string, d time.Duration) error {
	lost, restart := s.budgetUsed(key)
	err := s.run(ctx, pauseScript, s.rdb, []string{s.key("budget", key)}, micros(d), lost, micros(restart)).Err()
	if err = s.outcome(ctx, "pause", err); err != nil {
		return fmt.Errorf("store: pause: %w", err)
	}
	s.useBudget(key, restart)
	return nil
}

// budgetKeep is how long a budget key outlives its last slot in the store.
// A replica that used the key less than half of it ago (the margin is for
// clocks that run at different rates) knows the key must still be there.
const budgetKeep = 10 * time.Minute

// budgetUse is what this replica remembers of one budget key.
type budgetUse struct {
	last    time.Time     // the store last took a Reserve or Pause on it
	restart time.Duration // the last Reserve's horizon plus spacing
}

// maxBudgets bounds the budget keys remembered: one per account and
// token, and a token rotated within budgetKeep adds one.
const maxBudgets = 1024

// budgetUsed says ("1") whether this replica used key recently enough
// that its absence from the store means the store lost it, and the
// restart delay the last Reserve asked for.
func (s *Client) budgetUsed(key string) (string, time.Duration) {
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	u, ok := s.budgets[key]
	if !ok || time.Since(u.last) > budgetKeep/2 {
		return "0", 0
	}
	return "1", u.restart
}

// useBudget remembers that the store took a command on key just now.
func (s *Client) useBudget(key string, restart time.Duration) {
	s.budgetMu.Lock()
	defer s.budgetMu.Unlock()
	if s.budgets == nil {
		s.budgets = map[string]budgetUse{}
	}
	if _, ok := s.budgets[key]; !ok && len(s.budgets) >= maxBudgets {
		for k, u := range s.budgets {
			if time.Since(u.last) > budgetKeep/2 {
				delete(s.budgets, k)
			}
		}
		if len(s.budgets) >= maxBudgets {
			return // every one in use: this key is not remembered
		}
	}
	s.budgets[key] = budgetUse{last: time.Now(), restart: max(restart, s.budgets[key].restart)}
}

// Claim takes item of scope for lease: true when no other replica holds
// it and, unless urgent, its ready time (Release) has passed.
func (s *Client) Claim(ctx context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error) {
	u := "0"
	if urgent {
		u = "1"
	}
	got, err := s.run(ctx, claimScript, s.rdb,
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
	err := s.run(ctx, releaseScript, s.rdb,
		[]string{s.key("ready", scope), s.key("claim", scope, item)},
		item, s.replica, micros(readyIn)).Err()
	if err = s.outcome(ctx, "release", err); err != nil {
		return fmt.Errorf("store: release: %w", err)
	}
	return nil
}

// forgetBatch bounds the items one HDEL names.
const forgetBatch = 1000

// Forget removes items from scope's ready times (Release): addresses this
// replica no longer watches, so that the hash does not keep every address
// ever read. Errors count as release errors: the same hash.
func (s *Client) Forget(ctx context.Context, scope string, items []string) error {
	for len(items) > 0 {
		n := min(len(items), forgetBatch)
		args := make([]any, n)
		for i, item := range items[:n] {
			args[i] = item
		}
		err := s.run(ctx, forgetScript, s.rdb, []string{s.key("ready", scope)}, args...).Err()
		if err = s.outcome(ctx, "release", err); err != nil {
			return fmt.Errorf("store: forget: %w", err)
		}
		items = items[n:]
	}
	return nil
}

// Prune removes from scope's ready times every item keep rejects: what no
// replica of the current config watches, removed while none was running.
// It reads the hash a page at a time (HSCAN), so a large one does not
// block the store.
func (s *Client) Prune(ctx context.Context, scope string, keep func(item string) bool) error {
	cursor := "0"
	for {
		items, next, err := s.scanReady(ctx, scope, cursor)
		if err != nil {
			return fmt.Errorf("store: prune: %w", err)
		}
		var gone []string
		for _, item := range items {
			if !keep(item) {
				gone = append(gone, item)
			}
		}
		if err := s.Forget(ctx, scope, gone); err != nil {
			return err
		}
		if cursor = next; cursor == "0" {
			return nil
		}
	}
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
