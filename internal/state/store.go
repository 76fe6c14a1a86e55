// Package state holds what the poller last learned from the API, for the
// collector to read at scrape time. The poller writes, scrapes read; a scrape
// never waits on the API, only on this store's lock for a pointer copy.
package state

import (
	"strings"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/api"
)

// Address states, the values of breach_address_state's state label.
const (
	Pending      = "pending"       // configured, not answered yet
	Verified     = "verified"      // 200 from /breaches
	Unverified   = "unverified"    // 403 from /breaches
	NotMonitored = "not_monitored" // 404 from /breaches
)

// States lists every address state in exposition order.
var States = []string{Pending, Verified, Unverified, NotMonitored}

// Address is one address's cached view. Values handed out by the store are
// never modified afterwards, so readers may keep them without locking.
type Address struct {
	Email       string
	State       string
	Sources     []api.SourceState // only for Verified
	LastRefresh time.Time         // last 200/403/404; zero before the first
}

// Account is what /me last said.
type Account struct {
	Plan string // empty until /me has answered once
	Up   bool   // the last /me answered 200
}

// Snapshot is a consistent copy of the store for one scrape.
type Snapshot struct {
	Addresses    []*Address // in no particular order: the collector sorts by label
	Account      Account
	RateLimit    api.RateLimit
	HasRateLimit bool
	Cycle        time.Duration // one full round of all addresses at the budget
}

// Store is safe for concurrent use.
type Store struct {
	mu        sync.RWMutex
	addresses map[string]*Address // keyed by Key(email)
	account   Account
	rateLimit api.RateLimit
	hasRate   bool
	cycle     time.Duration
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{addresses: map[string]*Address{}}
}

// Key is the identity of an address: the service treats addresses
// case-insensitively, so Alice@ and alice@ are one address.
func Key(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// SetAddresses makes the store hold exactly these addresses: new ones start
// pending, kept ones keep their data, others disappear with all their series.
func (s *Store) SetAddresses(emails []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string]*Address, len(emails))
	for _, e := range emails {
		k := Key(e)
		if old, ok := s.addresses[k]; ok {
			next[k] = old
			continue
		}
		next[k] = &Address{Email: e, State: Pending}
	}
	s.addresses = next
}

// Add starts tracking one address (pending) unless it is already tracked.
// It reports whether the address was new.
func (s *Store) Add(email string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := Key(email)
	if _, ok := s.addresses[k]; ok {
		return false
	}
	s.addresses[k] = &Address{Email: email, State: Pending}
	return true
}

// SetBreaches records a 200 from /breaches. Unknown addresses are ignored: a
// reload may have removed the address while its request was in flight.
func (s *Store) SetBreaches(email string, b api.Breaches, at time.Time) {
	s.update(email, func(old *Address) *Address {
		return &Address{Email: old.Email, State: Verified, Sources: b.Sources, LastRefresh: at}
	})
}

// SetState records a 403 (Unverified) or 404 (NotMonitored): the address's
// feed series are dropped because the service no longer vouches for them.
func (s *Store) SetState(email, st string, at time.Time) {
	s.update(email, func(old *Address) *Address {
		return &Address{Email: old.Email, State: st, LastRefresh: at}
	})
}

func (s *Store) update(email string, f func(*Address) *Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := Key(email)
	if old, ok := s.addresses[k]; ok {
		s.addresses[k] = f(old)
	}
}

// SetAccount records the outcome of a /me call. A failed call keeps the last
// known plan and only marks the API down.
func (s *Store) SetAccount(plan string, up bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if up {
		s.account.Plan = plan
	}
	s.account.Up = up
}

// SetRateLimit records the rate-limit headers of the latest response.
func (s *Store) SetRateLimit(rl api.RateLimit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimit, s.hasRate = rl, true
}

// SetCycle records how long one full round of all addresses takes.
func (s *Store) SetCycle(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cycle = d
}

// Get returns one address's view.
func (s *Store) Get(email string) (*Address, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	a, ok := s.addresses[Key(email)]
	return a, ok
}

// Snapshot returns a consistent copy for one scrape.
func (s *Store) Snapshot() Snapshot {
	s.mu.RLock()
	snap := Snapshot{
		Addresses:    make([]*Address, 0, len(s.addresses)),
		Account:      s.account,
		RateLimit:    s.rateLimit,
		HasRateLimit: s.hasRate,
		Cycle:        s.cycle,
	}
	for _, a := range s.addresses {
		snap.Addresses = append(snap.Addresses, a)
	}
	s.mu.RUnlock()
	return snap
}
