// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// forgedBytes is the size of each forged entry and member: the hostile
// run used 100 MB, which the bound makes no different and only slower.
const forgedBytes = 20 << 20

// allocatedBy reports how many bytes this process allocated while f ran
// (TotalAlloc: what passed through the heap, whatever the GC freed since).
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// forger starts a redis-server and gives a replica of it, and a plain
// client to forge what the tests' hostile writer adds.
func forger(t *testing.T) (replica, *redis.Client) {
	t.Helper()
	r := testkit.StartRedis(t)
	return open(t, r, "a", ""), raw(t, r)
}

// heldBound is the most a read may allocate here: a page's bound, its
// largest entry and room for the rest of the process meanwhile; far
// below one forged entry.
const heldBound = maxPageBytes + MaxEventBytes + 4<<20

// Entries over MaxEventBytes, added by hand (XADD) by anyone who reaches
// the store, never reach a replica: Read and Follow receive their IDs and
// sizes only, hand them on as Oversized (the exporter skips and counts
// them), and apply the good entries after them. On the base (4983499) the replica
// fetched each whole (XRANGE, XREAD) and allocated more than 3 × 20 MB.
func TestOversizedEntriesAreNotSent(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()
	if _, err := b.Publish(ctx, "k", []byte("before")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		err := raw(t, r).XAdd(ctx, &redis.XAddArgs{Stream: "breach_exporter:events",
			Values: []any{"kind", "answered", "origin", "forged", "data", strings.Repeat("x", forgedBytes)}}).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Publish(ctx, "k", []byte("after")); err != nil {
		t.Fatal(err)
	}
	check := func(how string, got []Event) {
		t.Helper()
		if len(got) != 5 || string(got[0].Data) != "before" || string(got[4].Data) != "after" {
			t.Fatalf("%s: %d events, want before, 3 oversized, after: %+v", how, len(got), got)
		}
		want := int64(forgedBytes + len("kindansweredoriginforgeddata")) // its fields and values
		for _, e := range got[1:4] {
			if e.Oversized != want || e.Data != nil || e.Kind != "" {
				t.Errorf("%s: a forged entry read as %+v, want only its size %d", how, e, want)
			}
		}
	}

	var read []Event
	n := allocatedBy(func() {
		if _, err := a.Read(ctx, "0-0", "+", func(e Event) { read = append(read, e) }); err != nil {
			t.Fatal(err)
		}
	})
	check("Read", read)
	t.Logf("Read allocated %d bytes", n)
	if n > heldBound {
		t.Errorf("Read allocated %d bytes for three forged entries of %d, want at most %d", n, forgedBytes, heldBound)
	}

	var followed []Event
	n = allocatedBy(func() {
		events := follow(t, a, "0-0")
		for len(followed) < 5 {
			followed = append(followed, nextEvent(t, events, 10*time.Second))
		}
	})
	check("Follow", followed)
	t.Logf("Follow allocated %d bytes", n)
	if n > heldBound {
		t.Errorf("Follow allocated %d bytes for three forged entries of %d, want at most %d", n, forgedBytes, heldBound)
	}
	if last, err := a.Last(ctx); err != nil || last != followed[4].ID {
		t.Errorf("Last: %q, %v; want %q", last, err, followed[4].ID)
	}
}

// A page stops at maxPageBytes: entries just under MaxEventBytes come
// over several reads, not in one reply of page × MaxEventBytes.
func TestAPageIsBoundedInBytes(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "")
	ctx := context.Background()
	big := []byte(strings.Repeat("y", MaxEventBytes-100))
	const entries = 12
	for range entries {
		if _, err := a.Publish(ctx, "k", big); err != nil {
			t.Fatal(err)
		}
	}
	msgs, more, err := a.readPage(ctx, "read", "0-0", "+")
	if err != nil {
		t.Fatal(err)
	}
	if !more || len(msgs) >= entries || len(msgs)*len(big) > maxPageBytes+MaxEventBytes {
		t.Errorf("one page: %d entries of %d bytes (more: %v); want at most %d bytes and more to read", len(msgs), len(big), more, maxPageBytes+MaxEventBytes)
	}
	n := 0
	if _, err := a.Read(ctx, "0-0", "+", func(e Event) {
		if len(e.Data) == len(big) {
			n++
		}
	}); err != nil || n != entries {
		t.Errorf("Read brought %d of the %d entries (%v)", n, entries, err)
	}
}

// The checkpoint's id, lineage and deployment are sent only within
// maxHeadBytes (its data and extra are bounded by their sizes, HSTRLEN,
// before they are sent): a forged huge id makes the checkpoint invalid, is
// named by a marker, and a synced replica writes over it by that marker.
func TestHugeCheckpointMembersAreNotSent(t *testing.T) {
	a, c := forger(t)
	ctx := context.Background()
	huge := func() string { return strings.Repeat("9", forgedBytes) }
	if err := c.HSet(ctx, "breach_exporter:checkpoint", "id", huge(), "lineage", huge(), "deployment", huge(), "data", "d").Err(); err != nil {
		t.Fatal(err)
	}
	marker := "(20971520 bytes)"
	var head Head
	var loaded Checkpoint
	n := allocatedBy(func() {
		var err error
		if head, err = a.Head(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err = a.LoadCheckpoint(ctx, 1<<20); !errors.Is(err, ErrForeignCheckpoint) {
			t.Errorf("a checkpoint of a huge deployment loaded: %v", err)
		}
		if err := c.HDel(ctx, "breach_exporter:checkpoint", "deployment").Err(); err != nil {
			t.Fatal(err)
		}
		if loaded, _, err = a.LoadCheckpoint(ctx, 1<<20); err != nil {
			t.Fatal(err)
		}
	})
	if n > heldBound {
		t.Errorf("Head and LoadCheckpoint allocated %d bytes for members of %d, want at most %d", n, forgedBytes, heldBound)
	}
	t.Logf("Head and LoadCheckpoint allocated %d bytes", n)
	if head.ID != marker || !head.HasCheckpoint || !head.Foreign {
		t.Fatalf("the head of a checkpoint with huge members: %+v; want the id %q, foreign", head, marker)
	}
	if loaded.ID != marker || loaded.Lineage != marker {
		t.Fatalf("a checkpoint with a huge id and lineage loaded as %+v; want both %q", loaded, marker)
	}
	saved, err := a.WriteCheckpoint(ctx, Checkpoint{ID: "5-0", Lineage: "L", Data: []byte("c")}, marker)
	if err != nil || !saved {
		t.Fatalf("writing over it: %v, %v", saved, err)
	}
	if c, ok, err := a.LoadCheckpoint(ctx, 1<<20); err != nil || !ok || c.ID != "5-0" || string(c.Data) != "c" {
		t.Errorf("after writing over it: %+v, %v, %v", c, ok, err)
	}
}

// Prune reads the ready hash's items only, each within maxItemBytes: a
// forged huge item or value is not sent (and is logged), the others are
// pruned as ever.
func TestPruneDoesNotFetchHugeItems(t *testing.T) {
	a, c := forger(t)
	ctx := context.Background()
	if err := c.HSet(ctx, "breach_exporter:ready:acct", "keep", strings.Repeat("1", forgedBytes), "drop", "1",
		strings.Repeat("f", forgedBytes), "1").Err(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	n := allocatedBy(func() {
		if err := a.Prune(ctx, "acct", func(item string) bool { seen = append(seen, item); return item != "drop" }); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("Prune allocated %d bytes", n)
	if n > heldBound {
		t.Errorf("Prune allocated %d bytes for an item and a value of %d, want at most %d", n, forgedBytes, heldBound)
	}
	if len(seen) != 2 {
		t.Errorf("Prune was shown %d items, want keep and drop", len(seen))
	}
	if left, err := c.HLen(ctx, "breach_exporter:ready:acct").Result(); err != nil || left != 2 {
		t.Errorf("%d items left, want keep and the huge one (%v)", left, err)
	}
	if a.log.Count("level=warn", "not read") != 1 {
		t.Errorf("the huge item is not logged:\n%s", a.log)
	}
}
