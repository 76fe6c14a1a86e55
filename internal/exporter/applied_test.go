// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

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
	// Both follow the stream: neither takes the alert from a checkpoint,
	// which does not carry the digests applied (a limit, docs/replicas.md).
	testkit.Eventually(t, "both synced", func() bool { return one.synced(t) && two.synced(t) })
	if code := one.post(t, alertNumbered("a@example.com", 0)); code != 204 {
		t.Fatalf("the alert answered %d", code)
	}
	testkit.Eventually(t, "the alert counted on both", func() bool { return one.scrape(t)[alerts] == 1 && two.scrape(t)[alerts] == 1 })

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
}

// The memory of applied digests keeps the newest maxApplied.
func TestAppliedDigestsKeepTheNewest(t *testing.T) {
	var a appliedDigests
	digest := func(i int) [sha256.Size]byte { return sha256.Sum256([]byte{byte(i), byte(i >> 8), byte(i >> 16)}) }
	for i := range maxApplied + 10 {
		if !a.add(digest(i)) {
			t.Fatalf("digest %d not new", i)
		}
	}
	if len(a.set) != maxApplied {
		t.Fatalf("%d digests kept, want %d", len(a.set), maxApplied)
	}
	if !a.add(digest(0)) {
		t.Error("the oldest digest still kept past the bound")
	}
	if a.add(digest(maxApplied + 9)) {
		t.Error("the newest digest forgotten")
	}
	a.reset()
	if !a.add(digest(maxApplied + 9)) {
		t.Error("a digest kept across a reset")
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
