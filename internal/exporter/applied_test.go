// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// An alert entry copied whole, its signature included (someone who can
// write to the store, or the same body published again after the store
// lost its seen: key), counts once on every replica: the copy is skipped
// and counted. Before, every replica counted it again.
func TestACopiedAlertEntryCountsOnce(t *testing.T) {
	c, dir := withStoreClient(t)
	ctx := context.Background()
	one := startReplica(t, dir, filepath.Join(dir, "one"))
	two := startReplica(t, dir, filepath.Join(dir, "two"))
	alerts, invalid := alertsOf("a@example.com"), testkit.Series("breach_exporter_store_events_invalid_total")
	testkit.Eventually(t, "both synced", func() bool { return one.synced(t) && two.synced(t) })
	if code := one.post(t, alertNumbered("a@example.com", 0)); code != 204 {
		t.Fatalf("the alert answered %d", code)
	}
	testkit.Eventually(t, "the alert counted on both", func() bool { return one.scrape(t)[alerts] == 1 && two.scrape(t)[alerts] == 1 })

	lineages := testkit.Series("breach_exporter_store_lineages_started_total", "reason", "rewound")
	before := map[string]map[string]float64{"one": one.scrape(t), "two": two.scrape(t)}
	genuine := lastAlertEntry(t, c)
	var values []any
	for k, v := range genuine {
		values = append(values, k, v)
	}
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: eventsKey, Values: values}).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "both replicas skipped the copy", func() bool { return one.scrape(t)[invalid] == 1 && two.scrape(t)[invalid] == 1 })
	for name, r := range map[string]*replica{"one": one, "two": two} {
		if got := r.scrape(t)[alerts]; got != 1 {
			t.Errorf("%s counts %v alerts, want 1: the copy counted", name, got)
		}
	}

	// The copy carried its prev, an ID before the entry that came before
	// it, as an entry after a loss of the store's does; yet the store
	// still holds every entry. Before, every replica took it for a loss
	// and started a new lineage.
	if _, ok := genuine["prev"]; !ok {
		t.Fatal("the copied entry has no prev")
	}
	if code := two.post(t, alertNumbered("a@example.com", 1)); code != 204 {
		t.Fatalf("the alert answered %d", code)
	}
	testkit.Eventually(t, "the next alert counted on both", func() bool { return one.scrape(t)[alerts] == 2 && two.scrape(t)[alerts] == 2 })
	testkit.Eventually(t, "both replicas found the store still holds their position", func() bool {
		return one.logs.Count("not a loss of the store's") == 1 && two.logs.Count("not a loss of the store's") == 1
	})
	for name, r := range map[string]*replica{"one": one, "two": two} {
		m := r.scrape(t)
		if n := m[lineages] - before[name][lineages]; n != 0 {
			t.Errorf("%s started %v lineages for a copy, want 0", name, n)
		}
	}
}

// The memory of applied digests keeps the newest maxApplied, and its
// horizon moves to the newest event it forgot.
func TestAppliedDigestsKeepTheNewest(t *testing.T) {
	var a appliedDigests
	digest := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}) }
	id := func(i int) string { return fmt.Sprintf("%d-0", 1000+i) }
	for i := range maxApplied + 10 {
		if !a.add(digest(i), id(i)) {
			t.Fatalf("digest %d not new", i)
		}
	}
	if len(a.set) != maxApplied {
		t.Fatalf("%d digests kept, want %d", len(a.set), maxApplied)
	}
	if a.horizon.String() != id(9) {
		t.Errorf("horizon %s, want %s: the newest event forgotten", a.horizon.String(), id(9))
	}
	if !a.mayCount(id(9)) || a.mayCount(id(10)) {
		t.Error("mayCount does not follow the horizon")
	}
	if !a.add(digest(0), id(maxApplied+10)) {
		t.Error("the oldest digest still kept past the bound")
	}
	if a.add(digest(maxApplied+9), id(maxApplied+11)) {
		t.Error("the newest digest forgotten")
	}
}

// A checkpoint carries the digests of its last appliedWindow, the newest
// maxCheckpointApplied, and a state loaded from it has them and the
// horizon past those left out; what the store holds is checked first.
func TestAppliedDigestsThroughACheckpoint(t *testing.T) {
	var a appliedDigests
	start := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration, seq int) string { return fmt.Sprintf("%d-%d", start.Add(d).UnixMilli(), seq) }
	digest := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i), byte(i >> 8)}) }
	a.add(digest(0), at(0, 0))                         // older than the window
	a.add(digest(1), at(time.Minute, 3))               // within it
	a.add(digest(2), at(appliedWindow+time.Minute, 0)) // the newest
	last := at(appliedWindow+time.Minute, 0)
	w := a.wire(last)
	if w.After != at(0, 0) {
		t.Errorf("horizon %s, want the one left out, %s", w.After, at(0, 0))
	}
	data, err := json.Marshal(checkpointExtra{V: eventFormat, ID: last, Applied: w})
	if err != nil {
		t.Fatal(err)
	}
	x, ok := decodeExtra(data, last)
	if !ok {
		t.Fatal("the extra does not decode")
	}
	var b appliedDigests
	b.restore(x.appliedWire(), last, time.Now())
	if b.has(digest(0)) || !b.has(digest(1)) || !b.has(digest(2)) {
		t.Errorf("loaded %v %v %v, want the two within the window", b.has(digest(0)), b.has(digest(1)), b.has(digest(2)))
	}
	if !b.mayCount(at(0, 0)) || b.mayCount(at(time.Minute, 3)) {
		t.Error("the loaded horizon does not cover what was left out, or covers what was kept")
	}

	for name, bad := range map[string]*appliedWire{
		"not base64":     {Entries: "%%%"},
		"a cut entry":    {Entries: base64.StdEncoding.EncodeToString(make([]byte, 20))},
		"past the state": {Entries: base64.StdEncoding.EncodeToString(append(make([]byte, 16), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0))},
		"too many":       {Entries: strings.Repeat("A", 4*(maxCheckpointApplied*36/3+3))},
	} {
		b.restore(bad, last, time.Now())
		if len(b.set) != 0 || b.horizon.String() != last {
			t.Errorf("%s: %d digests loaded, horizon %s; want none and the checkpoint's ID", name, len(b.set), b.horizon.String())
		}
	}
	if b.restore(&appliedWire{After: at(24*time.Hour*365, 0)}, last, time.Now()); b.horizon.String() != last {
		t.Errorf("a horizon a year ahead: %s, want the wire refused (it would stop every alert passed again)", b.horizon.String())
	}
	var back appliedDigests // the stream went back below an ID applied
	back.add(digest(7), at(time.Minute, 0))
	back.add(digest(8), at(2*time.Minute, 0))
	if w := back.wire(at(90*time.Second, 0)); w.After != at(2*time.Minute, 0) {
		t.Errorf("after the stream went back: horizon %s, want the ID past the checkpoint's, %s", w.After, at(2*time.Minute, 0))
	} else if b.restore(w, at(90*time.Second, 0), time.Now()); !b.has(digest(7)) {
		t.Error("a wire with an ID past its checkpoint's was refused whole")
	}
	future := &appliedWire{After: at(appliedWindow+2*time.Minute, 0)}
	if b.restore(future, last, time.Now()); b.horizon.String() != future.After {
		t.Errorf("a horizon past the state: %s, want it kept (it only passes fewer alerts again)", b.horizon.String())
	}
	b.restore(nil, "", start)
	if b.horizon.String() != sharedstore.IDAt(start.Add(breach.MaxFutureSkew)) {
		t.Errorf("a checkpoint without position or digests: horizon %s, want the store's clock ahead", b.horizon.String())
	}
	for _, c := range []struct {
		local *persist.State
		want  string
	}{
		{nil, ""},
		{&persist.State{Stream: last}, last},
		{&persist.State{}, sharedstore.IDAt(start.Add(breach.MaxFutureSkew))},
	} {
		if b.restoreLocal(c.local, start); b.horizon.String() != c.want || len(b.set) != 0 {
			t.Errorf("from a local snapshot %+v: horizon %q, %d digests; want %q, none", c.local, b.horizon.String(), len(b.set), c.want)
		}
	}
}

// withStoreClient is withStore for one address, a@example.com, with a
// client of the test's database.
func withStoreClient(t *testing.T) (*redis.Client, string) {
	t.Helper()
	store, dir := withStore(t, "refresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [a@example.com]\n")
	c := redis.NewClient(&redis.Options{Addr: store.Addr(), DB: store.DB(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c, dir
}

// lastAlertEntry is the fields of the stream's last alert entry.
func lastAlertEntry(t *testing.T, c *redis.Client) map[string]any {
	t.Helper()
	entries, err := c.XRange(context.Background(), eventsKey, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var last map[string]any
	for _, e := range entries {
		if e.Values["kind"] == eventAlert {
			last = e.Values
		}
	}
	if last == nil {
		t.Fatalf("no alert entry in the stream: %v", entries)
	}
	return last
}

// An answer's entry copied whole, its signature included, is applied once:
// the older answer again would take the address back, and its next read
// would count the same news twice. Before, the copy was applied, and the
// read after it counted the new database again (news 2, want 1).
func TestACopiedAnswerIsAppliedOnce(t *testing.T) {
	s := newStoreSetup(t)
	one, two := s.replica(t, "one"), s.replica(t, "two")
	s.verified(t, one)
	s.verified(t, two)
	ctx := context.Background()
	first := lastEntryOf(t, s, eventAnswered, "a@example.com")
	at := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	s.api.Answer("a@example.com", sim.Verified(breach.SourceState{Source: "combolist", BreachCount: 2, SourceDBs: []string{"x", "y"},
		FieldsExposed: []string{"password"}, HasPlaintextPassword: true, LastScannedAt: at, LastChangedAt: at}))
	// Each asks for a re-read (a new database), whichever replica holds
	// a's claim; the store counts the body once.
	alert(t, one, "a@example.com")
	alert(t, two, "a@example.com")
	news := testkit.Series("breach_address_new_databases_total", "address", "a@example.com")
	testkit.Eventually(t, "the new database counted on both", func() bool { return one.scrape(t)[news] == 1 && two.scrape(t)[news] == 1 })

	var values []any
	for k, v := range first {
		values = append(values, k, v)
	}
	copyID, err := s.redis.XAdd(ctx, &redis.XAddArgs{Stream: eventsKey, Values: values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{one, two} { // a's next read
		if c := r.post(t, alertNumbered("a@example.com", 7)); c != 204 {
			t.Fatalf("alert answered %d", c)
		}
	}
	testkit.Eventually(t, "a read again", func() bool {
		next, err := s.redis.XRangeN(ctx, eventsKey, "("+copyID, "+", 100).Result()
		return err == nil && slices.ContainsFunc(next, func(m redis.XMessage) bool {
			data, _ := m.Values["data"].(string)
			return m.Values["kind"] == eventAnswered && strings.Contains(data, "a@example.com")
		})
	})
	s.waitConverged(t, two, one)
	invalid := testkit.Series("breach_exporter_store_events_invalid_total")
	testkit.Eventually(t, "both replicas past the read after the copy", func() bool {
		return one.scrape(t)[alertsOf("a@example.com")] == 2 && two.scrape(t)[alertsOf("a@example.com")] == 2
	})
	for name, r := range map[string]*replica{"one": one, "two": two} {
		m := r.scrape(t)
		if got := m[news]; got != 1 {
			t.Errorf("%s counts %v new databases for a, want 1: the copied answer took it back", name, got)
		}
		if got := m[invalid]; got != 1 {
			t.Errorf("%s skipped %v entries, want the copy", name, got)
		}
	}
}

// lastEntryOf is the fields of the stream's last entry of kind whose data
// names address.
func lastEntryOf(t *testing.T, s *storeSetup, kind, address string) map[string]any {
	t.Helper()
	entries, err := s.redis.XRange(context.Background(), eventsKey, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var last map[string]any
	for _, e := range entries {
		if data, _ := e.Values["data"].(string); e.Values["kind"] == kind && strings.Contains(data, address) {
			last = e.Values
		}
	}
	if last == nil {
		t.Fatalf("no %s entry for %s in the stream", kind, address)
	}
	return last
}
