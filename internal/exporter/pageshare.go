// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
)

// The page's acknowledgements with replicas (docs/acknowledgements.md,
// "With replicas"). They are the cluster's, as the watchlist is:
//
//  1. The replica that takes a change (Exporter.Acknowledge, Withdraw)
//     writes it to its pending file in the state folder (fsynced), puts it
//     in force here and saves the page's file, and only then answers: the
//     answer never depends on the store, which may be away or lose keys.
//  2. sharePage publishes it to the stream as an event of kind eventPage,
//     once per change (its random ID is the publish's digest), and waits
//     for one of the store's replicas as alerts do. Until the store took
//     it, the change stays pending and is published again, after a
//     restart too.
//  3. Every replica, the one that made it included, applies the stream's
//     page events in the stream's order to the stream's list (page.entries),
//     which the checkpoint carries (checkpointExtra.Page). What is in force
//     on a replica is that list with its own pending changes on top
//     (pageInForce), kept in its page file so that a restart without the
//     store serves it.
//
// Each replica decides on its own clock when an acknowledgement took
// effect, as it does for the file's: when it first had it in force.

// eventPage is the kind of a change made on the page. A release that does
// not know it skips and counts it (breach_exporter_store_events_invalid_total).
const eventPage = "page_acknowledgement"

// pageFormat is the version of the page's events and of the checkpoint's
// page member this release writes; a later one is skipped and counted.
const pageFormat = 1

const (
	// pendingName is the file of the page's changes the store has not
	// taken yet, in the state folder.
	pendingName = "store-page-pending"
	// maxPending bounds the changes waiting for the store: past it a
	// change is refused until the store answers (about 600 bytes each).
	maxPending = 1000
	// pageOnceTTL is how long the store recognises a change it took, so
	// that one published again after a lost answer is not added twice.
	pageOnceTTL = 24 * time.Hour
	// maxChangeID bounds a change's ID read from the store.
	maxChangeID = 64
)

// errPendingFull refuses a change while maxPending wait for the store.
var errPendingFull = fmt.Errorf("%d changes made on the page wait for the shared store; try again once it answers: %w", maxPending, acknowledge.ErrPageFull)

// pageChange is an acknowledgement (Entry) or the withdrawal of the page's
// acknowledgement of Entry's address and feed.
type pageChange struct {
	ID       string
	Withdraw bool
	Entry    acknowledge.Entry
}

// pageWire is the stored form of a change (an event's data, a line of the
// pending file) and of an entry of the checkpoint's list (no ID, no
// withdraw). Member names are fixed: replicas of other releases read them.
type pageWire struct {
	V         int       `json:"v"`
	ID        string    `json:"id,omitempty"`
	Withdraw  bool      `json:"withdraw,omitempty"`
	Address   string    `json:"address"`
	Source    string    `json:"source,omitempty"`
	HandledAt time.Time `json:"handled_at,omitzero"`
	By        string    `json:"by,omitempty"`
	Comment   string    `json:"comment,omitempty"`
}

func wireOf(c pageChange) pageWire {
	e := c.Entry
	return pageWire{V: pageFormat, ID: c.ID, Withdraw: c.Withdraw, Address: e.Address, Source: e.Source, HandledAt: e.HandledAt.UTC(), By: e.By, Comment: e.Comment}
}

// changeOf checks w like an acknowledgement of the file (the address, the
// feed, the bounds on by and comment, a handled_at from 2000 on), its
// handled_at clamped to now when it is more than breach.MaxFutureSkew
// ahead, as the other events' times are.
func changeOf(w pageWire, now time.Time) (pageChange, error) {
	switch {
	case w.V > pageFormat:
		return pageChange{}, fmt.Errorf("%w: version %d", errLaterFormat, w.V)
	case len(w.ID) > maxChangeID:
		return pageChange{}, fmt.Errorf("an ID of %d bytes", len(w.ID))
	}
	c := pageChange{ID: w.ID, Withdraw: w.Withdraw, Entry: acknowledge.Entry{Address: w.Address, Source: w.Source,
		HandledAt: clamp(w.HandledAt, now).UTC(), By: w.By, Comment: w.Comment, Page: true}}
	check := c.Entry
	if c.Withdraw {
		// A withdrawal names an address and a feed, nothing more.
		c.Entry = acknowledge.Entry{Address: w.Address, Source: w.Source, Page: true}
		check = acknowledge.Entry{Address: w.Address, Source: w.Source, By: "-"}
	} else if check.HandledAt.Before(minFeedTime) {
		return pageChange{}, errors.New("handled_at before 2000")
	}
	return c, check.Check(now)
}

// decodePageChange reads and checks an event of kind eventPage.
func decodePageChange(data []byte, now time.Time) (pageChange, error) {
	var w pageWire
	if err := json.Unmarshal(data, &w); err != nil {
		return pageChange{}, err
	}
	return changeOf(w, now)
}

// applyChange is list with c applied: c's entry in place of the list's of
// the same address and feed, or without it for a withdrawal. ok is false
// when an acknowledgement would make the list longer than
// persist.MaxPageEntries; list is never modified.
func applyChange(list []acknowledge.Entry, c pageChange) (_ []acknowledge.Entry, ok bool) {
	next := slices.DeleteFunc(slices.Clone(list), samePage(c.Entry.Address, c.Entry.Source))
	if c.Withdraw {
		return next, true
	}
	if len(next) >= persist.MaxPageEntries {
		return list, false
	}
	return append(next, c.Entry), true
}

// pageShare is the replicas' side of the page's acknowledgements.
type pageShare struct {
	// entries is the stream's list: under replicas.applying, replaced,
	// never modified in place.
	entries []acknowledge.Entry

	mu      sync.Mutex
	pending []pendingChange // oldest first
	root    *os.Root        // the state folder; nil: kept in memory only

	wake    chan struct{} // a change to publish
	changed chan struct{} // the stream's list changed: put it in force
}

// pendingChange is a change made here, kept until the store took it and
// the stream's list holds it.
type pendingChange struct {
	change    pageChange
	confirmed bool   // the store (and one of its replicas) holds it
	stream    string // its stream ID, once known
	applied   bool   // the stream brought it back
}

// inStream reports whether the stream's list up to last holds p.
func (p pendingChange) inStream(last string) bool {
	return p.applied || p.stream != "" && !sharedstore.After(p.stream, last)
}

func newPageShare() pageShare {
	return pageShare{wake: make(chan struct{}, 1), changed: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// openPage starts the stream's list from the page's file (local; a
// checkpoint replaces it) and reads the changes that wait for the store
// from the state folder (nil: none kept). A pending file that cannot be
// read is logged and started afresh.
func (r *replicas) openPage(folder *persist.Folder, local []acknowledge.Entry, now time.Time) {
	r.applying.Lock()
	r.page.entries = local
	r.applying.Unlock()
	if folder == nil {
		return
	}
	p := &r.page
	p.root = folder.Root()
	data, err := fileread.ReadIn(p.root, pendingName, fileread.MaxPageAcknowledgementsBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var wires []pageWire
	if err == nil {
		err = json.Unmarshal(data, &wires)
	}
	if len(wires) > maxPending {
		err = errors.Join(err, fmt.Errorf("%d changes, more than the %d kept: the first are published", len(wires), maxPending))
		wires = wires[:maxPending]
	}
	for _, w := range wires {
		c, cerr := changeOf(w, now)
		if cerr != nil || c.ID == "" {
			err = errors.Join(err, cerr)
			continue
		}
		p.pending = append(p.pending, pendingChange{change: c})
	}
	if err != nil {
		level.Warn(r.logger).Log("msg", "The page's changes waiting for the store cannot all be read; those that can are published", "err", err)
	}
	if len(p.pending) > 0 {
		level.Info(r.logger).Log("msg", "Changes made on the page before the restart wait for the store", "changes", len(p.pending))
		signal(p.wake)
	}
}

// add keeps c until the store takes it: durable in the state folder
// before it returns.
func (p *pageShare) add(c pageChange) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) >= maxPending {
		return errPendingFull
	}
	p.pending = append(p.pending, pendingChange{change: c})
	if err := p.save(); err != nil {
		p.pending = p.pending[:len(p.pending)-1]
		return err
	}
	return nil
}

// remove forgets the change of id: it was refused after add.
func (p *pageShare) remove(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = slices.DeleteFunc(p.pending, func(c pendingChange) bool { return c.change.ID == id })
	_ = p.save() // a change left in the file is published: the answer said it failed, the log says why
}

// save writes the changes the store has not confirmed to the pending file,
// atomically. Called with mu held.
func (p *pageShare) save() error {
	if p.root == nil {
		return nil
	}
	wires := []pageWire{}
	for _, c := range p.pending {
		if !c.confirmed {
			wires = append(wires, wireOf(c.change))
		}
	}
	data, err := json.Marshal(wires)
	if err != nil {
		return err
	}
	const tmp = pendingName + ".tmp"
	if err := writeSynced(p.root, tmp, data); err != nil {
		return err
	}
	return p.root.Rename(tmp, pendingName)
}

// unconfirmed is a copy of the changes the store has not taken yet.
func (p *pageShare) unconfirmed() []pageChange {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pageChange
	for _, c := range p.pending {
		if !c.confirmed {
			out = append(out, c.change)
		}
	}
	return out
}

// confirm marks the changes the store took, with their stream IDs, and
// removes them from the pending file.
func (r *replicas) confirm(batch []pageChange, ids []string) {
	r.applying.Lock()
	last := r.last
	r.applying.Unlock()
	p := &r.page
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range batch {
		for j := range p.pending {
			if p.pending[j].change.ID == c.ID {
				p.pending[j].confirmed, p.pending[j].stream = true, ids[i]
			}
		}
	}
	p.prune(last)
	if err := p.save(); err != nil {
		// They are in the store: a restart publishes them again, and the
		// store recognises them (pageOnceTTL).
		level.Warn(r.logger).Log("msg", "Could not rewrite the page's changes waiting for the store", "err", err)
	}
}

// prune forgets the changes the store took that the stream's list up to
// last holds. Called with mu held.
func (p *pageShare) prune(last string) {
	p.pending = slices.DeleteFunc(p.pending, func(c pendingChange) bool { return c.confirmed && c.inStream(last) })
}

// sharePage publishes the page's changes made here, oldest first, until
// ctx ends; a failure is retried with backoff, as alerts are.
func (r *replicas) sharePage(ctx context.Context) {
	retry := forwardRetryMin
	for {
		batch := r.page.unconfirmed()
		if len(batch) == 0 {
			select {
			case <-r.page.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := r.publishPage(ctx, batch); err != nil {
			level.Debug(r.logger).Log("msg", "The store did not take the page's changes; trying again", "err", err)
			if !pause(ctx, retry) {
				return
			}
			retry = min(2*retry, forwardRetryMax)
			continue
		}
		retry = forwardRetryMin
	}
}

// pause waits d, false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// publishPage publishes batch once per change, and, once the store and
// (with its replicas online) one of them hold it, confirms it.
func (r *replicas) publishPage(ctx context.Context, batch []pageChange) error {
	once := make([]sharedstore.Once, len(batch))
	for i, c := range batch {
		data, err := json.Marshal(wireOf(c))
		if err != nil {
			return err
		}
		once[i] = sharedstore.Once{Digest: c.ID, Kind: eventPage, Data: data}
	}
	opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ids, err := r.shared.PublishOnceBatch(opCtx, pageOnceTTL, once)
	if err != nil {
		return err
	}
	r.confirm(batch, ids)
	return nil
}

// applyPage applies a page event of the stream to the stream's list.
// Called with applying held.
func (r *replicas) applyPage(ev sharedstore.Event, now time.Time) {
	c, err := decodePageChange(ev.Data, now)
	if err != nil {
		r.invalid(ev, err)
		return
	}
	next, ok := applyChange(r.page.entries, c)
	if !ok {
		r.invalid(ev, fmt.Errorf("more than the %d acknowledgements the page keeps", persist.MaxPageEntries))
		return
	}
	r.page.entries = next
	p := &r.page
	p.mu.Lock()
	for i := range p.pending {
		if c.ID != "" && p.pending[i].change.ID == c.ID {
			p.pending[i].applied = true
		}
	}
	p.prune(r.last)
	p.mu.Unlock()
	signal(p.changed)
}

// pageInForce is the stream's list with the changes made here that it
// does not hold yet on top.
func (r *replicas) pageInForce() []acknowledge.Entry {
	r.applying.Lock()
	defer r.applying.Unlock()
	list := r.page.entries
	r.page.mu.Lock()
	defer r.page.mu.Unlock()
	for _, c := range r.page.pending {
		if !c.inStream(r.last) {
			list, _ = applyChange(list, c.change)
		}
	}
	return list
}

// restorePage takes the checkpoint's list in place of the stream's. A
// checkpoint without one (written by a release before it) leaves the list
// as it was: its changes come with the stream. Called with applying held.
func (r *replicas) restorePage(x *checkpointExtra, now time.Time) {
	if x.Page == nil {
		return
	}
	type feed struct{ key, source string }
	var list []acknowledge.Entry
	var skipped int
	var last error
	at := map[feed]int{} // one entry an address and feed: the last
	for _, w := range *x.Page {
		c, err := changeOf(w, now)
		if err == nil && c.Withdraw {
			err = errors.New("a withdrawal in the list")
		}
		if err == nil && len(list) >= persist.MaxPageEntries {
			err = fmt.Errorf("more than the %d acknowledgements the page keeps", persist.MaxPageEntries)
		}
		if err != nil {
			r.dropped.Inc()
			skipped, last = skipped+1, err
			continue
		}
		f := feed{breach.Key(c.Entry.Address), c.Entry.Source}
		if i, ok := at[f]; ok {
			list[i] = c.Entry
			continue
		}
		at[f] = len(list)
		list = append(list, c.Entry)
	}
	if skipped > 0 {
		level.Warn(r.logger).Log("msg", "Skipped acknowledgements of the store's checkpoint that this version cannot apply", "skipped", skipped, "last_err", last)
	}
	r.page.entries = list
	signal(r.page.changed)
}

// pageWires is the checkpoint's form of the stream's list.
func pageWires(list []acknowledge.Entry) *[]pageWire {
	out := make([]pageWire, len(list))
	for i, e := range list {
		out[i] = wireOf(pageChange{Entry: e})
	}
	return &out
}

// newChangeID names a change: the digest it is published once under.
func newChangeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "page-" + hex.EncodeToString(b[:])
}
