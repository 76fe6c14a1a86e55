// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

var at = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)

// discovered counts the discovered addresses a snapshot holds.
func discovered(r *List) int {
	n := 0
	for _, e := range r.View().Entries {
		if e.Address.Discovered {
			n++
		}
	}
	return n
}

// entry finds one address in a view, as the collector sees it.
func entry(t *testing.T, r *List, email string) (Entry, bool) {
	t.Helper()
	for _, e := range r.View().Entries {
		if e.Address.Key() == breach.Key(email) {
			return e, true
		}
	}
	return Entry{}, false
}

func TestSyncKeepsDataAndDropsRemoved(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "Alice@example.com"}, {Email: "bob@example.com"}}, breach.LabelEmail, 1000)
	r.Answered(breach.Key("alice@EXAMPLE.com"), breach.Verified, []breach.SourceState{{Source: "archive"}}, at)

	r.Sync(nil, []breach.Address{{Email: "Alice@example.com"}, {Email: "carol@example.com"}}, breach.LabelEmail, 1000) // bob removed, carol added
	if n := r.Len(); n != 2 {
		t.Fatalf("got %d addresses, want 2", n)
	}
	alice, okA := entry(t, r, "alice@example.com")
	carol, okC := entry(t, r, "carol@example.com")
	if !okA || !okC {
		t.Fatal("alice or carol is not watched")
	}
	if alice.State != breach.Verified || len(alice.Sources) != 1 || !alice.LastRefresh.Equal(at) || alice.Address.Email != "Alice@example.com" {
		t.Errorf("alice lost her data across Sync: %+v", alice)
	}
	if carol.State != breach.Pending || !carol.LastRefresh.IsZero() {
		t.Errorf("a new address must start pending: %+v", carol)
	}
	if _, ok := entry(t, r, "bob@example.com"); ok {
		t.Error("bob is still watched after being removed")
	}
}

func TestWritesForUnwatchedAddressesAreIgnored(t *testing.T) {
	r := New()
	r.Answered("ghost@example.com", breach.Verified, nil, at)
	r.Answered("ghost@example.com", breach.NotMonitored, nil, at)
	r.Started("ghost@example.com", at)
	if _, ok := r.Failed("ghost@example.com"); ok {
		t.Error("Failed reported a schedule for an unwatched address")
	}
	if n := r.Len(); n != 0 {
		t.Errorf("a response for an address removed mid-flight created %d entries", n)
	}
}

func TestAnswerDropsSourcesOn403AndEndsBackoff(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "dave@example.com"}}, breach.LabelEmail, 1000)
	k := breach.Key("dave@example.com")
	r.Answered(k, breach.Verified, []breach.SourceState{{Source: "index"}}, at)
	if sch, _ := r.Failed(k); sch.Failures != 1 {
		t.Fatalf("Failures = %d after one failure", sch.Failures)
	}
	if failed := r.Answered(k, breach.Unverified, nil, at.Add(time.Minute)); failed != 1 {
		t.Errorf("Answered reported %d earlier failures, want 1", failed)
	}
	a, _ := entry(t, r, "dave@example.com")
	if a.State != breach.Unverified || a.Sources != nil || !a.LastRefresh.Equal(at.Add(time.Minute)) || a.Schedule.Failures != 0 {
		t.Errorf("after a 403: %+v", a)
	}
}

func TestAccountKeepsPlanWhenDown(t *testing.T) {
	r := New()
	r.SetAccount(breach.DefaultAccount, "business", true)
	r.SetAccount(breach.DefaultAccount, "", false)
	if got := r.View().Accounts[0].Account; got.Plan != "business" || got.Up {
		t.Errorf("after a failed /me: %+v, want plan kept and up false", got)
	}
}

func TestLabelsFollowTheMode(t *testing.T) {
	r := New()
	cfg := []breach.Address{{Email: "Alice@Example.com", Alias: "a"}}
	r.Sync(nil, cfg, breach.LabelEmail, 1000)
	if r.RecordAlert(breach.DefaultAccount, "New.User@Example.org", AlertDelta{Source: "index", Severity: "info"}) != AlertDiscovered {
		t.Fatal("the alert did not discover its address")
	}
	labels := func() map[string]string {
		out := map[string]string{}
		for _, e := range r.View().Entries {
			out[e.Address.Key()] = e.Label
		}
		return out
	}
	if got := labels(); got["alice@example.com"] != "Alice@Example.com" || got["new.user@example.org"] != "new.user@example.org" {
		t.Errorf("email mode labels: %v", got)
	}
	r.Sync(nil, cfg, breach.LabelAlias, 1000)
	if got := labels(); got["alice@example.com"] != "a" || got["new.user@example.org"] != breach.HashLabel("new.user@example.org") {
		t.Errorf("alias mode labels: %v", got)
	}
}

func TestRecordAlertCountsAndQueues(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}}, breach.LabelEmail, 1000)
	<-r.Changed(breach.DefaultAccount)
	d := AlertDelta{Source: "combolist", Severity: "critical", NewDatabases: 2, ExposedFields: []string{"password", "hash"}, NewPlaintext: true, ObservedAt: at}
	if got := r.RecordAlert(breach.DefaultAccount, "ALICE@example.com", d); got != AlertTracked {
		t.Fatalf("RecordAlert = %v, want AlertTracked", got)
	}
	select {
	case <-r.Changed(breach.DefaultAccount):
	default:
		t.Fatal("an alert for a watched address did not wake the scheduler")
	}
	d.ObservedAt = at.Add(-time.Hour) // older: the last-observed time stays
	d.NewPlaintext = false
	r.RecordAlert(breach.DefaultAccount, "alice@example.com", d)

	a, _ := entry(t, r, "alice@example.com")
	if a.Schedule.Urgent == 0 {
		t.Error("the alerted address is not queued for a re-read")
	}
	al := a.Alerts
	value := func(f AlertFamily, label string) float64 { v, _ := al.Value(f, "combolist", label); return v }
	if value(AlertsBySeverity, "critical") != 2 || value(NewDatabases, "") != 4 || value(ExposedFields, "hash") != 2 ||
		value(NewPlaintext, "") != 1 || value(LastObserved, "") != float64(at.Unix()) {
		t.Errorf("alert counts: %+v", al.Counts())
	}
}

func TestDiscoveryIsBoundedAndFollowsTheConfig(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}}, breach.LabelEmail, 0)
	d := AlertDelta{Source: "index", Severity: "info"}
	if got := r.RecordAlert(breach.DefaultAccount, "new1@example.com", d); got != AlertUntracked {
		t.Errorf("with discovery off: %v, want AlertUntracked", got)
	}
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}}, breach.LabelEmail, 2)
	for i, want := range []AlertOutcome{AlertDiscovered, AlertDiscovered, AlertRefused, AlertTracked} {
		email := []string{"new1@example.com", "new2@example.com", "new3@example.com", "NEW1@example.com"}[i]
		if got := r.RecordAlert(breach.DefaultAccount, email, d); got != want {
			t.Errorf("alert %d (%s): %v, want %v", i, email, got, want)
		}
	}
	if r.Len() != 3 || discovered(r) != 2 {
		t.Fatalf("Len %d, Discovered %d; want 3 and 2", r.Len(), discovered(r))
	}
	// A 404 drops a discovered address, never a configured one.
	if r.Drop("alice@example.com") || !r.Drop("new2@example.com") {
		t.Error("Drop must drop discovered addresses only")
	}
	if got := r.RecordAlert(breach.DefaultAccount, "new3@example.com", d); got != AlertDiscovered {
		t.Errorf("after a drop there is room again: %v", got)
	}
	// A lower limit keeps the oldest discoveries.
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}}, breach.LabelEmail, 1)
	if _, ok := entry(t, r, "new1@example.com"); !ok || discovered(r) != 1 {
		t.Errorf("after lowering the limit to 1: Discovered %d, new1 kept %v; want 1 and true", discovered(r), ok)
	}
	// Configuring a discovered address makes it configured; a reload with
	// discovery off drops the rest with all their data.
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}, {Email: "new1@example.com"}}, breach.LabelEmail, 0)
	if r.Len() != 2 || discovered(r) != 0 {
		t.Errorf("after a reload without discovery: Len %d, Discovered %d; want 2 and 0", r.Len(), discovered(r))
	}
	if e, _ := entry(t, r, "new1@example.com"); e.Address.Discovered || e.Alerts == nil {
		t.Errorf("a discovered address now configured must keep its counts and lose its discovered mark: %+v", e)
	}
	// Discovery off: no alert, racing the reload or not, adds an address.
	if got := r.RecordAlert(breach.DefaultAccount, "new9@example.com", d); got != AlertUntracked {
		t.Errorf("after a reload without discovery: %v, want AlertUntracked", got)
	}
}

// Readers keep entries without locking: a later alert must not change a
// snapshot already taken.
func TestSnapshotIsNotModifiedLater(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "alice@example.com"}}, breach.LabelEmail, 1000)
	r.RecordAlert(breach.DefaultAccount, "alice@example.com", AlertDelta{Source: "index", Severity: "info"})
	before, _ := entry(t, r, "alice@example.com")
	r.RecordAlert(breach.DefaultAccount, "alice@example.com", AlertDelta{Source: "index", Severity: "info"})
	if got, _ := before.Alerts.Value(AlertsBySeverity, "index", "info"); got != 1 {
		t.Errorf("a snapshot's count changed to %v after a later alert", got)
	}
}

// A reload that removes an account wakes its scheduler, which then finds
// the account gone and returns: it must not sleep on until its next timer.
func TestSyncWakesARemovedAccount(t *testing.T) {
	r := New()
	r.Sync([]string{"a", "b"}, nil, breach.LabelEmail, 0)
	changed := r.Changed("a")
	for len(changed) > 0 {
		<-changed
	}
	r.Sync([]string{"b"}, nil, breach.LabelEmail, 0)
	select {
	case <-changed:
	default:
		t.Fatal("the removed account's channel was not signalled")
	}
	if r.Changed("a") != nil {
		t.Error("a removed account still has a channel")
	}
}
