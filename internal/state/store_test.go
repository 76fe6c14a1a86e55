package state

import (
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/api"
)

var at = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)

func TestSetAddressesKeepsDataAndDropsRemoved(t *testing.T) {
	s := NewStore()
	s.SetAddresses([]string{"Alice@example.com", "bob@example.com"})
	s.SetBreaches("alice@EXAMPLE.com", api.Breaches{Sources: []api.SourceState{{Source: "archive"}}}, at)

	s.SetAddresses([]string{"alice@example.com", "carol@example.com"}) // bob removed, carol added
	if n := len(s.Snapshot().Addresses); n != 2 {
		t.Fatalf("got %d addresses, want 2", n)
	}
	alice, _ := s.Get("alice@example.com")
	carol, _ := s.Get("carol@example.com")
	if alice == nil || carol == nil {
		t.Fatal("alice or carol is not tracked")
	}
	if alice.State != Verified || len(alice.Sources) != 1 || !alice.LastRefresh.Equal(at) || alice.Email != "Alice@example.com" {
		t.Errorf("alice lost her data across SetAddresses: %+v", alice)
	}
	if carol.State != Pending || !carol.LastRefresh.IsZero() {
		t.Errorf("a new address must start pending: %+v", carol)
	}
	if _, ok := s.Get("bob@example.com"); ok {
		t.Error("bob is still tracked after being removed")
	}
}

func TestWritesForUntrackedAddressesAreIgnored(t *testing.T) {
	s := NewStore()
	s.SetBreaches("ghost@example.com", api.Breaches{}, at)
	s.SetState("ghost@example.com", NotMonitored, at)
	if n := len(s.Snapshot().Addresses); n != 0 {
		t.Errorf("a response for an address removed mid-flight created %d entries", n)
	}
}

func TestStateDropsSourcesAndAddIsOnce(t *testing.T) {
	s := NewStore()
	if !s.Add("dave@example.com") || s.Add("DAVE@example.com") {
		t.Fatal("Add must report true once per address, case-insensitively")
	}
	s.SetBreaches("dave@example.com", api.Breaches{Sources: []api.SourceState{{Source: "index"}}}, at)
	s.SetState("dave@example.com", Unverified, at.Add(time.Minute))
	a, _ := s.Get("dave@example.com")
	if a.State != Unverified || a.Sources != nil || !a.LastRefresh.Equal(at.Add(time.Minute)) {
		t.Errorf("after a 403: %+v", a)
	}
}

func TestAccountKeepsPlanWhenDown(t *testing.T) {
	s := NewStore()
	s.SetAccount("business", true)
	s.SetAccount("", false)
	if got := s.Snapshot().Account; got.Plan != "business" || got.Up {
		t.Errorf("after a failed /me: %+v, want plan kept and up false", got)
	}
}
