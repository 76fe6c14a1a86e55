package sim_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// demoRun is the span of demo time the pace test covers.
const demoRun = 15 * time.Minute

// demoPace reads how examples/demo.sh runs the simulator: its default
// sweep interval and whether it holds exposed feeds.
func demoPace(t *testing.T) (time.Duration, bool) {
	t.Helper()
	script, err := os.ReadFile("../../demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SWEEP=\$\{SWEEP:-(\w+)\}$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("demo.sh sets no default SWEEP=${SWEEP:-...}")
	}
	every, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	return every, strings.Contains(string(script), "--sweep.hold-exposed")
}

// feedKey is one address and feed.
type feedKey struct{ address, source string }

// paceReport is what demoRun of sweeps did to the default account.
type paceReport struct {
	alerts, critical int
	// reopened lists each address and feed that changed after the moment
	// it first paged, with when.
	reopened []string
	// criticalTwice lists each address and feed with more than one
	// critical alert.
	criticalTwice []string
	paged         map[feedKey]bool
}

// runDemo sweeps every `every` for demoRun of fake time and watches each
// address and feed of the default account for the moment it first pages:
// its state shows a plaintext password (the exporter's plaintext exposure)
// or a critical alert arrives for it (the critical webhook), at start or
// after any sweep. An on-call person acknowledges the page at once; the
// acknowledgement covers everything the feed reported up to then. From
// that moment any alert for that address and feed, or any move of its
// last_changed_at, is a change the acknowledgement does not cover: the
// page comes back.
func runDemo(t *testing.T, seed int64, every time.Duration, hold bool) paceReport {
	t.Helper()
	s, clock := newSim(t, func(o *sim.Options) { o.Seed, o.HoldExposed = seed, hold })
	addrs := sim.DefaultAddresses()
	r := paceReport{paged: map[feedKey]bool{}}
	changedAt := map[feedKey]time.Time{}
	criticals := map[feedKey]int{}
	// look compares each feed's state with the last look: a feed that had
	// paged before (in wasPaged) must not have changed since.
	look := func(wasPaged map[feedKey]bool) {
		for email, bySource := range states(t, s, addrs) {
			for source, st := range bySource {
				k := feedKey{email, source}
				if wasPaged[k] && !st.LastChangedAt.Equal(changedAt[k]) {
					r.reopened = append(r.reopened, k.address+"/"+k.source+" changed at "+st.LastChangedAt.Format(time.TimeOnly))
				}
				changedAt[k] = st.LastChangedAt
				if st.HasPlaintextPassword {
					r.paged[k] = true
				}
			}
		}
	}
	look(nil)
	for elapsed := every; elapsed <= demoRun; elapsed += every {
		wasPaged := maps.Clone(r.paged)
		clock.Advance(every)
		alerts := s.Sweep(t.Context())
		r.alerts += len(alerts)
		for _, a := range alerts {
			k := feedKey{a.Address, a.Source}
			if wasPaged[k] {
				r.reopened = append(r.reopened, k.address+"/"+k.source+" alerted ("+string(a.Severity)+") at "+a.ObservedAt)
			}
			if a.Severity == breach.Critical {
				r.critical++
				if criticals[k]++; criticals[k] == 2 {
					r.criticalTwice = append(r.criticalTwice, k.address+"/"+k.source)
				}
				r.paged[k] = true
			}
		}
		look(wasPaged)
	}
	return r
}

// TestDemoPaceHoldsAcknowledgements: over 15 minutes of demo time at the
// pace examples/demo.sh runs the simulator (its default sweep interval,
// --sweep.hold-exposed; the demo's seed 1 and nine others), no address and
// feed gets more than one critical alert, and none that has paged (a
// plaintext password in its state or a critical alert received) changes
// again: no alert for it and no move of its last_changed_at, so an
// acknowledgement given the moment it paged still covers it at the end.
// Only News changes it. The sweeps still produce alerts, critical ones
// included, so the demo has pages to rehearse with.
func TestDemoPaceHoldsAcknowledgements(t *testing.T) {
	every, hold := demoPace(t)
	if !hold {
		t.Fatal("demo.sh does not run the simulator with --sweep.hold-exposed")
	}
	for seed := int64(1); seed <= 10; seed++ {
		r := runDemo(t, seed, every, true)
		if len(r.reopened) > 0 || len(r.criticalTwice) > 0 {
			t.Errorf("seed %d: paged feeds changed again: %v; critical twice: %v", seed, r.reopened, r.criticalTwice)
		}
		if r.alerts == 0 || r.critical == 0 {
			t.Errorf("seed %d: %d alerts, %d critical in %s; the demo must still show news", seed, r.alerts, r.critical, demoRun)
		}
		if seed == 1 {
			t.Logf("seed 1, a sweep every %s: %d alerts, %d critical, %d address/feed pairs paged in %s", every, r.alerts, r.critical, len(r.paged), demoRun)
		}
	}
}

// Without holding, the same check fails: sweeps change feeds that paged,
// as the demo did before (an acknowledgement held about 20 s).
func TestDemoPaceCheckFailsWithoutHolding(t *testing.T) {
	every, _ := demoPace(t)
	if r := runDemo(t, 1, every, false); len(r.reopened) == 0 {
		t.Errorf("without HoldExposed no paged feed changed in %s: the check cannot fail", demoRun)
	}
}

// News changes a held feed on demand: a new database with the password in
// plaintext, last_changed_at at the clock's time, its alert delivered; the
// sweeps after it leave the feed alone again.
func TestNewsChangesAHeldFeedOnDemand(t *testing.T) {
	s, clock := newSim(t, func(o *sim.Options) { o.HoldExposed = true })
	ctx := context.Background()
	ctl := s.AdminHandler(ctx)
	const email, source = "alice@example.com", "index"

	clock.Advance(time.Minute)
	rec := admin(t, ctl, "/admin/news", `{"email":"alice@example.com","source":"index"}`)
	wantStatus(t, rec, http.StatusOK)
	var first sim.Alert
	if err := json.Unmarshal(rec.Body.Bytes(), &first); err != nil {
		t.Fatal(err)
	}
	after := feedState(t, s, email, source)
	if !after.HasPlaintextPassword || !after.LastChangedAt.Equal(clock.Now()) || len(first.Delta.NewSourceDBs) != 1 ||
		first.Address != email || first.Source != source {
		t.Fatalf("after news: state %+v, alert %+v", after, first)
	}
	// A second piece of news: a new database again, though the plaintext
	// is no longer new.
	clock.Advance(time.Minute)
	second, err := s.News(ctx, "ALICE@example.com", source)
	if err != nil {
		t.Fatal(err)
	}
	if second.Severity != breach.Warning || second.Delta.HasNewPlaintext || len(second.Delta.NewSourceDBs) != 1 {
		t.Errorf("second news: %+v", second)
	}
	held := feedState(t, s, email, source)
	for range 100 {
		clock.Advance(15 * time.Second)
		for _, a := range s.Sweep(ctx) {
			if a.Address == email && a.Source == source {
				t.Fatalf("a sweep changed the held feed: %+v", a)
			}
		}
	}
	if now := feedState(t, s, email, source); !now.LastChangedAt.Equal(held.LastChangedAt) || !now.LastScannedAt.After(held.LastScannedAt) {
		t.Errorf("held feed after sweeps: %+v, before %+v; want scanned, not changed", now, held)
	}
	for _, body := range []string{
		`{"email":"alice@example.com","source":"pastebin"}`,
		`{"email":"newhire@example.com","source":"index"}`, // unverified
		`{"email":"stranger@example.net","source":"index"}`,
		`{"email":"alice@example.com"}`,
		`{"email":"alice@example.com","source":"index","plaintext":true}`, // unknown key
	} {
		wantStatus(t, admin(t, ctl, "/admin/news", body), http.StatusBadRequest)
	}
	produced := s.Stats().AlertsProduced
	if c, w := produced[sim.AlertKey{Address: email, Source: source, Severity: breach.Critical}], produced[sim.AlertKey{Address: email, Source: source, Severity: breach.Warning}]; c != 1 || w != 1 {
		t.Errorf("alerts produced for the feed: %d critical, %d warning; want 1 and 1", c, w)
	}
}

func feedState(t *testing.T, s *sim.Simulator, email, source string) sim.BreachSourceState {
	t.Helper()
	b, ok := s.State(email)
	if !ok {
		t.Fatalf("State(%s): not found", email)
	}
	for _, st := range b.Sources {
		if st.Source == source {
			return st
		}
	}
	t.Fatalf("%s has no %s feed", email, source)
	return sim.BreachSourceState{}
}
