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
	"errors"
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
)

var plans = []string{"free", "personal", "pro", "business"}

// Plans returns the plans in the spec's order.
func Plans() []string { return slices.Clone(plans) }

// TokenPrefix starts every API key the service issues.
const TokenPrefix = "svc_ak_"

// DefaultRateLimit is the spec's budget: requests per fixed minute per key.
const DefaultRateLimit = 60

// DefaultDashboardBaseURL is used when Options.DashboardBaseURL is empty.
const DefaultDashboardBaseURL = "https://breach-monitor.example/dashboard"

const defaultDeliveryTimeout = 10 * time.Second

// Options configure a Simulator. Zero values get the documented defaults.
type Options struct {
	Token     string    // the one accepted bearer token, svc_ak_...
	Plan      string    // free|personal|pro|business
	Addresses []Address // nil: DefaultAddresses()
	RateLimit int       // requests per fixed minute per token; 0: DefaultRateLimit
	Seed      int64     // fixes the initial state and every sweep's changes
	Clock     clockwork.Clock
	// Deliveries happen only when WebhookURL is set and the plan is pro or
	// business, as the spec restricts them.
	WebhookURL    string
	WebhookSecret []byte
	HTTPClient    *http.Client // for deliveries; nil: a client with a 10s timeout
	Logger        log.Logger
	// DashboardBaseURL is the dashboard root that alerts link into, as
	// <base>/addresses/<email>.
	DashboardBaseURL string
}

// Simulator is safe for concurrent use.
type Simulator struct {
	clock         clockwork.Clock
	logger        log.Logger
	window        *fixedWindow
	webhookURL    string
	webhookSecret []byte
	httpClient    *http.Client
	dashboardBase string
	pending       *inflight

	// ctlMu guards what the admin controls change (admin.go): the accepted
	// token, /me (its plan decides deliveries) and the injected faults.
	ctlMu  sync.Mutex
	token  string
	me     Me
	faults faults

	mu       sync.Mutex // guards accounts' feeds and gen
	accounts []*account
	byEmail  map[string]*account // lower-cased email
	gen      generator

	statsMu sync.Mutex
	stats   Stats
}

// account is one address on the account; feeds (parallel to sources) exist
// only for verified addresses, since only they are swept.
type account struct {
	Address
	feeds []*feed
	// pinned accounts were set up through the admin controls: sweeps leave
	// them alone, so a test decides every change of their state.
	pinned bool
}

func (a *account) breaches() Breaches {
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
	if !strings.HasPrefix(o.Token, TokenPrefix) || len(o.Token) == len(TokenPrefix) || strings.ContainsAny(o.Token, " \t\r\n") {
		return nil, fmt.Errorf("token must have the form %s<token> without spaces", TokenPrefix)
	}
	if !slices.Contains(plans, o.Plan) {
		return nil, fmt.Errorf("plan %q is not one of %s", o.Plan, strings.Join(plans, ", "))
	}
	if o.Addresses == nil {
		o.Addresses = DefaultAddresses()
	}
	if err := validateAddresses(o.Addresses); err != nil {
		return nil, err
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
		if len(o.WebhookSecret) == 0 {
			return nil, errors.New("webhook URL set without a webhook secret")
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

	tokenHash := sha256.Sum256([]byte(o.Token))
	s := &Simulator{
		token:         o.Token,
		me:            Me{ID: "usr_" + hex.EncodeToString(tokenHash[:6]), Email: ownerEmail(o.Addresses), Plan: o.Plan},
		clock:         o.Clock,
		logger:        o.Logger,
		window:        &fixedWindow{limit: o.RateLimit},
		webhookURL:    o.WebhookURL,
		webhookSecret: slices.Clone(o.WebhookSecret),
		httpClient:    o.HTTPClient,
		dashboardBase: strings.TrimSuffix(o.DashboardBaseURL, "/"),
		pending:       newInflight(),
		byEmail:       make(map[string]*account, len(o.Addresses)),
		gen:           generator{rnd: rand.New(rand.NewSource(o.Seed))},
		stats:         newStats(),
	}
	s.seedAccounts(o.Addresses)
	if o.WebhookURL != "" && !s.delivering() {
		level.Info(s.logger).Log("msg", "webhook configured but not delivered: the plan has no webhooks", "plan", o.Plan)
	}
	return s, nil
}

// ownerEmail is the account's own address for /me: the first verified one,
// as an owner must have verified the address they signed up with.
func ownerEmail(addrs []Address) string {
	for _, a := range addrs {
		if a.Verified {
			return a.Email
		}
	}
	return addrs[0].Email
}

func (s *Simulator) seedAccounts(addrs []Address) {
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	verified := 0
	for _, addr := range addrs {
		a := &account{Address: addr}
		if addr.Verified {
			for _, src := range sources {
				a.feeds = append(a.feeds, newFeed(src))
			}
			// Every third verified address starts unscanned so first scans
			// show up early in a demo.
			if verified%3 != 2 {
				s.seedFindings(a.feeds, now)
			}
			verified++
		}
		s.accounts = append(s.accounts, a)
		s.byEmail[strings.ToLower(addr.Email)] = a
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

// lookup finds an address case-insensitively, as mail providers treat them.
// Callers hold s.mu.
func (s *Simulator) lookup(email string) (*account, bool) {
	a, ok := s.byEmail[strings.ToLower(email)]
	return a, ok
}

// State returns what GET /breaches would return for email now; false when
// the address is unknown or unverified.
func (s *Simulator) State(email string) (Breaches, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.lookup(email)
	if !ok || !a.Verified {
		return Breaches{}, false
	}
	return a.breaches(), true
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
	var alerts []Alert
	for _, a := range s.accounts {
		if a.pinned {
			continue
		}
		for _, f := range a.feeds {
			before := f.clone()
			switch {
			case !f.scanned:
				if s.gen.rnd.Float64() >= firstScanChance {
					continue
				}
				s.gen.firstScan(f)
			case s.gen.rnd.Float64() < changeChance:
				s.gen.change(f)
			}
			f.lastScanned = now
			if f.differs(before) {
				f.lastChanged = now
				alerts = append(alerts, s.newAlert(a.Email, before, f, now))
			}
		}
	}
	s.mu.Unlock()

	s.countProduced(alerts)
	if s.delivering() && len(alerts) > 0 {
		s.deliverAll(ctx, alerts)
	}
	return alerts
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
