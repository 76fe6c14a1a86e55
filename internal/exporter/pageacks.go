// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"slices"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The acknowledgements made on the acknowledgement page (internal/ackweb)
// are this replica's: kept in its state folder (persist.PageFileName),
// merged with the file's into the bundle in force by the one rule (the
// latest handled_at), decided on the same moments. e.page is guarded by
// e.syncing, which also orders a page change with a reload's swap.

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
// state folder before it is in force and before this returns.
func (e *Exporter) Acknowledge(email, source, by, comment string) error {
	entry := acknowledge.Entry{Address: email, Source: source, By: by, Comment: comment,
		HandledAt: e.clock.Now().UTC().Truncate(time.Second), Page: true}
	if err := entry.Check(e.clock.Now()); err != nil {
		return err
	}
	e.syncing.Lock()
	defer e.syncing.Unlock()
	next := slices.DeleteFunc(slices.Clone(e.page), samePage(email, source))
	if len(next) >= persist.MaxPageEntries {
		return acknowledge.ErrPageFull
	}
	return e.putPage(append(next, entry))
}

// Withdraw removes the page's acknowledgement of the address email and
// feed source; false when the page holds none (the file's stay: only the
// file's author removes those).
func (e *Exporter) Withdraw(email, source string) (bool, error) {
	e.syncing.Lock()
	defer e.syncing.Unlock()
	next := slices.DeleteFunc(slices.Clone(e.page), samePage(email, source))
	if len(next) == len(e.page) {
		return false, nil
	}
	return true, e.putPage(next)
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
	e.page = next
	bundle := e.withPage(e.config.Load())
	e.config.Store(bundle)
	e.watchlist.NoteAcknowledgements(bundle.Acknowledgements, e.clock.Now())
	return nil
}

// Watchlist is the watchlist the page reads.
func (e *Exporter) Watchlist() *watchlist.List { return e.watchlist }

// Config is the bundle in force, with the page's acknowledgements.
func (e *Exporter) Config() *config.Current { return e.config }
