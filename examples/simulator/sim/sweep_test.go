// SPDX-License-Identifier: Apache-2.0

package sim_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

func TestInitialState(t *testing.T) {
	s, _ := newSim(t, nil)
	withData, without := 0, 0
	for email, bySource := range states(t, s, sim.DefaultAddresses()) {
		if len(bySource) == 0 {
			without++
		} else {
			withData++
		}
		for _, st := range bySource {
			if st.LastChangedAt.After(st.LastScannedAt) || st.LastScannedAt.After(start) {
				t.Errorf("%s/%s: changed %s, scanned %s, now %s", email, st.Source, st.LastChangedAt, st.LastScannedAt, start)
			}
			if len(st.SourceDBs) == 0 || st.BreachCount < len(st.SourceDBs) {
				t.Errorf("%s/%s: %d records in %d databases", email, st.Source, st.BreachCount, len(st.SourceDBs))
			}
		}
	}
	if withData == 0 || without == 0 {
		t.Errorf("%d verified addresses with data, %d without; want some of each", withData, without)
	}
	if _, ok := s.State("newhire@example.com"); ok {
		t.Error("State of the unverified address: ok")
	}
	if _, ok := s.State("stranger@example.net"); ok {
		t.Error("State of an unknown address: ok")
	}
}

// TestSweepsProduceCorrectDeltas checks every alert of a scripted series of
// sweeps against the states before and after it, recomputing the delta and
// severity independently of the simulator.
func TestSweepsProduceCorrectDeltas(t *testing.T) {
	s, clock := newSim(t, nil)
	addrs := sim.DefaultAddresses()
	seenSeverity := map[string]int{}
	firstScans, plaintexts := 0, 0

	for sweep := 1; sweep <= 40; sweep++ {
		clock.Advance(30 * time.Second)
		now := clock.Now().UTC()
		before := states(t, s, addrs)
		alerts := s.Sweep(t.Context())
		after := states(t, s, addrs)

		alerted := map[[2]string]bool{}
		for _, a := range alerts {
			key := [2]string{a.Address, a.Source}
			if alerted[key] {
				t.Fatalf("sweep %d: two alerts for %v", sweep, key)
			}
			alerted[key] = true
			old, existed := before[a.Address][a.Source]
			cur, ok := after[a.Address][a.Source]
			if !ok {
				t.Fatalf("sweep %d: alert for %v, which has no state", sweep, key)
			}
			want := sim.Delta{
				PreviousCount:      len(old.SourceDBs),
				NewCount:           len(cur.SourceDBs),
				NewSourceDBs:       minus(cur.SourceDBs, old.SourceDBs),
				NewlyExposedFields: minus(cur.FieldsExposed, old.FieldsExposed),
				HasNewPlaintext:    cur.HasPlaintextPassword && !old.HasPlaintextPassword,
				IsFirstScan:        !existed,
			}
			if !reflect.DeepEqual(a.Delta, want) {
				t.Errorf("sweep %d %v: delta %+v, want %+v", sweep, key, a.Delta, want)
			}
			wantSeverity := "info"
			if len(want.NewSourceDBs) > 0 {
				wantSeverity = "warning"
			}
			if want.HasNewPlaintext || slices.Contains(want.NewlyExposedFields, "password") {
				wantSeverity = "critical"
			}
			if a.Severity != wantSeverity {
				t.Errorf("sweep %d %v: severity %s, want %s (delta %+v)", sweep, key, a.Severity, wantSeverity, a.Delta)
			}
			if a.Event != "alert.created" || a.Summary == "" || a.DashboardURL != sim.DefaultDashboardBaseURL+"/addresses/"+a.Address {
				t.Errorf("sweep %d %v: alert %+v", sweep, key, a)
			}
			if a.ObservedAt != now.Format("2006-01-02T15:04:05Z") {
				t.Errorf("sweep %d %v: observed_at %s, want %s", sweep, key, a.ObservedAt, now)
			}
			seenSeverity[a.Severity]++
			if a.Delta.IsFirstScan {
				firstScans++
			}
			if a.Delta.HasNewPlaintext {
				plaintexts++
			}
		}

		for email, bySource := range after {
			for src, cur := range bySource {
				old, existed := before[email][src]
				changed := alerted[[2]string{email, src}]
				if !cur.LastScannedAt.Equal(now) {
					t.Errorf("sweep %d %s/%s: last_scanned_at %s, want %s", sweep, email, src, cur.LastScannedAt, now)
				}
				if changed != cur.LastChangedAt.Equal(now) {
					t.Errorf("sweep %d %s/%s: alerted %v but last_changed_at %s (now %s)", sweep, email, src, changed, cur.LastChangedAt, now)
				}
				if !existed {
					continue
				}
				if !changed && !sameFindings(old, cur) {
					t.Errorf("sweep %d %s/%s: changed without an alert: %+v -> %+v", sweep, email, src, old, cur)
				}
				if !changed && !cur.LastChangedAt.Equal(old.LastChangedAt) {
					t.Errorf("sweep %d %s/%s: last_changed_at moved without a change", sweep, email, src)
				}
				if cur.BreachCount < old.BreachCount || cur.BreachCount < len(cur.SourceDBs) {
					t.Errorf("sweep %d %s/%s: breach_count %d -> %d with %d databases", sweep, email, src, old.BreachCount, cur.BreachCount, len(cur.SourceDBs))
				}
			}
			for src := range before[email] {
				if _, still := bySource[src]; !still {
					t.Errorf("sweep %d %s/%s: a scanned source disappeared", sweep, email, src)
				}
			}
		}
	}
	// The series must have exercised every kind of change.
	for _, sev := range []string{"critical", "warning", "info"} {
		if seenSeverity[sev] == 0 {
			t.Errorf("no %s alert in the series (%v)", sev, seenSeverity)
		}
	}
	if firstScans == 0 || plaintexts == 0 {
		t.Errorf("first scans %d, new plaintext %d; want both", firstScans, plaintexts)
	}
	produced := 0
	for _, n := range s.Stats().AlertsProduced {
		produced += n
	}
	if total := seenSeverity["critical"] + seenSeverity["warning"] + seenSeverity["info"]; produced != total {
		t.Errorf("Stats.AlertsProduced sums to %d, sweeps returned %d", produced, total)
	}
}

func TestSameSeedSameHistory(t *testing.T) {
	history := func(seed int64) ([][]sim.Alert, sim.Breaches) {
		s, clock := newSim(t, func(o *sim.Options) { o.Seed = seed })
		var all [][]sim.Alert
		for range 10 {
			clock.Advance(time.Minute)
			all = append(all, s.Sweep(t.Context()))
		}
		b, _ := s.State("bob@example.com")
		return all, b
	}
	a1, b1 := history(7)
	a2, b2 := history(7)
	if !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(b1, b2) {
		t.Error("the same seed gave different histories")
	}
	a3, _ := history(8)
	if reflect.DeepEqual(a1, a3) {
		t.Error("seeds 7 and 8 gave the same history")
	}
}

func TestRunSweepsOnTheClock(t *testing.T) {
	s, clock := newSim(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, 30*time.Second)
	}()
	defer func() { cancel(); <-done }()

	if err := clock.BlockUntilContext(ctx, 1); err != nil { // the ticker
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	want := start.Add(30 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := s.State("alice@example.com")
		if len(b.Sources) > 0 && b.Sources[0].LastScannedAt.Equal(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sweep at %s: %+v", want, b.Sources)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

func minus(list, remove []string) []string {
	out := []string{}
	for _, v := range list {
		if !slices.Contains(remove, v) {
			out = append(out, v)
		}
	}
	return out
}

func sameFindings(a, b sim.BreachSourceState) bool {
	return a.BreachCount == b.BreachCount && a.HasPlaintextPassword == b.HasPlaintextPassword &&
		slices.Equal(a.SourceDBs, b.SourceDBs) && slices.Equal(a.FieldsExposed, b.FieldsExposed)
}
