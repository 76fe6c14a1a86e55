// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

func TestLooksLikeAddress(t *testing.T) {
	for value, want := range map[string]bool{
		"alice.secret@example.com":            true,
		"dump of bob@example.org, 2019":       true,
		"alice@localhost":                     true,
		"\"a b\"@example.com":                 true,
		"ü@例え.jp":                             true,
		"x@[192.0.2.1]":                       true,
		"LinkedIn 2012":                       false,
		"@handle":                             false,
		"trailing@":                           false,
		"a @ b":                               false,
		"Collection #1":                       false,
		"":                                    false,
		strings.Repeat("x", 300) + "@e.com":   true,
		strings.Repeat("@", 10):               false,
		"password":                            false,
		strings.Repeat("y", 100) + "@@e.com":  false,
		"combolist-" + strings.Repeat("9", 9): false,
	} {
		if got := looksLikeAddress(value); got != want {
			t.Errorf("looksLikeAddress(%.40q) = %v, want %v", value, got, want)
		}
	}
}

// Under hmac labels, a value from the API or an alert
// that looks like an address becomes Redacted in every label (counted as
// dropped), and the feed, field, database or alert it named still counts.
func TestAddressLikeValuesAreRedacted(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.Keyed{Mode: breach.LabelHMAC, Key: []byte("0123456789abcdef")}, 0)
	r.Answered("a@example.com", breach.Verified, []breach.SourceState{
		{Source: "alice.secret@example.com", BreachCount: 4, SourceDBs: []string{"LinkedIn 2012", "carol@example.com dump", "dave@example.org"},
			FieldsExposed: []string{"password", "erin@example.com"}},
		{Source: "index", SourceDBs: []string{"frank@example.net"}},
	}, at)
	r.SetAccount(breach.DefaultAccount, "grace@example.com", true)
	r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "heidi@example.com", Severity: "ivan@example.com", ExposedFields: []string{"judy@example.com"}})

	view := r.View()
	if view.Accounts[0].Account.Plan != Redacted {
		t.Errorf("plan %q, want %q", view.Accounts[0].Account.Plan, Redacted)
	}
	e := view.Entries[0]
	if len(e.Sources) != 2 {
		t.Fatalf("sources %+v: a redacted feed must still be kept", e.Sources)
	}
	s := e.Sources[0]
	if s.Source != Redacted || s.BreachCount != 4 || strings.Join(s.SourceDBs, ",") != "LinkedIn 2012,"+Redacted ||
		strings.Join(s.FieldsExposed, ",") != "password,"+Redacted {
		t.Errorf("feed %+v: want the source, one database and one field redacted, the rest kept", s)
	}
	if got := strings.Join(e.Sources[1].SourceDBs, ","); got != Redacted {
		t.Errorf("index databases %q, want %q", got, Redacted)
	}
	for _, c := range e.Alerts.Counts() {
		if strings.Contains(c.Source+c.Label, "@") {
			t.Errorf("alert series %+v holds an address", c)
		}
	}
	if v, _ := e.Alerts.Value(AlertsBySeverity, Redacted, Redacted); v != 1 {
		t.Errorf("the alert was not counted under the redacted source and severity: %+v", e.Alerts.Counts())
	}
	want := map[string]float64{LabelSource: 2, LabelDatabase: 3, LabelField: 2, LabelSeverity: 1, LabelPlan: 1}
	for l, n := range want {
		if view.Dropped[l] != n {
			t.Errorf("dropped %s = %v, want %v (all: %v)", l, view.Dropped[l], n, view.Dropped)
		}
	}
}

// A snapshot written before redaction existed is redacted on restore.
func TestRestoreRedactsAddresses(t *testing.T) {
	r := New()
	r.Restore(Saved{Accounts: []SavedAccount{{Name: breach.DefaultAccount, Plan: "a@b.example"}}, Entries: []SavedEntry{{
		Address: breach.Address{Email: "a@example.com"},
		State:   breach.Verified,
		Sources: []breach.SourceState{{Source: "archive", SourceDBs: []string{"x@example.com"}}},
		Alerts:  []AlertCount{{Family: ExposedFields, Source: "index", Label: "y@example.com", Value: 2}},
	}}}, at)
	view := r.View()
	e := view.Entries[0]
	if view.Accounts[0].Account.Plan != Redacted || e.Sources[0].SourceDBs[0] != Redacted {
		t.Errorf("plan %q, databases %q: want them redacted", view.Accounts[0].Account.Plan, e.Sources[0].SourceDBs)
	}
	if v, _ := e.Alerts.Value(ExposedFields, "index", Redacted); v != 2 {
		t.Errorf("alert counts %+v: want the field redacted, its count kept", e.Alerts.Counts())
	}
}
