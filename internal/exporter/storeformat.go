// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// What replicas write to the store, and how what is read from it is held
// to what a replica writes. The store is a peer, not part of us: a
// replica of another release, a bug or an attacker with the store's
// password may have written anything there. Every event and checkpoint is
// bounded in size before it is decoded, decoded with the member names
// fixed below (never Go's field names, which a refactoring may change),
// and checked like an API answer; one that fails is skipped and counted
// (breach_exporter_store_events_invalid_total), and the state stays as it
// was.
//
// Versions. An outcome event carries "v", the version of its form (absent
// in what 28b5cca wrote: read as 1). A reader ignores members it does not
// know, so a later release may add members without a new version; one
// that changes what a member means renames it or writes a new version,
// which this one skips and counts, as it does a kind it does not know. An
// alert event's data is the journal record's form (persist.EncodeAlert),
// unchanged since 28b5cca, read the same way (unknown members ignored).
// The checkpoint's data is the state snapshot's versioned form, which
// 28b5cca reads too; what it has no room for goes in the hash's extra
// member (checkpointExtra). The page's acknowledgements are events of a
// kind of their own (eventPage, pageshare.go), with their own "v".

// eventFormat is the version of the outcome events this release writes.
const eventFormat = 1

// maxEventBytes bounds one event's data: no event over it is decoded, and
// the store does not even send one (sharedstore.MaxEventBytes, whose
// comment says why it is 1 MiB).
const maxEventBytes = sharedstore.MaxEventBytes

// maxCheckpointBytes bounds the checkpoint fetched from the store: the
// bound on the state snapshot a replica reads from its own folder.
const maxCheckpointBytes = fileread.MaxSnapshotBytes

// outcomeEvent is the data of every event but an alert's.
type outcomeEvent struct {
	Account   string
	Key       string
	Sent      time.Time
	At        time.Time
	State     string
	Sources   []breach.SourceState
	Plan      string
	Up        bool
	RateLimit *breach.RateLimit
}

// The wire form. The members of a source and of a rate limit keep the
// names 28b5cca wrote (Go's field names then), so that both releases read
// each other's events during a rolling upgrade.
type (
	outcomeWire struct {
		V         int            `json:"v,omitempty"`
		Account   string         `json:"account"`
		Key       string         `json:"key,omitempty"`
		Sent      time.Time      `json:"sent,omitzero"`
		At        time.Time      `json:"at,omitzero"`
		State     string         `json:"state,omitempty"`
		Sources   []sourceWire   `json:"sources,omitempty"`
		Plan      string         `json:"plan,omitempty"`
		Up        bool           `json:"up,omitempty"`
		RateLimit *rateLimitWire `json:"rate_limit,omitempty"`
	}
	sourceWire struct {
		Source               string    `json:"Source"`
		BreachCount          int64     `json:"BreachCount"`
		SourceDBs            []string  `json:"SourceDBs"`
		FieldsExposed        []string  `json:"FieldsExposed"`
		HasPlaintextPassword bool      `json:"HasPlaintextPassword"`
		LastScannedAt        time.Time `json:"LastScannedAt"`
		LastChangedAt        time.Time `json:"LastChangedAt"`
	}
	rateLimitWire struct {
		Limit        int       `json:"Limit"`
		HasLimit     bool      `json:"HasLimit"`
		Remaining    int       `json:"Remaining"`
		HasRemaining bool      `json:"HasRemaining"`
		Reset        time.Time `json:"Reset"`
	}
)

func encodeOutcome(o outcomeEvent) ([]byte, error) {
	w := outcomeWire{V: eventFormat, Account: o.Account, Key: o.Key, Sent: o.Sent, At: o.At, State: o.State, Plan: o.Plan, Up: o.Up}
	for _, s := range o.Sources {
		w.Sources = append(w.Sources, sourceWire(s))
	}
	if o.RateLimit != nil {
		rl := rateLimitWire(*o.RateLimit)
		w.RateLimit = &rl
	}
	return json.Marshal(w)
}

// errLaterFormat is an event of a form this release does not know.
var errLaterFormat = errors.New("a later version of the event's form")

// Plausible times of a feed, as the API client takes them: no scan before
// 2000, none more than a day ahead.
var minFeedTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const maxFeedTimeAhead = 24 * time.Hour

// decodeOutcome reads and checks an outcome event of kind. Times of the
// publisher's clock more than breach.MaxFutureSkew ahead of now are
// clamped to now, as a state snapshot's are.
func decodeOutcome(kind string, data []byte, now time.Time) (outcomeEvent, error) {
	var w outcomeWire
	if err := json.Unmarshal(data, &w); err != nil {
		return outcomeEvent{}, err
	}
	if w.V > eventFormat {
		return outcomeEvent{}, fmt.Errorf("%w: version %d", errLaterFormat, w.V)
	}
	o := outcomeEvent{Account: w.Account, Key: w.Key, Sent: clamp(w.Sent, now), At: clamp(w.At, now), State: w.State, Plan: w.Plan, Up: w.Up}
	for _, s := range w.Sources {
		o.Sources = append(o.Sources, breach.SourceState(s))
	}
	if w.RateLimit != nil {
		rl := breach.RateLimit(*w.RateLimit)
		o.RateLimit = &rl
	}
	if o.Account == "" {
		return outcomeEvent{}, errors.New("no account")
	}
	return o, checkOutcome(kind, o, now)
}

func checkOutcome(kind string, o outcomeEvent, now time.Time) error {
	switch kind {
	case eventAnswered:
		if o.At.IsZero() {
			return errors.New("no time answered")
		}
		if err := checkAnswer(o, now); err != nil {
			return err
		}
		fallthrough
	case eventFailed:
		if o.Sent.IsZero() {
			return errors.New("no time sent")
		}
		fallthrough
	case eventDropped:
		if !breach.ValidEmail(o.Key) || breach.Key(o.Key) != o.Key {
			return errors.New("not an address's key")
		}
	case eventRateLimit:
		if rl := o.RateLimit; rl == nil || rl.Limit < 0 || rl.Remaining < 0 || !rl.Reset.IsZero() && !plausibleFeedTime(rl.Reset, now) {
			return errors.New("not a rate limit the API client reads")
		}
	}
	return nil
}

// checkAnswer holds an answer's state and sources to what the API client
// takes.
func checkAnswer(o outcomeEvent, now time.Time) error {
	switch {
	case !breach.Known(breach.States, o.State):
		return fmt.Errorf("unknown state %q", breach.LabelValue(o.State, breach.MaxValueBytes))
	case o.State != breach.Verified && len(o.Sources) > 0:
		return fmt.Errorf("sources on a %s address", o.State)
	}
	for i, s := range o.Sources {
		switch {
		case s.Source == "":
			return fmt.Errorf("sources[%d]: no source", i)
		case s.BreachCount < 0:
			return fmt.Errorf("sources[%d]: breach_count %d", i, s.BreachCount)
		case !plausibleFeedTime(s.LastScannedAt, now) || !plausibleFeedTime(s.LastChangedAt, now):
			return fmt.Errorf("sources[%d]: a time before 2000 or more than a day ahead", i)
		}
	}
	return nil
}

func plausibleFeedTime(t, now time.Time) bool {
	return !t.Before(minFeedTime) && !t.After(now.Add(maxFeedTimeAhead))
}

// clamp is t, or now when t is more than breach.MaxFutureSkew after it.
func clamp(t, now time.Time) time.Time {
	if breach.InFuture(t, now) {
		return now
	}
	return t
}

// decodeAlert reads and checks an alert event: the journal record's form
// and checks, an acceptance time that is set (clamped like the outcomes'),
// and an observed_at more than breach.MaxFutureSkew ahead left out, as the
// receiver leaves it out.
func decodeAlert(data []byte, now time.Time) (watchlist.AcceptedAlert, error) {
	a, err := persist.DecodeAlert(data)
	if err != nil {
		return a, err
	}
	if a.At.IsZero() {
		return a, errors.New("no time accepted")
	}
	a.At = clamp(a.At, now)
	if breach.InFuture(a.Delta.ObservedAt, now) {
		a.Delta.ObservedAt = time.Time{}
	}
	return a, nil
}

// checkpointExtra is what a checkpoint holds besides the state snapshot's
// form, which the previous release reads strictly and so cannot grow:
// what the last /me of each account said, and each address's news (what
// its answers added), so that a replica that starts from the checkpoint
// serves them as the others do. ID is the checkpoint's: a checkpoint the
// previous release wrote over a later one's leaves its extra behind, and
// an extra of another ID is not read.
type checkpointExtra struct {
	V        int            `json:"v"`
	ID       string         `json:"id"`
	Accounts []accountExtra `json:"accounts,omitempty"`
	News     []addressExtra `json:"news,omitempty"`
	// Page is the stream's list of the page's acknowledgements
	// (pageshare.go); nil in a checkpoint of a release before them.
	Page *[]pageWire `json:"page,omitempty"`
	// The alerts the writer held, which its state lacks (unwatched.go):
	// the event before the first, and their events' IDs.
	HeldAfter string   `json:"held_after,omitempty"`
	Held      []string `json:"held,omitempty"`
	// Applied is the digests of the alerts the writer's state counts
	// (applied.go); nil in a checkpoint of a release before it.
	Applied *appliedWire `json:"applied,omitempty"`
}

// appliedWire is x's Applied; nil when x is.
func (x *checkpointExtra) appliedWire() *appliedWire {
	if x == nil {
		return nil
	}
	return x.Applied
}

type accountExtra struct {
	Name string `json:"name"`
	Up   bool   `json:"up"`
}

type addressExtra struct {
	Key             string  `json:"key"`
	NewDatabases    float64 `json:"new_databases,omitempty"`
	SensitiveFields float64 `json:"sensitive_fields,omitempty"`
}

// decodeExtra reads a checkpoint's extra; one of another ID, of a later
// version or not well formed is none.
func decodeExtra(data []byte, id string) (checkpointExtra, bool) {
	var x checkpointExtra
	if len(data) == 0 || json.Unmarshal(data, &x) != nil || x.ID != id || x.V > eventFormat {
		return checkpointExtra{}, false
	}
	return x, true
}

// validCheckpointID reports whether a checkpoint's ID could be of the
// store's stream: a stream ID, not past the store's clock by more than
// breach.MaxFutureSkew. One past it (the largest ID, forged) would hold
// back every later checkpoint and every start at it.
func validCheckpointID(id string, now time.Time) bool {
	return !sharedstore.Ahead(id, now, breach.MaxFutureSkew)
}
