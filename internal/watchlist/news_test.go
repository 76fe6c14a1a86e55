// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// News counts only between two 200 answers: the first scan of an address,
// and the first after a 403, are its initial state, not news.
func TestNewsCountsChangesBetweenAnswers(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "erin@example.com"}}, breach.LabelEmail, 1000)
	k := breach.Key("erin@example.com")
	news := func() News {
		t.Helper()
		e, _ := entry(t, r, "erin@example.com")
		return e.News
	}
	first := []breach.SourceState{{Source: "index", SourceDBs: []string{"a"}, FieldsExposed: []string{"password", "username"}}}
	r.Answered(k, breach.Verified, first, at)
	if n := news(); n != (News{}) {
		t.Fatalf("after the first scan: %+v, want nothing", n)
	}
	r.Answered(k, breach.Verified, first, at.Add(time.Minute))
	if n := news(); n != (News{}) {
		t.Fatalf("after the same answer: %+v, want nothing", n)
	}
	// index: one database and the phone are new, username is not
	// sensitive, the repeated database counts once; archive is scanned for
	// the first time: its database and dob are new.
	r.Answered(k, breach.Verified, []breach.SourceState{
		{Source: "index", SourceDBs: []string{"a", "b", "b"}, FieldsExposed: []string{"password", "username", "phone", "ip"}},
		{Source: "archive", SourceDBs: []string{"c"}, FieldsExposed: []string{"dob"}},
	}, at.Add(2*time.Minute))
	if n, want := news(), (News{NewDatabases: 2, SensitiveFields: 2}); n != want {
		t.Fatalf("after the change: %+v, want %+v", n, want)
	}
	r.Answered(k, breach.Unverified, nil, at.Add(3*time.Minute))
	r.Answered(k, breach.Verified, []breach.SourceState{{Source: "enriched", SourceDBs: []string{"d"}, FieldsExposed: []string{"address"}}}, at.Add(4*time.Minute))
	if n, want := news(), (News{NewDatabases: 2, SensitiveFields: 2}); n != want {
		t.Errorf("after a 403 and a new first scan: %+v, want %+v (unchanged)", n, want)
	}
}
