// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// One replica holds the lease at a time: a second only learns who does,
// takes it once it is given back, and one that is not to take it (not
// synced) never does. The stream ID served only moves forward, and what
// the store holds is checked like an API answer: a forged lease without a
// URL, an oversized one, or a served value that is not a stream ID reads
// as none.
func TestServingLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r := testkit.StartRedis(t)
	ctx := context.Background()
	a, b := open(t, r, "a", "p"), open(t, r, "b", "p")
	const urlA, urlB = "http://127.0.0.1:1/metrics", "http://127.0.0.1:2/metrics"

	sv, err := a.HoldServing(ctx, urlA, time.Minute, true)
	if err != nil || sv.Replica != "a" || sv.URL != urlA {
		t.Fatalf("the first replica did not take a free lease: %+v, %v", sv, err)
	}
	if sv, err = b.HoldServing(ctx, urlB, time.Minute, true); err != nil || sv.Replica != "a" || sv.URL != urlA {
		t.Fatalf("a second replica took a held lease, or did not learn who holds it: %+v, %v", sv, err)
	}
	if err := b.ReleaseServing(ctx, urlB); err != nil {
		t.Fatal(err)
	}
	if sv, _ = b.HoldServing(ctx, urlB, time.Minute, false); sv.Replica != "a" {
		t.Fatalf("another replica's release let go of the lease: %+v", sv)
	}
	if err := a.ReleaseServing(ctx, urlA); err != nil {
		t.Fatal(err)
	}
	if sv, _ = b.HoldServing(ctx, urlB, time.Minute, false); sv.Replica != "" {
		t.Fatalf("a replica not to take the lease took it: %+v", sv)
	}
	if sv, _ = b.HoldServing(ctx, urlB, time.Minute, true); sv.Replica != "b" || sv.URL != urlB {
		t.Fatalf("the lease given back was not taken: %+v", sv)
	}

	for _, id := range []string{"1700000000000-5", "1700000000000-3", "1699999999999-9"} {
		if err := b.RecordServed(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if sv, _ = a.HoldServing(ctx, urlA, time.Minute, false); sv.Served != "1700000000000-5" {
		t.Errorf("served %q after 1700000000000-5 and two earlier IDs, want the latest", sv.Served)
	}
	if err := a.RecordServed(ctx, "1700000000001-0"); err != nil {
		t.Fatal(err)
	}
	if sv, _ = a.HoldServing(ctx, urlA, time.Minute, false); sv.Served != "1700000000001-0" {
		t.Errorf("served %q, want 1700000000001-0", sv.Served)
	}
	if err := a.RecordServed(ctx, "not an id"); err == nil {
		t.Error("a served value that is not a stream ID was recorded")
	}

	store := raw(t, r)
	for _, forged := range []string{"b\nftp://x", "b", "\nhttp://x", "b\nhttp://" + strings.Repeat("x", maxServingBytes)} {
		store.Set(ctx, "p:serving", forged, time.Minute)
		store.Set(ctx, "p:served", "garbage", 0)
		if sv, err = a.HoldServing(ctx, urlA, time.Minute, false); err != nil || sv != (Serving{}) {
			t.Errorf("a forged lease %.20q and served value read as %+v, %v; want none", forged, sv, err)
		}
	}
}
