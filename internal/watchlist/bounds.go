package watchlist

import (
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
	if breach.Known(v.known, value) || v.unknown[value] {
		return true
	}
	if len(v.unknown) >= MaxUnknownValues {
		return false
	}
	v.unknown[value] = true
	return true
}

// bounds holds the vocabularies and what they refused. Guarded by the
// watchlist's lock.
type bounds struct {
	sources, fields, severities, plans *vocabulary
	dropped                            map[string]float64 // by label
}

func newBounds() bounds {
	b := bounds{
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

// sources bounds an API answer's feeds: values cut to their label caps, a
// feed or field past its vocabulary dropped, and the database names counted
// past MaxDatabasesPerFeed (the collector exports that many, in name order).
// The input is not modified.
func (b *bounds) boundSources(in []breach.SourceState) []breach.SourceState {
	out := make([]breach.SourceState, 0, len(in))
	for _, s := range in {
		s.Source = breach.LabelValue(s.Source, breach.MaxSourceBytes)
		if !b.sources.admit(s.Source) {
			b.dropped[LabelSource]++
			continue
		}
		s.FieldsExposed = b.boundFields(s.FieldsExposed)
		dbs := make([]string, len(s.SourceDBs))
		for i, db := range s.SourceDBs {
			dbs[i] = breach.LabelValue(db, breach.MaxDatabaseBytes)
		}
		s.SourceDBs = dbs
		if n := len(breach.Distinct(dbs)); n > MaxDatabasesPerFeed {
			b.dropped[LabelDatabase] += float64(n - MaxDatabasesPerFeed)
		}
		out = append(out, s)
	}
	return out
}

// boundAlert bounds an alert's values; a source past its vocabulary makes
// the alert countable under no series of the address (ok false), a severity
// past its vocabulary leaves breach_alerts_total alone (noSeverity).
func (b *bounds) boundAlert(d AlertDelta) (bounded AlertDelta, ok, noSeverity bool) {
	d.Source = breach.LabelValue(d.Source, breach.MaxSourceBytes)
	if !b.sources.admit(d.Source) {
		b.dropped[LabelSource]++
		return d, false, false
	}
	d.Severity = breach.LabelValue(d.Severity, breach.MaxValueBytes)
	if !b.severities.admit(d.Severity) {
		b.dropped[LabelSeverity]++
		noSeverity = true
	}
	d.ExposedFields = b.boundFields(d.ExposedFields)
	return d, true, noSeverity
}

// boundFields cuts field names to their cap and leaves out those past the
// vocabulary; the input is not modified.
func (b *bounds) boundFields(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, 0, len(in))
	for _, f := range in {
		f = breach.LabelValue(f, breach.MaxFieldBytes)
		if !b.fields.admit(f) {
			b.dropped[LabelField]++
			continue
		}
		out = append(out, f)
	}
	return out
}

// boundPlan returns the plan to export, "" when it is past its vocabulary.
func (b *bounds) boundPlan(plan string) string {
	plan = breach.LabelValue(plan, breach.MaxValueBytes)
	if !b.plans.admit(plan) {
		b.dropped[LabelPlan]++
		return ""
	}
	return plan
}
