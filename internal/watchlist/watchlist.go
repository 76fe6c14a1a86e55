// SPDX-License-Identifier: Apache-2.0

// Package watchlist is the one set of watched addresses, configured and
// discovered. Each address has one entry holding everything keyed by it:
// its label, the API's last answer (the cache the collector serves), its
// place in the schedule, and the counts of the alerts received for it.
// Adding or removing an address is one operation on this map, so the
// schedule, the cache and every series with the address's label follow it:
// after a reload removes an address, nothing anywhere still carries it.
//
// The scheduler writes answers and schedule state, the webhook receiver
// writes alert counts and discoveries, the wiring syncs membership on
// reload, and the collector reads a View at scrape time.
package watchlist

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Schedule is an address's place in the request schedule. The scheduler
// owns its meaning; the watchlist keeps it with the address so that it goes
// when the address goes.
type Schedule struct {
	Order       uint64    // insertion order, so never-read addresses go in config order
	LastAttempt time.Time // zero: never read
	Failures    int       // consecutive failed reads; drives the backoff
	Urgent      uint64    // Refresh ticket, 0 when none is pending; lower goes first
}

// Entry is one watched address. Entries handed out are copies; their
// Sources and Alerts are shared and never modified, so readers may keep
// them without locking. Sources holds each feed once, and each feed's
// SourceDBs and FieldsExposed hold no repeats (bounds.go).
type Entry struct {
	Address breach.Address
	Label   string // the address label, per labels.address
	// Owner are the address's owner labels as exported (values that are
	// addresses labelled per labels.address: breach.OwnerValue), in name
	// order; never modified, replaced by a Sync that changes them.
	Owner       []breach.Label
	State       string // one of breach.States
	Sources     []breach.SourceState
	LastRefresh time.Time // last 200/403/404; zero before the first
	Schedule    Schedule
	Alerts      *Alerts // nil until the first accepted alert
	News        News
	// Feeds are, by feed, the moments an acknowledgement is decided on
	// (acknowledge.Entry.Covers); Acknowledged is when this exporter first
	// loaded each acknowledgement of the address. Both are on the
	// exporter's clock, kept across a restart, shared and never modified.
	Feeds        map[string]FeedMoments
	Acknowledged map[acknowledge.Key]time.Time
	// Version changes whenever anything the collector exports of the entry
	// changes (label, state, sources, refresh time, alert counts), so a
	// rendering of it can be reused until then.
	Version uint64
	// answers counts the answers recorded (Answered), the only writes to
	// an existing entry's State and Sources: Answered diffs without the
	// lock and swaps only if it did not move meanwhile.
	answers uint64
}

// News counts what the API's answers added for an address since this
// process started, compared with the answer before: only between two 200
// answers, so the first scan of an address (at its verification, after a
// 403 or 404, or with no state snapshot at start) is not news. Not kept
// across a restart: Prometheus handles counter resets.
type News struct {
	// NewDatabases counts the databases or combolists a feed lists that the
	// same feed's previous answer did not (a feed's first scan included).
	NewDatabases float64
	// SensitiveFields counts the sensitive categories (breach.SensitiveFields)
	// a feed finds exposed that its previous answer did not.
	SensitiveFields float64
}

// newsBetween counts what after adds to before, both bounded answers of
// one address (each feed once, no repeated names in a feed). Linear in the
// size of both: the previous answer's names are looked up in a set, as an
// answer may list hundreds of thousands.
func newsBetween(before, after []breach.SourceState) News {
	prev := make(map[string]*breach.SourceState, len(before))
	for i := range before {
		prev[before[i].Source] = &before[i]
	}
	var n News
	for _, a := range after {
		p := prev[a.Source]
		var known map[string]struct{}
		if p != nil {
			known = make(map[string]struct{}, len(p.SourceDBs))
			for _, db := range p.SourceDBs {
				known[db] = struct{}{}
			}
		}
		for _, db := range a.SourceDBs {
			if _, ok := known[db]; !ok {
				n.NewDatabases++
			}
		}
		// At most a few dozen distinct fields a feed (the vocabulary).
		for _, f := range a.FieldsExposed {
			if slices.Contains(breach.SensitiveFields, f) && (p == nil || !slices.Contains(p.FieldsExposed, f)) {
				n.SensitiveFields++
			}
		}
	}
	return n
}

// FeedMoments are, for one feed of an address, when the exporter itself
// first saw what an acknowledgement has to cover: the service's stamps
// and a person's handled_at come from other clocks.
type FeedMoments struct {
	// LastChangedAt is the feed's last_changed_at that ChangeSeen is about.
	LastChangedAt time.Time
	// ChangeSeen is when the exporter first saw that last_changed_at; for
	// a feed it had never seen, min(last_changed_at, then): a state that
	// was already there is as old as the service says, if not newer than
	// the exporter's clock.
	ChangeSeen time.Time
	// Critical is when the exporter accepted the feed's latest critical
	// webhook; zero before the first.
	Critical time.Time
	// CriticalObserved is that webhook's observed_at, on the service's
	// clock as last_changed_at is (zero when it had none in bounds): a
	// change whose last_changed_at is not after it is the one the webhook
	// announced, so the exporter saw it at Critical, however late a read
	// shows it (seeFeeds). Not in the snapshot: a change announced before
	// the snapshot a restart starts from counts as seen at its read.
	CriticalObserved time.Time
}

// seeFeeds returns e's feed moments after an answer with sources read at
// at; unchanged feeds keep their moments, feeds the answer omits too. A
// change a critical webhook announced was seen when the webhook was
// accepted: the read comes when the budget allows, maybe after the page
// the webhook made was acknowledged, and must not undo that
// acknowledgement.
func seeFeeds(old map[string]FeedMoments, sources []breach.SourceState, at time.Time) (map[string]FeedMoments, bool) {
	var next map[string]FeedMoments
	for _, s := range sources {
		m, known := old[s.Source]
		first := !known || m.ChangeSeen.IsZero()
		if !first && m.LastChangedAt.Equal(s.LastChangedAt) {
			continue
		}
		if next == nil {
			next = maps.Clone(old)
			if next == nil {
				next = map[string]FeedMoments{}
			}
		}
		m.LastChangedAt, m.ChangeSeen = s.LastChangedAt, at
		if first {
			m.ChangeSeen = minTime(s.LastChangedAt, at)
		} else if m.announced(s.LastChangedAt) {
			m.ChangeSeen = minTime(m.Critical, at)
		}
		next[s.Source] = m
	}
	if next == nil {
		return old, false
	}
	return next, true
}

// announced reports whether the feed's change stamped changed is the one
// (or older than the one) its latest critical webhook reported: observed_at
// has whole seconds, last_changed_at milliseconds.
func (m FeedMoments) announced(changed time.Time) bool {
	return !m.Critical.IsZero() && !m.CriticalObserved.IsZero() && !changed.Truncate(time.Second).After(m.CriticalObserved)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Account is what /me last said.
type Account struct {
	Plan string // empty until /me has answered once
	Up   bool   // the last /me answered 200 and no 401 came since
	// Known is whether Up says anything: a /me answered or failed since
	// the start, or a replica's checkpoint said what its last one did.
	// Until then breach_api_up is not served: an exporter that has not
	// asked yet (a replica on an empty folder while the store is away
	// cannot, it has no budget) does not know the key is down.
	Known bool
}

// AccountView is what one account's scheduler last recorded.
type AccountView struct {
	Name         string
	Account      Account
	RateLimit    breach.RateLimit
	HasRateLimit bool
	Cycle        time.Duration // one full round of the account's addresses at its budget
}

// View is a consistent copy of the watchlist for one scrape.
type View struct {
	Entries  []Entry       // in no particular order: the collector sorts by label
	Accounts []AccountView // by name
	// Dropped counts, by label (BoundedLabels), the values the bounds kept
	// out of the exposition.
	Dropped map[string]float64
}

// account is the state of one account: what its scheduler recorded, its
// addresses, and the channel that wakes its scheduler.
type account struct {
	info      Account
	rateLimit breach.RateLimit
	hasRate   bool
	cycle     time.Duration
	entries   map[string]*Entry // the account's share of List.entries
	changed   chan struct{}     // see Changed
	changes   scheduleChanges   // see ScheduleChanges
}

func newAccount() *account {
	return &account{entries: map[string]*Entry{}, changed: make(chan struct{}, 1), changes: scheduleChanges{all: true}}
}

// List is safe for concurrent use.
type List struct {
	mu         sync.RWMutex
	entries    map[string]*Entry // by breach.Key
	labels     breach.Labeler
	tickets    uint64 // source of Schedule.Order and Schedule.Urgent
	discovered int    // entries whose Address.Discovered is set
	// discoveryLimit is how many discovered addresses may be watched: the
	// config's, set by Sync under the same lock RecordAlert takes, so an
	// alert racing a reload cannot discover under the old limit.
	discoveryLimit int
	generation     uint64 // counts changes worth saving (Save)
	versions       uint64 // source of Entry.Version
	// accounts are the accounts Sync was last given, by name; each
	// scheduler plans over its own account's entries only.
	accounts map[string]*account

	bounds *bounds // on values from outside; see bounds.go
	// acks are the acknowledgements in force, for the addresses
	// discovered after their load (NoteAcknowledgements).
	acks *acknowledge.Set
}

// New returns an empty watchlist labelling addresses by email, with the
// one account DefaultAccount until the first Sync says which.
func New() *List {
	return &List{
		entries:  map[string]*Entry{},
		labels:   breach.LabelEmail,
		bounds:   newBounds(),
		accounts: map[string]*account{breach.DefaultAccount: newAccount()},
	}
}

// Changed receives a value after the set of the account's addresses or an
// address's urgency changed: its scheduler re-plans then. Changes that come
// while a value is pending are folded into it. An account the last Sync
// did not name gets nil, which never receives: a reload that names it again
// makes a new channel, so its scheduler asks again before each plan.
func (r *List) Changed(name string) <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if a := r.accounts[name]; a != nil {
		return a.changed
	}
	return nil
}

// accountOf returns the named account's state, made when missing. Called
// with r.mu held for writing.
func (r *List) accountOf(name string) *account {
	a := r.accounts[name]
	if a == nil {
		a = newAccount()
		r.accounts[name] = a
	}
	return a
}

func signal(a *account) {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// Sync makes the watchlist watch exactly configured, plus at most
// discoveryLimit discovered addresses (0: none, discovery is off; the
// newest go first when the limit shrank), and labels every entry under
// mode. accounts are the accounts in force; the accounts of configured
// addresses are among them (an address without one is DefaultAccount's).
// A discovered address whose account is gone goes. Kept addresses keep
// their data, schedule and alert counts, and follow their account when the
// config moved them to another; removed ones go with all of it. An address
// now configured that was discovered becomes configured.
//
// Each configured address's key and label are computed before the lock (at
// 100,000 addresses from files, hmac labels are most of a sync's time), so
// a scrape or an alert waits only for the swap.
func (r *List) Sync(accounts []string, configured []breach.Address, mode breach.Labeler, discoveryLimit int) {
	keys := make([]string, len(configured))
	labels := make([]string, len(configured))
	owners := make([][]breach.Label, len(configured))
	for i, a := range configured {
		keys[i], labels[i], owners[i] = a.Key(), mode.Label(a), ownerLabels(mode, a.Labels)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.labels = mode
	r.discoveryLimit = discoveryLimit
	r.generation++
	s := &syncing{r: r, kept: make(map[string]*account, len(accounts)+1),
		next: make(map[string]*Entry, len(configured)+len(r.entries))}
	for _, name := range accounts {
		s.keep(name)
	}
	if len(accounts) == 0 {
		s.keep(breach.DefaultAccount) // no accounts: the one of the single-account shape
	}
	s.configured(configured, keys, labels, owners)
	s.discovered(mode, discoveryLimit)
	r.entries = s.next
	// A removed account's scheduler is woken too: it then finds its
	// account gone and returns, so a name added back gets a new one.
	for name, a := range r.accounts {
		if s.kept[name] == nil {
			signal(a)
		}
	}
	r.accounts = s.kept
	for _, a := range s.kept {
		signal(a)
	}
}

// syncing is one Sync under the lock: the accounts and entries it keeps.
type syncing struct {
	r    *List
	kept map[string]*account
	next map[string]*Entry
}

// keep keeps the account name, emptied of its entries, which the sync
// adds back.
func (s *syncing) keep(name string) *account {
	a := s.kept[name]
	if a == nil {
		a = s.r.accountOf(name)
		a.entries = map[string]*Entry{}
		a.noteAll()
		s.kept[name] = a
	}
	return a
}

// add keeps e under its key k, in its account.
func (s *syncing) add(k string, e *Entry) {
	s.next[k] = e
	s.kept[e.Address.Account].entries[k] = e
}

// configured keeps the configured addresses (keys, labels and owner
// labels computed before the lock), new ones new.
func (s *syncing) configured(configured []breach.Address, keys, labels []string, owners [][]breach.Label) {
	r := s.r
	for i, a := range configured {
		k := keys[i]
		if s.next[k] != nil {
			continue // the config rejects duplicates; a hand-made list may not
		}
		a.Account = a.AccountName()
		e := r.entries[k]
		if e == nil {
			e = r.newLabelledEntry(a, labels[i])
		}
		if e.Address.Account != a.Account {
			r.touch(e) // breach_address_state carries the account
		}
		e.Address = a
		if e.Label != labels[i] || !slices.Equal(e.Owner, owners[i]) {
			e.Label, e.Owner = labels[i], owners[i]
			r.touch(e)
		}
		s.keep(a.Account)
		s.add(k, e)
	}
}

// discovered keeps the oldest discoveryLimit discovered addresses that are
// not configured now and whose account is kept, labelled under mode.
func (s *syncing) discovered(mode breach.Labeler, discoveryLimit int) {
	r := s.r
	var discovered []*Entry
	for k, e := range r.entries {
		if e.Address.Discovered && s.next[k] == nil && s.kept[e.Address.Account] != nil {
			discovered = append(discovered, e)
		}
	}
	slices.SortFunc(discovered, func(a, b *Entry) int { return cmp.Compare(a.Schedule.Order, b.Schedule.Order) })
	if len(discovered) > discoveryLimit {
		discovered = discovered[:discoveryLimit]
	}
	for _, e := range discovered {
		s.add(e.Address.Key(), e)
	}
	r.discovered = len(discovered)
	for _, e := range discovered {
		if label := mode.Label(e.Address); label != e.Label {
			e.Label = label
			r.touch(e)
		}
	}
}

// newEntry returns a new entry for a, in a's account (DefaultAccount when
// it names none); the caller adds it (add).
func (r *List) newEntry(a breach.Address) *Entry {
	return r.newLabelledEntry(a, r.labels.Label(a))
}

// newLabelledEntry is newEntry with the label already made.
func (r *List) newLabelledEntry(a breach.Address, label string) *Entry {
	r.tickets++
	a.Account = a.AccountName()
	e := &Entry{Address: a, Label: label, State: breach.Pending, Schedule: Schedule{Order: r.tickets}}
	r.touch(e)
	return e
}

// add watches e under key k, in its account. Called with r.mu held.
func (r *List) add(k string, e *Entry) {
	r.entries[k] = e
	a := r.accountOf(e.Address.Account)
	a.entries[k] = e
	a.note(k)
}

// remove stops watching the entry under key k. Called with r.mu held.
func (r *List) remove(k string, e *Entry) {
	delete(r.entries, k)
	if a := r.accounts[e.Address.Account]; a != nil {
		delete(a.entries, k)
		a.note(k)
		signal(a)
	}
}

// touch marks e's exported values as changed. Called with r.mu held.
func (r *List) touch(e *Entry) {
	r.versions++
	e.Version = r.versions
}

// Len is the number of watched addresses.
func (r *List) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// AccountLen is the number of the named account's watched addresses.
func (r *List) AccountLen(name string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if a := r.accounts[name]; a != nil {
		return len(a.entries)
	}
	return 0
}

// View returns a consistent copy for one scrape.
func (r *List) View() View {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := View{
		Entries:  make([]Entry, 0, len(r.entries)),
		Accounts: make([]AccountView, 0, len(r.accounts)),
		Dropped:  r.bounds.droppedCounts(),
	}
	for name, a := range r.accounts {
		s.Accounts = append(s.Accounts, AccountView{Name: name, Account: a.info, RateLimit: a.rateLimit, HasRateLimit: a.hasRate, Cycle: a.cycle})
	}
	slices.SortFunc(s.Accounts, func(a, b AccountView) int { return cmp.Compare(a.Name, b.Name) })
	for _, e := range r.entries {
		s.Entries = append(s.Entries, *e)
	}
	return s
}

// known returns the state of an account Sync named, nil for another: a
// scheduler whose account a reload removed records nothing.
func (r *List) known(name string) *account { return r.accounts[name] }

// SetAccount records the outcome of the named account's /me call, or (up
// false, plan "") that a 401 made its API key unusable. A failure keeps
// the last known plan.
func (r *List) SetAccount(name, plan string, up bool) {
	if up {
		plan = r.bounds.boundPlan(plan)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.known(name)
	if a == nil {
		return
	}
	if up && plan != a.info.Plan {
		a.info.Plan = plan
		r.generation++
	}
	a.info.Up, a.info.Known = up, true
}

// SetRateLimit records the rate-limit headers of the named account's
// latest response.
func (r *List) SetRateLimit(name string, rl breach.RateLimit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.known(name); a != nil {
		a.rateLimit, a.hasRate = rl, true
	}
}

// SetCycle records how long one full round of the named account's
// addresses takes.
func (r *List) SetCycle(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.known(name); a != nil {
		a.cycle = d
	}
}

// ownerLabels are labels as exported under mode (breach.OwnerValue).
func ownerLabels(mode breach.Labeler, labels []breach.Label) []breach.Label {
	if len(labels) == 0 {
		return nil
	}
	out := make([]breach.Label, len(labels))
	for i, l := range labels {
		out[i] = breach.Label{Name: l.Name, Value: breach.OwnerValue(mode, l.Value)}
	}
	return out
}
