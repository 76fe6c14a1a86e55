// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// partsState is a state of n verified addresses.
func partsState(n int) persist.State {
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	st := persist.State{Watchlist: watchlist.Saved{Accounts: []watchlist.SavedAccount{{Name: breach.DefaultAccount, Plan: "pro"}}}}
	for i := range n {
		st.Watchlist.Entries = append(st.Watchlist.Entries, watchlist.SavedEntry{
			Address: breach.Address{Email: fmt.Sprintf("user%05d@example.com", i), Account: breach.DefaultAccount},
			State:   breach.Verified, LastRefresh: at, LastAttempt: at,
			Sources: []breach.SourceState{{Source: "combolist", BreachCount: int64(i), LastScannedAt: at, LastChangedAt: at}},
		})
	}
	return st
}

// storeReplicas is the replicas' side of a store, enough to load its
// checkpoint.
func storeReplicas(t *testing.T, r *testkit.Redis) *replicas {
	t.Helper()
	c, err := sharedstore.Open(sharedstore.Options{URL: r.URL(), Replica: "r", Deployment: "test", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &replicas{shared: c, logger: log.NewNopLogger(), dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})}
}

// Every part a checkpoint can have is within what the store's client
// reads: a bucket's addresses and news for each bucket, and meta.
func TestCheckpointPartsFitTheClientsBound(t *testing.T) {
	if n := 2*checkpointBuckets + 1; n > sharedstore.MaxCheckpointParts {
		t.Fatalf("up to %d parts, the client reads %d", n, sharedstore.MaxCheckpointParts)
	}
}

// A change of one address changes one part: a quiet minute's checkpoint
// sends the parts of the addresses read in it, not the state.
func TestCheckpointPartsChangeWithTheirAddresses(t *testing.T) {
	st := partsState(1000)
	before, err := partsOf(st, nil, "1-0")
	if err != nil {
		t.Fatal(err)
	}
	st.Watchlist.Entries[500].Sources[0].BreachCount++
	after, err := partsOf(st, nil, "2-0")
	if err != nil {
		t.Fatal(err)
	}
	if len(before.Parts) != len(after.Parts) || len(before.Parts) < 100 {
		t.Fatalf("%d parts, then %d: want the same, many", len(before.Parts), len(after.Parts))
	}
	var changed []string
	for i := range before.Parts {
		if before.Parts[i] != after.Parts[i] {
			changed = append(changed, after.Parts[i].Name)
		}
	}
	if want := bucketName(bucketPrefix, bucketOf(st.Watchlist.Entries[500].Address.Email)); len(changed) != 1 || changed[0] != want {
		t.Fatalf("parts changed: %v; want %s alone", changed, want)
	}
	withNews, err := partsOf(st, []addressExtra{{Key: "user00042@example.com", NewDatabases: 1}}, "3-0")
	if err != nil {
		t.Fatal(err)
	}
	if want := bucketName(newsPrefix, bucketOf("user00042@example.com")); len(withNews.Parts) != len(after.Parts)+1 ||
		!slices.ContainsFunc(withNews.Parts, func(p sharedstore.Part) bool { return p.Name == want }) {
		t.Fatalf("news of one address: %d parts, want one more, %s", len(withNews.Parts), want)
	}
}

// A checkpoint written in parts loads back whole, its parts read in
// pieces.
func TestCheckpointInPartsLoadsBack(t *testing.T) {
	store := testkit.StartRedis(t)
	r := storeReplicas(t, store)
	ctx := context.Background()
	st := partsState(3000)
	st.Seen = []breach.RememberedWebhook{{Digest: [32]byte{1}, At: time.Now().UTC().Truncate(time.Second)}}
	news := []addressExtra{{Key: "user00007@example.com", NewDatabases: 2}, {Key: "user02999@example.com", SensitiveFields: 1}}
	c, err := partsOf(st, news, "1-0")
	if err != nil {
		t.Fatal(err)
	}
	c.Lineage = "L"
	if saved, err := r.shared.WriteCheckpoint(ctx, c, ""); err != nil || !saved {
		t.Fatalf("write: %v, %v", saved, err)
	}
	head, err := r.shared.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, extra, lineage, ok := r.loadCheckpoint(ctx, head)
	if extra == nil || len(extra.News) != 2 || extra.continuity().News["user00007@example.com"].NewDatabases != 2 {
		t.Errorf("news loaded: %+v; want both addresses'", extra)
	}
	if !ok || lineage != "L" || got.Stream != "1-0" || len(got.Watchlist.Entries) != 3000 || len(got.Seen) != 1 ||
		len(got.Watchlist.Accounts) != 1 || got.Watchlist.Accounts[0].Plan != "pro" {
		t.Fatalf("loaded %v: %s, %s, %d addresses, %d seen, accounts %v", ok, lineage, got.Stream, len(got.Watchlist.Entries), len(got.Seen), got.Watchlist.Accounts)
	}
	keys := map[string]int64{}
	for _, e := range got.Watchlist.Entries {
		keys[e.Address.Email] = e.Sources[0].BreachCount
	}
	for i, e := range st.Watchlist.Entries {
		if keys[e.Address.Email] != int64(i) {
			t.Fatalf("%s loaded with breach_count %d, want %d", e.Address.Email, keys[e.Address.Email], i)
		}
	}
}

// A part that decompresses past its bound (a zip bomb from someone with
// the store's password) is refused before it costs its size, counted and
// logged; the checkpoint is not loaded.
func TestCheckpointPartOverItsBoundIsRefused(t *testing.T) {
	store := testkit.StartRedis(t)
	r := storeReplicas(t, store)
	var logs bytes.Buffer
	r.logger = log.NewLogfmtLogger(log.NewSyncWriter(&logs))
	ctx := context.Background()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.EncodeAll(make([]byte, maxPartBytes+1), nil)
	enc.Close()
	if len(bomb) > 1<<20 {
		t.Fatalf("the bomb is %d bytes compressed", len(bomb))
	}
	c := sharedstore.Checkpoint{ID: "1-0", Lineage: "L", Parts: []sharedstore.Part{{Name: metaPart, Digest: "x"}},
		Body: func(string) ([]byte, error) { return bomb, nil }}
	if saved, err := r.shared.WriteCheckpoint(ctx, c, ""); err != nil || !saved {
		t.Fatalf("write: %v, %v", saved, err)
	}
	head, err := r.shared.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := r.loadCheckpoint(ctx, head); ok {
		t.Fatal("a checkpoint whose part decompresses past its bound was loaded")
	}
	if got := testutil.ToFloat64(r.dropped); got != 1 {
		t.Errorf("breach_exporter_store_events_invalid_total %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "part meta") || !strings.Contains(logs.String(), "Skipped the store's checkpoint") {
		t.Errorf("log: %s", logs.String())
	}
}

// A checkpoint in parts without the part every write has is not one this
// release wrote: it is not loaded (an empty state in place of the
// cluster's), and is counted.
func TestCheckpointWithoutItsMetaPartIsRefused(t *testing.T) {
	store := testkit.StartRedis(t)
	r := storeReplicas(t, store)
	ctx := context.Background()
	c := sharedstore.Checkpoint{ID: "1-0", Lineage: "L", Parts: []sharedstore.Part{{Name: "a1", Digest: "x"}},
		Body: func(string) ([]byte, error) { return []byte("x"), nil }}
	if _, err := r.shared.WriteCheckpoint(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	head, err := r.shared.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := r.loadCheckpoint(ctx, head); ok || testutil.ToFloat64(r.dropped) != 1 {
		t.Fatalf("loaded %v, %v counted; want refused and counted", ok, testutil.ToFloat64(r.dropped))
	}
}

// A checkpoint the previous release wrote over one in parts (its id and
// data, the state whole) is loaded from its data.
func TestCheckpointOfThePreviousReleaseOverPartsLoads(t *testing.T) {
	store := testkit.StartRedis(t)
	r := storeReplicas(t, store)
	ctx := context.Background()
	c, err := partsOf(partsState(10), nil, "1-0")
	if err != nil {
		t.Fatal(err)
	}
	c.Lineage = "L"
	if _, err := r.shared.WriteCheckpoint(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "store-28b5cca", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	// What 28b5cca's SaveCheckpoint writes.
	rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
	defer rdb.Close()
	if err := rdb.HSet(ctx, "breach_exporter:checkpoint", "id", "2-0", "data", data).Err(); err != nil {
		t.Fatal(err)
	}
	head, err := r.shared.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, _, _, ok := r.loadCheckpoint(ctx, head)
	if !ok || st.Stream != "2-0" || len(st.Watchlist.Entries) != 2 {
		t.Fatalf("loaded %v at %s with %d addresses; want the previous release's 2 at 2-0", ok, st.Stream, len(st.Watchlist.Entries))
	}
}

// While every alive replica announces the parts format the checkpoint is
// written in parts only; once a replica of the previous release is alive
// (its alive key holds "1"), a synced replica writes it whole within its
// rounds, in the form the previous release reads: data the state whole,
// no parts_id.
func TestCheckpointIsWrittenWholeOnceAPreviousReleaseIsAlive(t *testing.T) {
	s := newStoreSetup(t)
	a := s.replica(t, "a")
	s.verified(t, a)
	s.checkpointed(t)
	ctx := context.Background()
	h, err := s.redis.HMGet(ctx, checkpointKey, "id", "parts_id", "data").Result()
	if err != nil || h[0] == nil || h[0] != h[1] {
		t.Fatalf("the checkpoint %v, %v; want in parts (parts_id its id)", h[:2], err)
	}
	if _, err := persist.Decode([]byte(h[2].(string))); err == nil {
		t.Fatal("the data of a checkpoint in parts reads as a state snapshot")
	}
	// What 28b5cca's health check writes.
	if err := s.redis.Set(ctx, "breach_exporter:alive:old", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the checkpoint written whole", func() bool {
		h, err := s.redis.HMGet(ctx, checkpointKey, "id", "parts_id", "data").Result()
		if err != nil || h[0] == nil || h[1] != nil {
			return false
		}
		st, err := persist.Decode([]byte(h[2].(string)))
		return err == nil && len(st.Watchlist.Entries) == len(s.addresses)
	})
	if st, ok := s.checkpointState(t); !ok || len(st.Watchlist.Entries) != len(s.addresses) {
		t.Fatalf("the checkpoint holds %d addresses; want %d", len(st.Watchlist.Entries), len(s.addresses))
	}
}
