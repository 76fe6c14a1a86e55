// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"maps"
	"sync"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Bounds on label values from outside. The API and the webhook sender are
// trusted to answer the spec, not to grow memory and series without bound:
// a buggy or compromised one could send a new feed name with every answer.
const (
	// MaxUnknownValues is how many distinct values outside the spec's enum
	// a label may take for the life of the process: enough for the service
	// to add a feed or a field, far too few to flood Prometheus.
	MaxUnknownValues = 16
	// MaxDatabasesPerFeed caps breach_source_database_info per address and
	// feed; breach_source_databases still tells the true number.
	MaxDatabasesPerFeed = 1000
)

// Redacted stands in for a label value from outside that looks like an
// email address (see looksLikeAddress). The value is replaced rather than
// dropped so that the feed, field, database or alert it labels is still
// counted and still fires its alerts; only its name is hidden. It is
// admitted without taking one of a label's MaxUnknownValues.
//
// This holds in every labels.address mode, email included: the mode says
// what the address label shows of the watched addresses, while an address
// in a source, field, severity, plan or database label is someone's
// address the operator never chose to export (or a bug upstream). It also
// keeps the cached values right across a reload that switches the mode,
// since they are not bounded again then.
const Redacted = "redacted"

// The labels whose values the watchlist bounds, as they appear in
// breach_label_values_dropped_total.
const (
	LabelSource   = "source"
	LabelField    = "field"
	LabelSeverity = "severity"
	LabelPlan     = "plan"
	LabelDatabase = "database"
)

// BoundedLabels lists them.
var BoundedLabels = []string{LabelDatabase, LabelField, LabelPlan, LabelSeverity, LabelSource}

// looksLikeAddress reports whether s holds something shaped like an email
// address anywhere in it: an '@' between a character that may end a local
// part and one that may start a domain. It errs on the side of privacy
// ("alice@localhost" and "db@2019" count) and is linear in len(s). It looks
// at the value before it is cut to its label cap, so a cut cannot leave
// half an address behind.
func looksLikeAddress(s string) bool {
	for i := 1; i+1 < len(s); i++ {
		if s[i] == '@' && localPartEnd(s[i-1]) && domainStart(s[i+1]) {
			return true
		}
	}
	return false
}

// localPartEnd: RFC 5322 atext, a dot or the quote that closes a quoted
// local part, or any byte of a UTF-8 sequence (RFC 6531 addresses).
func localPartEnd(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c >= 0x80:
		return true
	}
	for i := range len(atextSymbols) {
		if atextSymbols[i] == c {
			return true
		}
	}
	return false
}

const atextSymbols = "!#$%&'*+-/=?^_`{|}~.\""

// domainStart: a letter, digit or UTF-8 byte of a domain name, or the
// bracket of an address literal.
func domainStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c >= 0x80 || c == '['
}

// safeValue is the value a label from outside takes: Redacted for one that
// looks like an address, otherwise the value cut to max bytes.
func safeValue(raw string, max int) (value string, redacted bool) {
	if looksLikeAddress(raw) {
		return Redacted, true
	}
	return breach.LabelValue(raw, max), false
}

// cleanValues makes each value of values safe (safeValue) and returns the
// results without repeats, in order of first appearance, and how many
// distinct values were redacted. It needs no lock: an answer's database
// names, however many, are cleaned before any is taken. One map lookup a
// value: a redacted value, the only kind counted, is rare.
func cleanValues(values []string, max int) (out []string, redacted int) {
	if len(values) == 0 {
		return nil, 0
	}
	kept := make(map[string]struct{}, len(values)) // safe values
	var redactedRaw map[string]struct{}
	out = make([]string, 0, len(values))
	for _, raw := range values {
		v, r := safeValue(raw, max)
		if r {
			if _, ok := redactedRaw[raw]; !ok {
				if redactedRaw == nil {
					redactedRaw = map[string]struct{}{}
				}
				redactedRaw[raw] = struct{}{}
				redacted++
			}
		}
		if _, ok := kept[v]; !ok {
			kept[v] = struct{}{}
			out = append(out, v)
		}
	}
	return out, redacted
}

// vocabulary admits a label's known values and, for the life of the
// process, the first MaxUnknownValues others.
type vocabulary struct {
	known   []string
	unknown map[string]bool
}

func newVocabulary(known []string) *vocabulary {
	return &vocabulary{known: known, unknown: map[string]bool{}}
}

func (v *vocabulary) admit(value string) bool {
	if value == Redacted || breach.Known(v.known, value) || v.unknown[value] {
		return true
	}
	if len(v.unknown) >= MaxUnknownValues {
		return false
	}
	v.unknown[value] = true
	return true
}

// bounds holds the vocabularies and what they refused or redacted. Its own
// lock, not the watchlist's, guards them: an answer is bounded before the
// watchlist's lock is taken. Lock order: the watchlist's lock may be held
// when mu is taken, never the other way round, and mu is held only for
// work linear in the number of distinct feeds and fields of one answer or
// alert, never its database names.
type bounds struct {
	mu                                 sync.Mutex
	sources, fields, severities, plans *vocabulary
	dropped                            map[string]float64 // by label
}

func newBounds() *bounds {
	b := &bounds{
		sources:    newVocabulary(breach.KnownSources),
		fields:     newVocabulary(breach.KnownFields),
		severities: newVocabulary(breach.KnownSeverities),
		plans:      newVocabulary(breach.KnownPlans),
		dropped:    map[string]float64{},
	}
	for _, l := range BoundedLabels {
		b.dropped[l] = 0
	}
	return b
}

// droppedCounts returns a copy of the counts by label.
func (b *bounds) droppedCounts() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.dropped)
}

// admit returns the safe value of raw for label, whose vocabulary is v, and
// whether it may be exported (admitSafe). Called with b.mu held.
func (b *bounds) admit(label string, v *vocabulary, raw string, max int) (string, bool) {
	value, redacted := safeValue(raw, max)
	return value, b.admitSafe(label, v, value, redacted)
}

// admitSafe reports whether value, a safeValue, may be exported; a redacted
// or refused value is counted. Called with b.mu held.
func (b *bounds) admitSafe(label string, v *vocabulary, value string, redacted bool) bool {
	switch {
	case redacted:
		b.dropped[label]++
		return true // as Redacted
	case !v.admit(value):
		b.dropped[label]++
		return false
	}
	return true
}

// boundSources bounds an API answer's feeds: a repeated feed dropped (the
// first wins, so that every reader sees each feed once), values that look
// like an address redacted, values cut to their label caps, a feed or field
// past its vocabulary dropped, database names and fields without repeats,
// and the database names counted past MaxDatabasesPerFeed (the collector
// exports that many, in name order). The input is not modified.
//
// Everything proportional to the size of the answer is done without any
// lock; b.mu is taken once, for a map lookup per distinct feed and field.
func (b *bounds) boundSources(in []breach.SourceState) []breach.SourceState {
	type cleaned struct {
		source                      string
		sourceRedacted              bool
		dbs, fields                 []string
		redactedDBs, redactedFields int
	}
	prepared := make([]cleaned, len(in))
	for i, s := range in {
		c := &prepared[i]
		c.source, c.sourceRedacted = safeValue(s.Source, breach.MaxSourceBytes)
		c.dbs, c.redactedDBs = cleanValues(s.SourceDBs, breach.MaxDatabaseBytes)
		c.fields, c.redactedFields = cleanValues(s.FieldsExposed, breach.MaxFieldBytes)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]breach.SourceState, 0, len(in))
	feeds := make(map[string]bool, len(in))
	for i, s := range in {
		c := prepared[i]
		if !b.admitSafe(LabelSource, b.sources, c.source, c.sourceRedacted) || feeds[c.source] {
			continue
		}
		feeds[c.source] = true
		s.Source, s.SourceDBs = c.source, c.dbs
		b.dropped[LabelDatabase] += float64(c.redactedDBs + max(len(c.dbs)-MaxDatabasesPerFeed, 0))
		s.FieldsExposed = nil
		if len(c.fields) > 0 {
			s.FieldsExposed = make([]string, 0, len(c.fields))
		}
		b.dropped[LabelField] += float64(c.redactedFields)
		for _, f := range c.fields {
			if b.admitSafe(LabelField, b.fields, f, false) {
				s.FieldsExposed = append(s.FieldsExposed, f)
			}
		}
		out = append(out, s)
	}
	return out
}

// boundAlert bounds an alert's values; a source past its vocabulary makes
// the alert countable under no series of the address (ok false), a severity
// past its vocabulary leaves breach_alerts_total alone (noSeverity).
func (b *bounds) boundAlert(d AlertDelta) (bounded AlertDelta, ok, noSeverity bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d.Source, ok = b.admit(LabelSource, b.sources, d.Source, breach.MaxSourceBytes); !ok {
		return d, false, false
	}
	var severityOK bool
	d.Severity, severityOK = b.admit(LabelSeverity, b.severities, d.Severity, breach.MaxValueBytes)
	d.ExposedFields = b.boundFields(d.ExposedFields)
	return d, true, !severityOK
}

// boundFields makes an alert's field names safe and leaves out those past
// the vocabulary; the input is not modified. Called with b.mu held.
func (b *bounds) boundFields(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, 0, len(in))
	for _, f := range in {
		if f, ok := b.admit(LabelField, b.fields, f, breach.MaxFieldBytes); ok {
			out = append(out, f)
		}
	}
	return out
}

// boundPlan returns the plan to export, "" when it is past its vocabulary.
func (b *bounds) boundPlan(plan string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	plan, ok := b.admit(LabelPlan, b.plans, plan, breach.MaxValueBytes)
	if !ok {
		return ""
	}
	return plan
}
