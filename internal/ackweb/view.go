// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"cmp"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Row is one feed of one watched address, as the page and the API show
// it: by its label, never its clear address (outside labels.address:
// email, where the label is the address).
type Row struct {
	Address string `json:"address"` // the address label
	Account string `json:"account"`
	// Owner are the address's owner labels (owner_labels), as
	// breach_address_info serves them: whom the page concerns.
	Owner    []OwnerLabel `json:"owner,omitempty"`
	Source   string       `json:"source"`
	Exposure `json:"exposure"`
	// LastRefresh is when the exporter last read the address from the
	// API: what it saw last is as of then.
	LastRefresh time.Time `json:"last_refresh,omitzero"`
	// CriticalAt is when the exporter accepted the feed's latest critical
	// webhook.
	CriticalAt      time.Time `json:"critical_at,omitzero"`
	Acknowledgement *Ack      `json:"acknowledgement,omitempty"`
}

// OwnerLabel is one owner label of an address.
type OwnerLabel struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Exposure is what the API last said of a feed for an address.
type Exposure struct {
	Breaches          int64     `json:"breaches"`
	PlaintextPassword bool      `json:"plaintext_password"`
	FieldsExposed     []string  `json:"fields_exposed"`
	Since             time.Time `json:"last_changed_at,omitzero"` // the feed's last change
}

// Ack is the acknowledgement in force for a row, and the exporter's
// decision on it (acknowledge.Entry.Covers).
type Ack struct {
	By        string    `json:"by"`
	Comment   string    `json:"comment"`
	HandledAt time.Time `json:"handled_at"`
	// Covers: nothing seen after Effective; otherwise news reopened it.
	Covers    bool      `json:"covers"`
	Effective time.Time `json:"effective_at"`
	Origin    string    `json:"origin"` // "file" or "page"
	// Source is the entry's feed: the row's, or empty for one that
	// acknowledges every feed of the address.
	Source string `json:"source"`
}

// rowsOf returns the rows of e, in feed order: the feeds the API lists
// and those only a critical webhook named.
func rowsOf(e *watchlist.Entry, acks *acknowledge.Set) []Row {
	byName := map[string]breach.SourceState{}
	var names []string
	for _, s := range e.Sources {
		byName[s.Source] = s
		names = append(names, s.Source)
	}
	for source, m := range e.Feeds {
		if _, ok := byName[source]; !ok && !m.Critical.IsZero() {
			names = append(names, source)
		}
	}
	slices.Sort(names)
	var owner []OwnerLabel
	for _, l := range e.Owner {
		owner = append(owner, OwnerLabel{Name: l.Name, Value: l.Value})
	}
	out := make([]Row, 0, len(names))
	for _, name := range names {
		s := byName[name]
		r := Row{Address: e.Label, Account: e.Address.AccountName(), Owner: owner, Source: name, LastRefresh: e.LastRefresh,
			CriticalAt: e.Feeds[name].Critical,
			Exposure:   Exposure{Breaches: s.BreachCount, PlaintextPassword: s.HasPlaintextPassword, FieldsExposed: s.FieldsExposed, Since: s.LastChangedAt}}
		if r.Exposure.FieldsExposed == nil {
			r.Exposure.FieldsExposed = []string{}
		}
		r.Acknowledgement = ackOf(e, acks, name)
		out = append(out, r)
	}
	return out
}

// ackOf is the acknowledgement in force for e's feed source and the
// decision on it, as the collector makes it; nil for none.
func ackOf(e *watchlist.Entry, acks *acknowledge.Set, source string) *Ack {
	a, ok := acks.For(e.Address.Key(), source)
	if !ok {
		return nil
	}
	m := e.Feeds[source]
	effective, covers := a.Covers(e.Acknowledged[a.Key()], m.ChangeSeen, m.Critical)
	origin := "file"
	if a.Page {
		origin = "page"
	}
	return &Ack{By: a.By, Comment: a.Comment, HandledAt: a.HandledAt, Covers: covers, Effective: effective, Origin: origin, Source: a.Source}
}

// acknowledgedRows are e's rows with an acknowledgement in force, and a
// row for each entry of a feed e has no row for (one for every feed, or
// one for a feed not seen yet), so that every entry in force is listed.
func acknowledgedRows(e *watchlist.Entry, acks *acknowledge.Set) []Row {
	var out []Row
	shown := map[string]bool{}
	for _, r := range rowsOf(e, acks) {
		if r.Acknowledgement != nil {
			out = append(out, r)
			shown[r.Acknowledgement.Source] = true
		}
	}
	for _, a := range acks.ForAddress(e.Address.Key()) {
		if shown[a.Source] {
			continue
		}
		shown[a.Source] = true
		out = append(out, Row{Address: e.Label, Account: e.Address.AccountName(), Source: a.Source, LastRefresh: e.LastRefresh,
			Exposure: Exposure{FieldsExposed: []string{}}, Acknowledgement: ackOf(e, acks, a.Source)})
	}
	return out
}

// find returns the watched entry that address names: its label, or the
// address as configured.
func (h *Handler) find(address string) (watchlist.Entry, bool) {
	if address == "" {
		return watchlist.Entry{}, false
	}
	view := h.o.Watchlist.View()
	k := breach.Key(address)
	for _, e := range view.Entries {
		if e.Label == address || e.Address.Key() == k {
			return e, true
		}
	}
	return watchlist.Entry{}, false
}

// listed returns the rows with an acknowledgement in force, in label and
// feed order, at most MaxListed, and how many more there are.
func (h *Handler) listed() ([]Row, int) {
	acks := h.o.Config.Load().Acknowledgements
	view := h.o.Watchlist.View()
	var out []Row
	for i := range view.Entries {
		e := &view.Entries[i]
		if len(acks.ForAddress(e.Address.Key())) == 0 {
			continue
		}
		out = append(out, acknowledgedRows(e, acks)...)
	}
	slices.SortFunc(out, func(a, b Row) int { return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Source, b.Source)) })
	if len(out) > MaxListed {
		return out[:MaxListed], len(out) - MaxListed
	}
	return out, 0
}
