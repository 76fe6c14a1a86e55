// SPDX-License-Identifier: Apache-2.0

// Package sim simulates the breach monitoring service as its spec describes
// it: the read-only JSON API with its per-key fixed rate-limit window, the
// per-feed scan state that sweeps change, and the signed alert.created
// webhooks. It runs in-process for tests and behind
// examples/simulator's main for demos.
package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Plans returns the plans in the spec's order.
func Plans() []string { return slices.Clone(breach.KnownPlans) }

// TokenPrefix starts every API key the service issues.
const TokenPrefix = "svc_ak_"

// DefaultRateLimit is the spec's budget: requests per fixed minute per key.
const DefaultRateLimit = 60

// DefaultDashboardBaseURL is used when Options.DashboardBaseURL is empty.
const DefaultDashboardBaseURL = "https://breach-monitor.example/dashboard"

const defaultDeliveryTimeout = 10 * time.Second

// Account is one API key's account: its key, its plan, its addresses and
// the secret its webhooks are signed with. Each key has its own fixed
// window (the spec's limit is per key).
type Account struct {
	Token     string    // the accepted bearer token, svc_ak_...
	Plan      string    // free|personal|pro|business
	Addresses []Address // nil: DefaultAddresses(); empty: none until a test sets them
	// WebhookSecret signs this account's alerts, as each account owner
	// generates their own; empty: Options.WebhookSecret.
	WebhookSecret []byte
}

// Options configure a Simulator. Zero values get the documented defaults.
type Options struct {
	// Token, Plan and Addresses are the first account: the one every test
	// control (SetToken, SetAddress, Answer, ...) acts on.
	Token     string
	Plan      string
	Addresses []Address
	// MoreAccounts are further keys, each with its own account, addresses
	// and window; sweeps change their addresses too.
	MoreAccounts []Account
	RateLimit    int   // requests per fixed minute per key; 0: DefaultRateLimit
	Seed         int64 // fixes the initial state and every sweep's changes
	Clock        clockwork.Clock
	// Deliveries, to the one WebhookURL for every account, happen only when
	// it is set and for an account whose plan is pro or business, as the
	// spec restricts them. WebhookSecret is the first account's secret and
	// that of every further one without its own.
	WebhookURL    string
	WebhookSecret []byte
	HTTPClient    *http.Client // for deliveries; nil: a client with a 10s timeout
	Logger        log.Logger
	// DashboardBaseURL is the dashboard root that alerts link into, as
	// <base>/addresses/<email>.
	DashboardBaseURL string
	// HoldExposed is the demo's pace (pace.go): sweeps leave a feed alone
	// once it exposes the password; only News changes it then.
	HoldExposed bool
}

// Simulator is safe for concurrent use.
type Simulator struct {
	clock         clockwork.Clock
	logger        log.Logger
	limit         int
	webhookURL    string
	httpClient    *http.Client
	dashboardBase string
	pending       *inflight
	holdExposed   bool

	// ctlMu guards what the test controls change (admin.go, hooks.go): each
	// key's accepted token and /me (the first account's plan decides
	// deliveries), the injected faults and the Go hooks.
	ctlMu  sync.Mutex
	keys   []*key
	faults faults
	hooks  hooks

	mu  sync.Mutex // guards every key's addresses, their feeds, and gen
	gen generator

	statsMu sync.Mutex
	stats   Stats
	log     requestLog
}

// key is one account as the API sees it: a token, /me, the fixed window
// and the addresses.
type key struct {
	token  string // ctlMu
	me     Me     // ctlMu
	secret []byte // signs the account's webhooks
	window *fixedWindow

	monitored []*monitored          // mu
	byEmail   map[string]*monitored // mu; by breach.Key
	others    *Answer               // mu; how addresses not listed are answered, nil: 404
}

// monitored is one address on an account; feeds (parallel to sources) exist
// only for verified addresses, since only they are swept.
type monitored struct {
	Address
	feeds []*feed
	// pinned addresses were set up through the test controls: sweeps leave
	// them alone, so a test decides every change of their state.
	pinned bool
	// exact, when set by Answer, is the address's answer verbatim.
	exact *Answer
}

func (a *monitored) breaches() Breaches {
	b := Breaches{Email: a.Email, Sources: []BreachSourceState{}}
	for _, f := range a.feeds {
		if f.scanned {
			b.Sources = append(b.Sources, f.state())
		}
	}
	return b
}

// New checks o and builds the simulator with its seeded initial state: about
// two thirds of the verified addresses already have findings in some feeds
// (so a client has data at once), the rest have not been scanned yet.
func New(o Options) (*Simulator, error) {
	accounts := append([]Account{{Token: o.Token, Plan: o.Plan, Addresses: o.Addresses}}, o.MoreAccounts...)
	for i := range accounts {
		if len(accounts[i].WebhookSecret) == 0 {
			accounts[i].WebhookSecret = o.WebhookSecret
		}
	}
	tokens := make(map[string]bool, len(accounts))
	for i := range accounts {
		a := &accounts[i]
		if err := checkToken(a.Token); err != nil {
			return nil, fmt.Errorf("account %d: %w", i+1, err)
		}
		if tokens[a.Token] {
			return nil, fmt.Errorf("account %d: its token is another account's", i+1)
		}
		tokens[a.Token] = true
		if !slices.Contains(breach.KnownPlans, a.Plan) {
			return nil, fmt.Errorf("account %d: plan %q is not one of %s", i+1, a.Plan, strings.Join(breach.KnownPlans, ", "))
		}
		if a.Addresses == nil {
			a.Addresses = DefaultAddresses()
		}
		if err := validateAddresses(a.Addresses); err != nil {
			return nil, fmt.Errorf("account %d: %w", i+1, err)
		}
	}
	switch {
	case o.RateLimit < 0:
		return nil, fmt.Errorf("rate limit %d is negative", o.RateLimit)
	case o.RateLimit == 0:
		o.RateLimit = DefaultRateLimit
	}
	if o.WebhookURL != "" {
		u, err := url.Parse(o.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webhook URL %q is not an absolute http(s) URL", o.WebhookURL)
		}
		for i, a := range accounts {
			if len(a.WebhookSecret) == 0 {
				return nil, fmt.Errorf("account %d: webhook URL set without a webhook secret", i+1)
			}
		}
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: defaultDeliveryTimeout}
	}
	if o.DashboardBaseURL == "" {
		o.DashboardBaseURL = DefaultDashboardBaseURL
	}

	s := &Simulator{
		clock:         o.Clock,
		logger:        o.Logger,
		limit:         o.RateLimit,
		webhookURL:    o.WebhookURL,
		httpClient:    o.HTTPClient,
		dashboardBase: strings.TrimSuffix(o.DashboardBaseURL, "/"),
		pending:       newInflight(),
		holdExposed:   o.HoldExposed,
		gen:           generator{rnd: rand.New(rand.NewSource(o.Seed))},
		stats:         newStats(),
	}
	for _, a := range accounts {
		tokenHash := sha256.Sum256([]byte(a.Token))
		k := &key{
			token:   a.Token,
			secret:  slices.Clone(a.WebhookSecret),
			me:      Me{ID: "usr_" + hex.EncodeToString(tokenHash[:6]), Email: ownerEmail(a.Addresses), Plan: a.Plan},
			window:  &fixedWindow{limit: o.RateLimit},
			byEmail: make(map[string]*monitored, len(a.Addresses)),
		}
		s.seedAccount(k, a.Addresses)
		s.keys = append(s.keys, k)
	}
	if o.WebhookURL != "" && !s.delivering(s.keys[0]) {
		level.Info(s.logger).Log("msg", "webhook configured but not delivered: the plan has no webhooks", "plan", o.Plan)
	}
	return s, nil
}

// checkToken holds a key to the spec's form svc_ak_<token>.
func checkToken(token string) error {
	if !strings.HasPrefix(token, TokenPrefix) || len(token) == len(TokenPrefix) || strings.ContainsAny(token, " \t\r\n") {
		return fmt.Errorf("token must have the form %s<token> without spaces", TokenPrefix)
	}
	return nil
}

// ownerEmail is the account's own address for /me: the first verified one,
// as an owner must have verified the address they signed up with.
func ownerEmail(addrs []Address) string {
	for _, a := range addrs {
		if a.Verified {
			return a.Email
		}
	}
	if len(addrs) > 0 {
		return addrs[0].Email
	}
	return "owner@example.com" // an account a test fills address by address
}

func (s *Simulator) seedAccount(k *key, addrs []Address) {
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	verified := 0
	for _, addr := range addrs {
		a := &monitored{Address: addr}
		if addr.Verified {
			for _, src := range breach.KnownSources {
				a.feeds = append(a.feeds, newFeed(src))
			}
			// Every third verified address starts unscanned so first scans
			// show up early in a demo.
			if verified%3 != 2 {
				s.seedFindings(a.feeds, now)
			}
			verified++
		}
		k.monitored = append(k.monitored, a)
		k.byEmail[breach.Key(addr.Email)] = a
	}
}

// seedFindings gives some of the feeds (at least one) findings from before
// the simulator started.
func (s *Simulator) seedFindings(feeds []*feed, now time.Time) {
	g := &s.gen
	for _, f := range feeds {
		if g.rnd.Float64() < 0.6 {
			g.firstScan(f)
		}
	}
	if !slices.ContainsFunc(feeds, func(f *feed) bool { return f.scanned }) {
		g.firstScan(feeds[g.rnd.Intn(len(feeds))])
	}
	for _, f := range feeds {
		if f.scanned {
			f.lastChanged = now.Add(-time.Duration(1+g.rnd.Intn(90*24)) * time.Hour)
			f.lastScanned = now.Add(-time.Duration(g.rnd.Intn(300_000)) * time.Millisecond)
		}
	}
}

// lookup finds an address of k case-insensitively, as mail providers treat
// them. Callers hold s.mu.
func (k *key) lookup(email string) (*monitored, bool) {
	a, ok := k.byEmail[breach.Key(email)]
	return a, ok
}

// State returns what GET /breaches would return for email on the first
// account now; false when the address is unknown or unverified.
func (s *Simulator) State(email string) (Breaches, bool) {
	status, body := s.answer(s.keys[0], email)
	if status != http.StatusOK {
		return Breaches{}, false
	}
	return body.(Breaches), true
}

// Sweep runs one sweep at the clock's current time and returns the alerts it
// produced: exactly one per address and feed whose visible state changed.
// Every scanned feed's last_scanned_at moves to the sweep time;
// last_changed_at moves only with a change. When deliveries are enabled the
// alerts are sent in the background, retrying until ctx ends; Flush waits
// for them.
func (s *Simulator) Sweep(ctx context.Context) []Alert {
	s.mu.Lock()
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	// Account by account, address by address: the order is part of the
	// seed's determinism.
	byKey := make([][]Alert, len(s.keys))
	for i, k := range s.keys {
		for _, a := range k.monitored {
			if !a.pinned {
				byKey[i] = append(byKey[i], s.sweepAddress(a, now)...)
			}
		}
	}
	s.mu.Unlock()

	var alerts []Alert
	for i, made := range byKey {
		s.publish(ctx, s.keys[i], made)
		alerts = append(alerts, made...)
	}
	return alerts
}

// sweepAddress changes a's feeds as one sweep at now does and returns the
// alerts of the changes. Callers hold s.mu.
func (s *Simulator) sweepAddress(a *monitored, now time.Time) []Alert {
	var alerts []Alert
	for _, f := range a.feeds {
		before := f.clone()
		switch {
		case !f.scanned:
			if s.gen.rnd.Float64() >= firstScanChance {
				continue
			}
			s.gen.firstScan(f)
		case s.holds(f):
		case s.gen.rnd.Float64() < changeChance:
			s.gen.change(f)
		}
		f.lastScanned = now
		if f.differs(before) {
			f.lastChanged = now
			alerts = append(alerts, s.newAlert(a.Email, before, f, now))
		}
	}
	return alerts
}

// publish counts an account's alerts as produced and, when its plan has
// deliveries, sends them signed with its secret in the background,
// retrying until ctx ends.
func (s *Simulator) publish(ctx context.Context, k *key, alerts []Alert) {
	s.countProduced(alerts)
	if s.delivering(k) && len(alerts) > 0 {
		s.deliverAll(ctx, k.secret, alerts)
	}
}

// Flush waits until every delivery started so far has succeeded or been
// given up, or until ctx ends. With a fake clock, retries wait on it.
func (s *Simulator) Flush(ctx context.Context) {
	s.pending.wait(ctx)
}

// Run sweeps every interval of the clock until ctx ends.
func (s *Simulator) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		level.Error(s.logger).Log("msg", "sweep interval must be positive; not sweeping", "interval", every)
		return
	}
	ticker := s.clock.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.Chan():
			alerts := s.Sweep(ctx)
			level.Info(s.logger).Log("msg", "sweep done", "alerts", len(alerts))
		}
	}
}
