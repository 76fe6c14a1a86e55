// SPDX-License-Identifier: Apache-2.0

// Package acknowledge holds the acknowledgements file: which exposures of
// which watched addresses a person has handled, up to when, by whom and
// why. An acknowledgement covers everything the exporter saw of a feed for
// the address up to its handled_at (or up to when the exporter loaded it,
// if earlier: Covers); a change the exporter sees after that is news again.
//
// The file is parsed through yaml nodes so that every error names the
// line of the entry it is about, and strictly: an unknown key is an error.
package acknowledge

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// Bounds on the free text of an entry. Both become label values of every
// series of the acknowledged feeds: an over-long value is an error naming
// its line, never cut, since the file's author can shorten it and a cut
// comment could read as something else.
const (
	MaxByBytes      = 64
	MaxCommentBytes = 256
)

// MaxReported is how many problems of one file Parse returns, and how
// many warnings Unwatched returns; a last one counts the rest. A file of
// tens of thousands of bad entries (a generated one gone wrong) would
// otherwise make a reload's answer and the log as long as the file.
const MaxReported = 20

// MaxFutureSkew is how far ahead of the exporter's clock a handled_at may
// be: a later one would acknowledge changes nobody has seen yet.
const MaxFutureSkew = 5 * time.Minute

// Entry is one acknowledgement.
type Entry struct {
	Address   string    // as written in the file
	Source    string    // the feed; empty means every feed
	HandledAt time.Time // everything the feed reported up to this time is handled
	By        string
	Comment   string
	Line      int // of the entry in the file; 0 for one made on the page
	// Page marks an entry made on the acknowledgement page or its API
	// (internal/ackweb) rather than written in the file.
	Page bool
}

// Set is the acknowledgements in force. The zero Set and a nil *Set hold
// none.
type Set struct {
	entries []Entry
	byKey   map[string][]int // address key to indexes into entries
}

// Load reads and parses the file at path; now bounds handled_at. Errors
// name the file and, where there is one, the line. The file is read
// through fileread: a named pipe, a device or a file over
// fileread.MaxAcknowledgementsBytes is refused before any parsing.
func Load(path string, now time.Time) (*Set, error) {
	data, err := fileread.Read(path, fileread.MaxAcknowledgementsBytes)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data, now)
	if err != nil {
		var named []error
		for _, e := range Problems(err) {
			named = append(named, fmt.Errorf("%s: %w", path, e))
		}
		return nil, errors.Join(named...)
	}
	return s, nil
}

// Problems splits an error of Load or Parse into its problems, one an
// entry's key or check, so that each is reported on its own.
func Problems(err error) []error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// Parse parses the file's contents. Its errors name an entry by its line,
// never by its address or by a value that may be one (labels.address may be
// hash or hmac, whose logs must not show addresses); at most MaxReported
// problems are returned, then how many more there are.
func Parse(data []byte, now time.Time) (*Set, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	s := &Set{byKey: map[string][]int{}}
	if len(doc.Content) == 0 { // an empty file acknowledges nothing
		return s, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, lineError(root, "expected a mapping with the key acknowledgements")
	}
	var list *yaml.Node
	for i := 0; i < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value != "acknowledgements" {
			return nil, lineError(k, "unknown key %s", shown(k.Value))
		}
		if list != nil {
			return nil, lineError(k, "duplicate key %q", k.Value)
		}
		list = v
	}
	if list == nil || list.Tag == "!!null" {
		return s, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, lineError(list, "acknowledgements: expected a list of entries")
	}
	// Every entry is checked, and every problem of each is reported.
	var problems []error
	for _, n := range list.Content {
		e, errs := parseEntry(n, now)
		if len(errs) > 0 {
			problems = append(problems, errs...)
			continue
		}
		k := breach.Key(e.Address)
		s.byKey[k] = append(s.byKey[k], len(s.entries))
		s.entries = append(s.entries, e)
	}
	if len(problems) > 0 {
		return nil, errors.Join(capped(problems, "problems")...)
	}
	return s, nil
}

// capped keeps the first MaxReported of errs and counts the rest.
func capped(errs []error, what string) []error {
	if len(errs) <= MaxReported {
		return errs
	}
	return append(errs[:MaxReported:MaxReported], fmt.Errorf("and %d more %s not shown", len(errs)-MaxReported, what))
}

// shown quotes a value from the file for an error, unless it may be an
// address: a key or a feed typed where an address belongs (or the other
// way round) must not put the address into a log.
func shown(v string) string {
	if strings.Contains(v, "@") {
		return "(a value with @, not shown)"
	}
	return strconv.Quote(v)
}

func parseEntry(n *yaml.Node, now time.Time) (Entry, []error) {
	if n.Kind != yaml.MappingNode {
		return Entry{Line: n.Line}, []error{lineError(n, "acknowledgement: expected a mapping (address, source, handled_at, by, comment)")}
	}
	e, hasHandledAt, errs := readEntry(n)
	for _, msg := range e.problems(hasHandledAt, now) {
		errs = append(errs, lineError(n, "%s", msg))
	}
	return e, errs
}

// readEntry reads the keys of the mapping n. hasHandledAt: the entry has
// the key, whether its value is a time or not.
func readEntry(n *yaml.Node) (e Entry, hasHandledAt bool, errs []error) {
	e.Line = n.Line
	fail := func(format string, args ...any) { errs = append(errs, lineError(n, format, args...)) }
	seen := map[string]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		// Errors name the entry's line, and the key's where it differs.
		if seen[k.Value] {
			fail("acknowledgement: duplicate key %s at line %d", shown(k.Value), k.Line)
			continue
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode {
			fail("acknowledgement: %s at line %d: expected a single value", shown(k.Value), k.Line)
			continue
		}
		switch k.Value {
		case "address":
			e.Address = v.Value
		case "source":
			e.Source = v.Value
		case "handled_at":
			t, err := time.Parse(time.RFC3339, v.Value)
			if err != nil {
				fail("acknowledgement: handled_at %s at line %d is not an RFC 3339 time such as 2026-11-20T09:00:00Z", shown(v.Value), v.Line)
				continue
			}
			e.HandledAt = t
		case "by":
			e.By = v.Value
		case "comment":
			e.Comment = v.Value
		default:
			fail("acknowledgement: unknown key %s at line %d", shown(k.Value), k.Line)
		}
	}
	return e, seen["handled_at"], errs
}

// problems are what is wrong with the values of the entry e, read at now.
func (e Entry) problems(hasHandledAt bool, now time.Time) []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case e.Address == "":
		fail("acknowledgement: address is missing")
	case !breach.ValidEmail(e.Address):
		fail("acknowledgement: address %s is not an email address", shown(e.Address))
	}
	if e.Source != "" && !breach.Known(breach.KnownSources, e.Source) {
		fail("acknowledgement: unknown feed %s in source (one of %v, or omitted for every feed)", shown(e.Source), breach.KnownSources)
	}
	if e.HandledAt.IsZero() && !hasHandledAt {
		fail("acknowledgement: handled_at is missing")
	} else if e.HandledAt.After(now.Add(MaxFutureSkew)) {
		fail("acknowledgement: handled_at %s is in the future: it would acknowledge what the feed has not reported yet", e.HandledAt.Format(time.RFC3339))
	}
	if e.By == "" {
		fail("acknowledgement: by is missing (who handled it)")
	}
	for _, f := range []struct {
		name, value string
		max         int
	}{{"by", e.By, MaxByBytes}, {"comment", e.Comment, MaxCommentBytes}} {
		if len(f.value) > f.max || !utf8.ValidString(f.value) {
			fail("acknowledgement: %s must be valid UTF-8 of at most %d bytes", f.name, f.max)
		}
	}
	return out
}

func lineError(n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, args...))
}

// Entries returns every entry, in file order.
func (s *Set) Entries() []Entry {
	if s == nil {
		return nil
	}
	return slices.Clone(s.entries)
}

// For returns the acknowledgement in force for the address with key and
// the feed source: of the entries naming the address with that feed or
// with none, the latest handled_at (the first of equals in the file).
func (s *Set) For(key, source string) (Entry, bool) {
	var best Entry
	found := false
	if s == nil {
		return best, false
	}
	for _, i := range s.byKey[key] {
		e := s.entries[i]
		if e.Source != "" && e.Source != source {
			continue
		}
		if !found || e.HandledAt.After(best.HandledAt) {
			best, found = e, true
		}
	}
	return best, found
}

// WithPage returns the file's entries of s (those made on the page left
// out) followed by page, each of which must be valid (Check): one set, in
// which For picks the entry in force by the one rule, the latest
// handled_at. s is not changed.
func WithPage(s *Set, page []Entry) *Set {
	out := &Set{byKey: map[string][]int{}}
	add := func(e Entry) {
		k := breach.Key(e.Address)
		out.byKey[k] = append(out.byKey[k], len(out.entries))
		out.entries = append(out.entries, e)
	}
	for _, e := range s.Entries() {
		if !e.Page {
			add(e)
		}
	}
	for _, e := range page {
		e.Page = true
		add(e)
	}
	return out
}

// HasPage reports whether s holds an entry made on the page.
func (s *Set) HasPage() bool {
	return s != nil && slices.ContainsFunc(s.entries, func(e Entry) bool { return e.Page })
}

// Check returns what is wrong with an entry made outside the file (the
// page, its API), read at now, as the file's entries are checked: nil when
// nothing is.
func (e Entry) Check(now time.Time) error {
	if p := e.problems(true, now); len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// Covers decides, on the exporter's clock alone, whether the
// acknowledgement e covers a feed's current state, and from which moment.
// loaded is when the exporter first loaded e; changed is when it first saw
// the feed's current last_changed_at; critical is when it accepted the
// feed's latest critical webhook (zero: none).
//
// The service's own stamps are not compared with handled_at: a handled_at
// a few minutes ahead, or a service clock behind the person's, would let a
// change the exporter saw after the acknowledgement pass as handled. So
// the acknowledgement takes effect at min(handled_at, loaded): a future
// handled_at counts from its loading. It covers when nothing was first seen
// after that moment; a change seen exactly at it is covered.
func (e Entry) Covers(loaded, changed, critical time.Time) (effective time.Time, covers bool) {
	effective = e.HandledAt
	if !loaded.IsZero() && loaded.Before(effective) {
		effective = loaded
	}
	return effective, !changed.After(effective) && !critical.After(effective)
}

// Key is what identifies an entry to the exporter's memory of when it first
// loaded it: editing by or comment keeps the moment, a new handled_at or
// feed is a new acknowledgement.
type Key struct {
	Source    string
	HandledAt time.Time
}

// Key returns e's Key.
func (e Entry) Key() Key { return Key{Source: e.Source, HandledAt: e.HandledAt.UTC()} }

// ForAddress returns the entries naming the address with key, in file
// order.
func (s *Set) ForAddress(key string) []Entry {
	if s == nil {
		return nil
	}
	out := make([]Entry, 0, len(s.byKey[key]))
	for _, i := range s.byKey[key] {
		out = append(out, s.entries[i])
	}
	return out
}

// Unwatched returns a warning for each entry whose address watched does
// not report as watched (addresses come and go, so this is no error), at
// most MaxReported and then how many more. It names the entry by its line,
// not its address: logs carry no address outside labels.address: email.
func (s *Set) Unwatched(watched func(key string) bool) []error {
	var out []error
	for _, e := range s.Entries() {
		// A page's entry was made for a watched address and has no line.
		if !e.Page && !watched(breach.Key(e.Address)) {
			out = append(out, fmt.Errorf("line %d: the entry's address is not watched", e.Line))
		}
	}
	return capped(out, "entries for addresses not watched")
}

// ErrPageFull is the refusal of one more acknowledgement made on the page
// than the state folder keeps (persist.MaxPageEntries).
var ErrPageFull = errors.New("the page holds as many acknowledgements as it keeps; withdraw some, or write them in the file")
