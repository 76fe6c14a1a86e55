// SPDX-License-Identifier: Apache-2.0

// Package scheduler owns an API key's request budget: one Scheduler per
// account, each over its own account's addresses. One goroutine (Run)
// decides which request goes next and when, so however many addresses,
// scrapes, reloads and alerts there are, the exporter never sends more than
// the configured requests per minute and never bursts into a 429. The
// addresses and their places in the schedule live in the watchlist; the
// budget and intervals come from the config bundle in force.
package scheduler

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Client is the part of the API client the scheduler uses.
type Client interface {
	Me(ctx context.Context) (api.Me, breach.RateLimit, error)
	Breaches(ctx context.Context, email string) (api.Breaches, breach.RateLimit, error)
}

// idleCloser is a Client whose keep-alive connections can be closed: the
// client a reload replaces leaves none behind.
type idleCloser interface{ CloseIdleConnections() }

// Options are the scheduler's collaborators.
type Options struct {
	Watchlist *watchlist.List // the addresses to read, and where answers go
	Config    *config.Current // the budget and intervals in force
	// Account names the account whose key this scheduler spends, on that
	// account's addresses only. Run returns once a reload removed it.
	Account string
	// Connect returns the API client for the account in a config bundle.
	// It is called once per bundle, when the first request under it goes
	// out.
	Connect func(*config.Bundle, *config.AccountBundle) Client
	Clock   clockwork.Clock                       // nil = real clock
	Logger  log.Logger                            // nil = nop
	Jitter  func(max time.Duration) time.Duration // random in [0,max); nil = math/rand/v2
	// Webhook is true when the receiver is on: a plan the service delivers
	// no webhooks to is then worth a warning.
	Webhook bool
	// SharedStore is the store the replicas share; nil alone. With it, the
	// key's budget and the claims on each request are the store's.
	SharedStore SharedStore
	// Outcomes receives what the requests taught; nil: the watchlist.
	Outcomes Outcomes
}

const (
	// resetJitter spreads the first request after a window reset over the
	// first second, so several exporters sharing a key do not all fire at
	// the boundary.
	resetJitter = time.Second
	// maxPause bounds a wait for a window reset. The service's window is one
	// minute, so a reset further out is a broken header or a clock behind the
	// server's; trusting it could stop polling for good, while a capped wait
	// costs at most one more 429.
	maxPause = time.Minute + time.Second

	addressBackoffMin = 30 * time.Second
	authBackoffMin    = 10 * time.Second
	authBackoffMax    = 5 * time.Minute
	// tokenPoll is how often the token is read again during a 401 pause,
	// so a token rotated in its file goes out within seconds rather than
	// at the end of a pause of up to authBackoffMax. Reading a small file
	// every two seconds costs nothing, and only while the API is unusable.
	tokenPoll = 2 * time.Second
)

// job is one request: /me, or /breaches for one address.
type job struct {
	me     bool
	urgent bool   // asked for by Refresh or a discovery
	key    string // breach.Key of the address
}

// settings are the parts of a config bundle that pace requests.
type settings struct {
	rpm        int           // our budget, 1..60
	interval   time.Duration // an address is re-read at most this often (unless Refresh asks sooner)
	meInterval time.Duration
	timeout    time.Duration // api.timeout: the longest one request may take
}

func settingsOf(s *config.Bundle, a *config.AccountBundle) settings {
	return settings{
		rpm:        a.Config.API.RequestsPerMinute,
		interval:   time.Duration(s.Config.Refresh.Interval),
		meInterval: time.Duration(s.Config.Refresh.MeInterval),
		timeout:    time.Duration(s.Config.API.Timeout),
	}
}

// Scheduler paces all API requests of one key. Only Run calls the Client;
// the watchlist tells it when the addresses changed.
type Scheduler struct {
	watchlist *watchlist.List
	config    *config.Current
	account   string
	changed   <-chan struct{} // the watchlist's Changed of the account, asked before each plan
	connect   func(*config.Bundle, *config.AccountBundle) Client
	clock     clockwork.Clock
	logger    log.Logger
	jitter    func(time.Duration) time.Duration
	webhook   bool
	shared    SharedStore
	out       Outcomes

	// Owned by Run: no other goroutine touches these.
	client      Client
	clientFor   *config.Bundle // the bundle the client was built for
	lastSend    time.Time
	lastMe      time.Time // zero: /me not sent yet
	pauseUntil  time.Time // after a 429 or Remaining 0
	authUntil   time.Time // after a 401; ends early when the token changes
	rejected    string    // the token that got the 401, compared during the pause
	authBackoff time.Duration
	retry       *job   // sent first once the pause is over
	lastUrgent  bool   // the last request was a Refresh; see next
	warnedPlan  string // the plan last checked for webhook delivery
	cycleFor    cycleInputs
	overBudget  bool // the addresses did not fit in the interval when last computed
	// due indexes the account's addresses by when each may go next,
	// including the ones another replica held when this one tried to
	// claim them (replicas only).
	due *dueIndex
	// pruned: the store's ready times were pruned of the addresses this
	// replica does not watch, once after the start, tried last at the
	// index's pruneTried-th read of every address (replicas only).
	pruned     bool
	pruneTried int
	// readyIn is, during a claimed request, when it is ready again for
	// any replica; its outcome may shorten it (replicas only).
	readyIn *time.Duration
}

// New returns a scheduler; call Run to start polling.
func New(o Options) *Scheduler {
	s := &Scheduler{
		watchlist: o.Watchlist,
		config:    o.Config,
		account:   o.Account,
		connect:   o.Connect,
		clock:     o.Clock,
		logger:    o.Logger,
		jitter:    o.Jitter,
		webhook:   o.Webhook,
		shared:    o.SharedStore,
		out:       o.Outcomes,
		due:       newDueIndex(),
	}
	if s.out == nil {
		s.out = local{o.Watchlist}
	}
	if s.clock == nil {
		s.clock = clockwork.NewRealClock()
	}
	if s.logger == nil {
		s.logger = log.NewNopLogger()
	}
	s.logger = log.With(s.logger, "account", s.account)
	if s.jitter == nil {
		s.jitter = randomJitter
	}
	return s
}

func randomJitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return rand.N(limit)
}

// clientOf returns the client for bundle, building it on the first request
// under a new bundle and closing the idle connections of the one before.
func (s *Scheduler) clientOf(bundle *config.Bundle, acct *config.AccountBundle) Client {
	if bundle != s.clientFor {
		s.closeClient()
		s.client, s.clientFor = s.connect(bundle, acct), bundle
	}
	return s.client
}

// closeClient closes the idle connections of the client in use.
func (s *Scheduler) closeClient() {
	if old, ok := s.client.(idleCloser); ok {
		old.CloseIdleConnections()
	}
}

// spacing is the least time between two sends. Any 60-second window, however
// it aligns with the server's fixed minute, then holds at most rpm sends.
// Rounded up: rounding down would let rpm+1 sends fit in one minute.
func spacing(rpm int) time.Duration {
	return (time.Minute + time.Duration(rpm) - 1) / time.Duration(rpm)
}

// meEvery is how often /me goes out. It is held to at most every other send,
// so a tiny me_interval cannot starve the addresses.
func meEvery(st settings) time.Duration {
	return max(st.meInterval, 2*spacing(st.rpm))
}

// cycleInputs are what the round length depends on.
type cycleInputs struct {
	bundle    *config.Bundle
	addresses int
}

// updateCycle recomputes the round length when the config bundle or the
// number of addresses changed, and warns when the addresses do not fit in
// the interval: once per bundle (so every reload says it again), and
// once more whenever they stop fitting.
func (s *Scheduler) updateCycle(bundle *config.Bundle, acct *config.AccountBundle) {
	in := cycleInputs{bundle: bundle, addresses: s.watchlist.AccountLen(s.account)}
	if in == s.cycleFor {
		return
	}
	reloaded := in.bundle != s.cycleFor.bundle
	s.cycleFor = in
	st := settingsOf(bundle, acct)

	perMinute := float64(st.rpm) - float64(time.Minute)/float64(meEvery(st))
	readAll := time.Duration(float64(in.addresses) / perMinute * float64(time.Minute))
	cycle := max(st.interval, readAll)
	s.watchlist.SetCycle(s.account, cycle)

	over := readAll > st.interval
	if over && (reloaded || !s.overBudget) {
		level.Warn(s.logger).Log("msg", "The request budget cannot read every address within refresh.interval; each address is re-read once per cycle instead",
			"addresses", in.addresses, "requests_per_minute", st.rpm,
			"interval", st.interval, "cycle", cycle.Round(time.Second))
	}
	s.overBudget = over
}
