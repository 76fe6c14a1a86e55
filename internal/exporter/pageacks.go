// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"slices"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The acknowledgements made on the acknowledgement page (internal/ackweb)
// are kept in the state folder (persist.PageFileName), merged with the
// file's into the bundle in force by the one rule (the latest handled_at),
// decided on the same moments. With a store they are the cluster's
// (pageshare.go): a change is published, and every replica puts the
// stream's in force. e.page is guarded by e.syncing, which also orders a
// page change with a reload's swap.

// withPage is bundle with the page's acknowledgements merged into its
// file's; bundle itself when the page holds none. Called with syncing held.
func (e *Exporter) withPage(bundle *config.Bundle) *config.Bundle {
	if len(e.page) == 0 && !bundle.Acknowledgements.HasPage() {
		return bundle
	}
	merged := *bundle
	merged.Acknowledgements = acknowledge.WithPage(bundle.Acknowledgements, e.page)
	return &merged
}

// Acknowledge records an acknowledgement made on the page for the watched
// address email (as configured) and feed source ("" for every feed), handled
// now on the exporter's clock, and puts it in force. It replaces this page's
// earlier one for the same address and feed. The entry is written to the
// state folder before it is in force and before this returns; with a
// store it is published after, and the answer does not wait for the store
// (pageshare.go).
func (e *Exporter) Acknowledge(email, source, by, comment string) error {
	entry := acknowledge.Entry{Address: email, Source: source, By: by, Comment: comment,
		HandledAt: e.clock.Now().UTC().Truncate(time.Second), Page: true}
	if err := entry.Check(e.clock.Now()); err != nil {
		return err
	}
	e.syncing.Lock()
	defer e.syncing.Unlock()
	return e.changePage(pageChange{Entry: entry})
}

// Withdraw removes the page's acknowledgement of the address email and
// feed source; false when the page holds none (the file's stay: only the
// file's author removes those).
func (e *Exporter) Withdraw(email, source string) (bool, error) {
	e.syncing.Lock()
	defer e.syncing.Unlock()
	if !slices.ContainsFunc(e.page, samePage(email, source)) {
		return false, nil
	}
	return true, e.changePage(pageChange{Withdraw: true, Entry: acknowledge.Entry{Address: email, Source: source, Page: true}})
}

// changePage makes c here: in force and saved before it returns; with a
// store, also kept until the store takes it, and published. Called with
// syncing held.
func (e *Exporter) changePage(c pageChange) error {
	next, ok := applyChange(e.page, c)
	if !ok {
		return acknowledge.ErrPageFull
	}
	r := e.replicas
	if r == nil {
		return e.putPage(next)
	}
	c.ID = newChangeID()
	if err := r.page.add(c); err != nil {
		level.Error(e.logger).Log("msg", "Keeping the page's change for the store failed; the change is refused", "err", err)
		return err
	}
	if err := e.putPage(r.pageInForce()); err != nil {
		r.page.remove(c.ID)
		return err
	}
	signal(r.page.wake)
	return nil
}

func samePage(email, source string) func(acknowledge.Entry) bool {
	k := breach.Key(email)
	return func(a acknowledge.Entry) bool { return breach.Key(a.Address) == k && a.Source == source }
}

// putPage saves next and puts it in force with the file's entries: the
// decision is recomputed from what remains. Called with syncing held.
func (e *Exporter) putPage(next []acknowledge.Entry) error {
	if e.folder != nil {
		if err := e.folder.SavePage(next, e.clock.Now()); err != nil {
			level.Error(e.logger).Log("msg", "Saving the page's acknowledgements failed; the change is refused", "err", err)
			return err
		}
	}
	e.setPage(next)
	return nil
}

// setPage puts next in force with the file's entries. Called with
// syncing held.
func (e *Exporter) setPage(next []acknowledge.Entry) {
	e.page = next
	bundle := e.withPage(e.config.Load())
	e.config.Store(bundle)
	e.watchlist.NoteAcknowledgements(bundle.Acknowledgements, e.clock.Now())
}

// refreshPage puts in force what the stream brought for the page, with
// the changes made here it does not hold yet. Called with syncing held.
func (e *Exporter) refreshPage() {
	next := e.replicas.pageInForce()
	if slices.EqualFunc(next, e.page, sameEntry) {
		return
	}
	if e.folder != nil {
		if err := e.folder.SavePage(next, e.clock.Now()); err != nil {
			// In force all the same: it is the cluster's.
			level.Warn(e.logger).Log("msg", "Saving the page's acknowledgements from the store failed; a restart without the store serves the ones saved before", "err", err)
		}
	}
	e.setPage(next)
}

func sameEntry(a, b acknowledge.Entry) bool {
	return a.Address == b.Address && a.Source == b.Source && a.HandledAt.Equal(b.HandledAt) && a.By == b.By && a.Comment == b.Comment
}

// runPage publishes the page's changes made here and puts in force those
// the stream brings, until ctx ends.
func (e *Exporter) runPage(ctx context.Context) {
	r := e.replicas
	e.running.Add(2)
	go func() {
		defer e.running.Done()
		r.sharePage(ctx)
	}()
	go func() {
		defer e.running.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.page.changed:
				e.syncing.Lock()
				e.refreshPage()
				e.syncing.Unlock()
			}
		}
	}()
}

// Watchlist is the watchlist the page reads.
func (e *Exporter) Watchlist() *watchlist.List { return e.watchlist }

// Config is the bundle in force, with the page's acknowledgements.
func (e *Exporter) Config() *config.Current { return e.config }
