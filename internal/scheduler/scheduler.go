// Package scheduler owns the API key's request budget. One goroutine (Run)
// decides which request goes next and when, so however many addresses,
// scrapes, reloads and alerts there are, the exporter never sends more than
// the configured requests per minute and never bursts into a 429.
package scheduler

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/state"
)

// Client is the part of the API client the scheduler uses.
type Client interface {
	Me(ctx context.Context) (api.Me, api.RateLimit, error)
	Breaches(ctx context.Context, email string) (api.Breaches, api.RateLimit, error)
}

// Settings are the parts of the config the scheduler follows; Update swaps
// them while Run keeps going.
type Settings struct {
	Addresses         []string      // configured emails
	RequestsPerMinute int           // our budget, 1..60
	Interval          time.Duration // an address is re-read at most this often (unless Refresh asks sooner)
	MeInterval        time.Duration
}

// Options are the scheduler's collaborators.
type Options struct {
	Client Client
	Store  *state.Store
	Clock  clockwork.Clock                       // nil = real clock
	Logger log.Logger                            // nil = nop
	Jitter func(max time.Duration) time.Duration // random in [0,max); nil = math/rand/v2
	// AddressLabel is how an address appears in logs, so a setup that hides
	// emails in labels (alias or hash) does not leak them into logs; nil logs
	// the email.
	AddressLabel func(email string) string
}

const (
	maxRequestsPerMinute = 60 // the service's limit per key (spec section 8)

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
)

// address is one polled address's place in the schedule.
type address struct {
	email       string
	order       uint64    // insertion order, so never-read addresses go in config order
	lastAttempt time.Time // zero: never read
	failures    int       // consecutive failed reads; drives the per-address backoff
	urgent      uint64    // Refresh ticket, 0 when no Refresh is pending; lower goes first
}

// job is one request: /me, or /breaches for one address.
type job struct {
	me     bool
	urgent bool   // asked for by Refresh or Add
	key    string // state.Key of the address
	email  string // as configured, sent to the API
}

// Scheduler paces all API requests of one key. Refresh, Add, Update and
// Cycle are safe from any goroutine; only Run calls the Client.
type Scheduler struct {
	client Client
	store  *state.Store
	clock  clockwork.Clock
	logger log.Logger
	jitter func(time.Duration) time.Duration
	label  func(email string) string

	wake chan struct{} // tells Run to re-plan; buffered so senders never block
	// idle, when set (tests only), is told each time Run starts waiting and
	// until when, so a test can advance a fake clock exactly to that instant.
	idle chan<- time.Time

	mu         sync.Mutex
	settings   Settings
	addresses  map[string]*address // by state.Key
	discovered map[string]bool     // keys that came through Add, not the config
	tickets    uint64              // source of address.order and address.urgent
	cycle      time.Duration
	overBudget bool // the addresses did not fit in Interval when last computed

	// Owned by Run: no other goroutine touches these.
	lastSend    time.Time
	lastMe      time.Time // zero: /me not sent yet
	pauseUntil  time.Time // after a 429, Remaining 0 or a 401
	authBackoff time.Duration
	retry       *job // sent first once the pause is over
	lastUrgent  bool // the last request was a Refresh; see next
}

// New returns a scheduler for s; call Run to start polling.
func New(o Options, s Settings) *Scheduler {
	sc := &Scheduler{
		client:     o.Client,
		store:      o.Store,
		clock:      o.Clock,
		logger:     o.Logger,
		jitter:     o.Jitter,
		label:      o.AddressLabel,
		wake:       make(chan struct{}, 1),
		addresses:  map[string]*address{},
		discovered: map[string]bool{},
	}
	if sc.clock == nil {
		sc.clock = clockwork.NewRealClock()
	}
	if sc.logger == nil {
		sc.logger = log.NewNopLogger()
	}
	if sc.jitter == nil {
		sc.jitter = randomJitter
	}
	if sc.label == nil {
		sc.label = func(email string) string { return email }
	}
	sc.apply(s)
	return sc
}

func randomJitter(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	return rand.N(limit)
}

// Update applies a reloaded config at once. Addresses kept by the new config
// keep their place in the schedule, so a reload does not trigger a burst of
// re-reads. Addresses discovered through Add are kept across reloads (they
// are only lost on restart): the alert that revealed them is not repeated, and
// dropping them would silently stop watching an address the service alerted on.
func (s *Scheduler) Update(st Settings) {
	s.apply(st)
	s.poke()
}

func (s *Scheduler) apply(st Settings) {
	// The config validates the range; clamping keeps a zero from dividing by
	// zero and a typo from exceeding the service's limit.
	st.RequestsPerMinute = min(max(st.RequestsPerMinute, 1), maxRequestsPerMinute)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings = st
	next := make(map[string]*address, len(st.Addresses)+len(s.discovered))
	emails := make([]string, 0, len(st.Addresses)+len(s.discovered))
	for _, e := range st.Addresses {
		k := state.Key(e)
		if k == "" || next[k] != nil {
			continue
		}
		a := s.addresses[k]
		if a == nil {
			s.tickets++
			a = &address{order: s.tickets}
		}
		a.email = e
		next[k] = a
		emails = append(emails, e)
		delete(s.discovered, k) // now configured: a later reload may remove it
	}
	for k := range s.discovered {
		next[k] = s.addresses[k]
		emails = append(emails, next[k].email)
	}
	s.addresses = next
	// Under s.mu so that concurrent Updates leave the store and the schedule
	// holding the same addresses.
	s.store.SetAddresses(emails)
	s.updateCycle(true)
}

// Refresh moves a tracked address (matched case-insensitively) to the head of
// the queue, ignoring Interval and any error backoff; it still waits for the
// budget. Repeated calls before the request goes out make one request. It
// reports whether the address is tracked.
func (s *Scheduler) Refresh(email string) bool {
	s.mu.Lock()
	a, ok := s.addresses[state.Key(email)]
	queued := ok && a.urgent == 0
	if queued {
		s.tickets++
		a.urgent = s.tickets
	}
	s.mu.Unlock()
	// An address already waiting at the head needs no new plan: Run would
	// only scan every address again for nothing, once per repeated alert.
	if queued {
		s.poke()
	}
	return ok
}

// Add starts polling an address the config does not list (discovered through
// a webhook alert), reading it first. It reports false when the address is
// already tracked.
func (s *Scheduler) Add(email string) bool {
	k := state.Key(email)
	if k == "" {
		return false
	}
	s.mu.Lock()
	if _, ok := s.addresses[k]; ok {
		s.mu.Unlock()
		return false
	}
	s.tickets++
	s.addresses[k] = &address{email: email, order: s.tickets, urgent: s.tickets}
	s.discovered[k] = true
	s.store.Add(email)
	s.updateCycle(false)
	s.mu.Unlock()
	s.poke()
	return true
}

// Cycle is how long one full round of all addresses is expected to take at
// the current budget: Interval, or longer when the budget cannot read every
// address within it.
func (s *Scheduler) Cycle() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cycle
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is already pending; Run re-plans from scratch anyway
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
func meEvery(st Settings) time.Duration {
	return max(st.MeInterval, 2*spacing(st.RequestsPerMinute))
}

// updateCycle recomputes the round length and warns, once per settings
// change, when the addresses do not fit in Interval. Called with s.mu held.
func (s *Scheduler) updateCycle(settingsChanged bool) {
	st := s.settings
	perMinute := float64(st.RequestsPerMinute) - float64(time.Minute)/float64(meEvery(st))
	readAll := time.Duration(float64(len(s.addresses)) / perMinute * float64(time.Minute))
	s.cycle = max(st.Interval, readAll)
	s.store.SetCycle(s.cycle)

	over := readAll > st.Interval
	if over && (settingsChanged || !s.overBudget) {
		level.Warn(s.logger).Log("msg", "The request budget cannot read every address within refresh.interval; each address is re-read once per cycle instead",
			"addresses", len(s.addresses), "requests_per_minute", st.RequestsPerMinute,
			"interval", st.Interval, "cycle", s.cycle.Round(time.Second))
	}
	s.overBudget = over
}
