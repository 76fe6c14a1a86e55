// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"fmt"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

func TestUnknownValuesAreBoundedAndCounted(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	k := breach.Key("a@example.com")
	// Every answer brings a new made-up feed with a new made-up field.
	var sources []breach.SourceState
	for i := range MaxUnknownValues + 4 {
		sources = append(sources, breach.SourceState{Source: fmt.Sprintf("feed%02d", i), FieldsExposed: []string{fmt.Sprintf("field%02d", i), "password"}})
	}
	sources = append(sources, breach.SourceState{Source: "archive", FieldsExposed: []string{"new-field"}})
	r.Answered(k, breach.Verified, sources, at)

	e, _ := entry(t, r, "a@example.com")
	if got := len(e.Sources); got != MaxUnknownValues+1 {
		t.Errorf("%d feeds kept, want %d unknown ones and the known archive", got, MaxUnknownValues)
	}
	if e.Sources[len(e.Sources)-1].Source != "archive" || len(e.Sources[len(e.Sources)-1].FieldsExposed) != 0 {
		t.Errorf("a known feed must stay, without the 17th unknown field: %+v", e.Sources[len(e.Sources)-1])
	}
	dropped := r.View().Dropped
	if dropped[LabelSource] != 4 || dropped[LabelField] != 1 {
		t.Errorf("dropped %v, want 4 sources and 1 field", dropped)
	}
	// The same values again are admitted: the vocabulary is for the life
	// of the process, not per answer.
	r.Answered(k, breach.Verified, sources[:3], at)
	if e, _ := entry(t, r, "a@example.com"); len(e.Sources) != 3 {
		t.Errorf("admitted values refused on their second appearance: %d feeds", len(e.Sources))
	}

	// Alerts share the vocabularies.
	if got := r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "feed99", Severity: "critical"}); got != AlertTracked {
		t.Fatalf("RecordAlert = %v", got)
	}
	r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "feed00", Severity: "sev-new"})
	for i := range MaxUnknownValues + 1 {
		r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "index", Severity: fmt.Sprintf("sev%02d", i)})
	}
	e, _ = entry(t, r, "a@example.com")
	if _, ok := e.Alerts.Value(NewDatabases, "feed99", ""); ok {
		t.Error("an alert from a feed past the vocabulary was counted under the address")
	}
	if v, _ := e.Alerts.Value(AlertsBySeverity, "feed00", "sev-new"); v != 1 {
		t.Error("an admitted feed's alert with a new severity was not counted")
	}
	severities := 0
	for _, c := range e.Alerts.Counts() {
		if c.Family == AlertsBySeverity {
			severities++
		}
	}
	if got := severities; got != MaxUnknownValues {
		t.Errorf("%d severity series, want %d: the 16 unknown severities", got, MaxUnknownValues)
	}
	dropped = r.View().Dropped
	if dropped[LabelSource] != 5 || dropped[LabelSeverity] != 2 {
		t.Errorf("dropped %v, want 5 sources and 2 severities", dropped)
	}

	for i := range MaxUnknownValues + 2 {
		r.SetAccount(breach.DefaultAccount, fmt.Sprintf("plan%02d", i), true)
	}
	if acc := r.View().Accounts[0].Account; acc.Plan != "" || r.View().Dropped[LabelPlan] != 2 {
		t.Errorf("account %+v, dropped %v: a plan past the vocabulary is not exported", acc, r.View().Dropped)
	}
}

// A value is cut to the same length whether it came from the API or an
// alert, so the feed's series and its alert series still join.
func TestLengthCapsAreTheSameOnBothPaths(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	long := strings.Repeat("s", 300)
	r.Answered("a@example.com", breach.Verified, []breach.SourceState{{Source: long, FieldsExposed: []string{long}, SourceDBs: []string{long}}}, at)
	r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: long, Severity: "info", ExposedFields: []string{long}})
	e, _ := entry(t, r, "a@example.com")
	src := e.Sources[0]
	if len(src.Source) != breach.MaxSourceBytes || len(src.FieldsExposed[0]) != breach.MaxFieldBytes || len(src.SourceDBs[0]) != breach.MaxDatabaseBytes {
		t.Fatalf("caps: source %d, field %d, database %d", len(src.Source), len(src.FieldsExposed[0]), len(src.SourceDBs[0]))
	}
	bySeverity, _ := e.Alerts.Value(AlertsBySeverity, src.Source, "info")
	byField, _ := e.Alerts.Value(ExposedFields, src.Source, src.FieldsExposed[0])
	if bySeverity != 1 || byField != 1 {
		t.Errorf("the alert's source and field do not join the feed's: %+v", e.Alerts.Counts())
	}
}

func TestDatabasesPastTheCapAreCounted(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	dbs := make([]string, MaxDatabasesPerFeed+10)
	for i := range dbs {
		dbs[i] = fmt.Sprintf("db-%05d", i)
	}
	dbs = append(dbs, dbs[0]) // a repeat is not a new database
	r.Answered("a@example.com", breach.Verified, []breach.SourceState{{Source: "combolist", SourceDBs: dbs}}, at)
	if got := r.View().Dropped[LabelDatabase]; got != 10 {
		t.Errorf("dropped databases = %v, want 10", got)
	}
}
