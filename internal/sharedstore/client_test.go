// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// replica is one Client of a test with what it registered and logged.
type replica struct {
	*Client
	reg *prometheus.Registry
	log *testkit.SyncBuffer
}

func open(t *testing.T, r *testkit.Redis, name, prefix string) replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	buf := &testkit.SyncBuffer{}
	s, err := Open(Options{
		URL:        r.URL(),
		KeyPrefix:  prefix,
		Replica:    name,
		Registerer: reg,
		Logger:     log.NewLogfmtLogger(buf),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	return replica{s, reg, buf}
}

// raw is a plain client of r, for what the tests set up or look at
// behind the Client's back.
func raw(t *testing.T, r *testkit.Redis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), DB: r.DB(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOpenChecksTheURLWithoutConnecting(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"", "empty"},
		{"http://127.0.0.1:6379", `scheme must be redis or rediss (TLS), not "http"`},
		{"unix:///run/redis.sock", `not "unix"`},
		{"127.0.0.1:6379", "does not parse"},
		{"//127.0.0.1:6379", "scheme"},
		{"redis://:s3cret@127.0.0.1:port", "does not parse"},
		{"redis://:s3cret@", "no host"},
		{"redis://127.0.0.1:6379/notadb", "database"},
	} {
		_, err := Open(Options{URL: c.url, Replica: "a"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q) = %v, want an error with %q", c.url, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q)'s error shows the password: %v", c.url, err)
		}
	}
	if _, err := Open(Options{URL: "redis://127.0.0.1:6379"}); err == nil {
		t.Error("Open without a replica name succeeded")
	}

	// Nothing listens on port 1: Open must not try.
	reg := prometheus.NewRegistry()
	s, err := Open(Options{URL: "rediss://:pw@127.0.0.1:1/2", Password: "other", Replica: "a", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if o := s.rdb.(*redis.Client).Options(); o.Password != "other" || o.DB != 2 || o.TLSConfig == nil {
		t.Errorf("options: password %q, db %d, tls %v", o.Password, o.DB, o.TLSConfig != nil)
	}
	if testutil.ToFloat64(s.up) != 0 {
		t.Error("up before any command")
	}
	got := testkit.Samples(t, reg)
	want := map[string]float64{
		testkit.Series("breach_exporter_store_up"):                                         0,
		testkit.Series("breach_exporter_store_events_missed_total"):                        0,
		testkit.Series("breach_exporter_store_stream_resets_total", "reason", "ahead"):     0,
		testkit.Series("breach_exporter_store_stream_resets_total", "reason", "recreated"): 0,
		testkit.Series("breach_exporter_store_signed_only"):                                0,
	}
	for _, what := range []string{"event", "checkpoint", "serving"} {
		want[testkit.Series("breach_exporter_store_unverified_total", "what", what)] = 0
	}
	for _, op := range operations {
		want[testkit.Series("breach_exporter_store_errors_total", "operation", op)] = 0
	}
	for _, what := range []string{"write", "event", "checkpoint"} {
		want[testkit.Series("breach_exporter_store_foreign_total", "what", what)] = 0
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metrics after Open:\n got %v\nwant %v", got, want)
	}
	if _, err := Open(Options{URL: "redis://127.0.0.1:1", Replica: "b", Registerer: reg}); err == nil || !strings.Contains(err.Error(), "registering") {
		t.Errorf("a second Open on one registry: %v", err)
	}
}

// Each topology gets its client, and only a cluster's keys share a hash
// tag: on one server and through Sentinels the keys keep the names of the
// releases before, so that an upgrade reads the same keys.
func TestOpenPicksTheTopology(t *testing.T) {
	tlsConfig := &tls.Config{ServerName: "store.internal", MinVersion: tls.VersionTLS12}
	for _, c := range []struct {
		name    string
		o       Options
		cluster bool
		key     string
	}{
		{"one server", Options{URL: "redis://127.0.0.1:1/0"}, false, "p:events"},
		{"sentinels", Options{Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}, MasterName: "m", SentinelPassword: "sp"}, false, "p:events"},
		{"cluster", Options{Servers: []string{"127.0.0.1:1", "127.0.0.1:2"}}, true, "{p}:events"},
		{"cluster of one seed", Options{Servers: []string{"127.0.0.1:1"}}, true, "{p}:events"},
	} {
		c.o.Replica, c.o.KeyPrefix, c.o.Username, c.o.Password, c.o.TLS = "a", "p", "u", "pw", tlsConfig
		s, err := Open(c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, cluster := s.rdb.(*redis.ClusterClient)
		if cluster != c.cluster || s.key("events") != c.key || !s.auth {
			t.Errorf("%s: cluster %v, key %q, auth %v; want %v, %q, true", c.name, cluster, s.key("events"), s.auth, c.cluster, c.key)
		}
		ro, _ := clientOptions(c.o)
		if ro.Username != "u" || ro.Password != "pw" || ro.TLSConfig.ServerName != "store.internal" || ro.TLSConfig == tlsConfig ||
			ro.SentinelPassword != c.o.SentinelPassword || ro.ReadTimeout != ioTimeout || ro.Protocol != 2 {
			t.Errorf("%s: options %+v", c.name, ro)
		}
		s.Close()
	}
	if _, err := Open(Options{URL: "redis://127.0.0.1:1", Servers: []string{"127.0.0.1:2"}, Replica: "a"}); err == nil || !strings.Contains(err.Error(), "exclude") {
		t.Errorf("url and servers: %v, want them refused", err)
	}
}

func TestReserveHandsOutEverySlotOnce(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()

	// Far apart, so that the time the calls take cannot blur the slots.
	const spacing = 10 * time.Second
	const n = 12
	waits := make(chan time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			w, _, err := s.Reserve(ctx, "key1", spacing, time.Hour)
			if err != nil {
				t.Error(err)
			}
			waits <- w
		})
	}
	wg.Wait()
	close(waits)
	slots := map[int]bool{}
	for w := range waits {
		k := int((w + spacing/2) / spacing)
		if slots[k] {
			t.Errorf("slot %d handed out twice", k)
		}
		slots[k] = true
		if off := w - time.Duration(k)*spacing; off > 0 || off < -spacing/4 {
			t.Errorf("wait %v is not right before slot %d", w, k)
		}
	}
	if len(slots) != n {
		t.Errorf("%d slots for %d reservations", len(slots), n)
	}

	// Another key has its own budget.
	if w, _, err := a.Reserve(ctx, "key2", spacing, time.Hour); err != nil || w != 0 {
		t.Errorf("first reservation of another key: %v, %v", w, err)
	}
	// The keys are under the default prefix and expire.
	ttl, err := raw(t, r).PTTL(ctx, "breach_exporter:budget:key1").Result()
	if err != nil || ttl <= n*spacing || ttl > n*spacing+budgetKeep+time.Second {
		t.Errorf("the budget key's expiry: %v, %v", ttl, err)
	}
	if testutil.ToFloat64(a.up) != 1 {
		t.Error("the store answered, yet it is not up")
	}
}

func TestPausePushesEveryLaterSlot(t *testing.T) {
	r := testkit.StartRedis(t)
	s := open(t, r, "a", "p")
	ctx := context.Background()
	if w, _, err := s.Reserve(ctx, "k", time.Millisecond, time.Hour); err != nil || w != 0 {
		t.Fatalf("first slot: %v, %v", w, err)
	}
	if err := s.Pause(ctx, "k", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	w, _, err := s.Reserve(ctx, "k", time.Second, time.Hour)
	if err != nil || w < 25*time.Second || w > 30*time.Second {
		t.Fatalf("slot after a 30 s pause: %v, %v", w, err)
	}
	// A shorter pause does not shorten it; the next slot is after the one
	// taken.
	if err := s.Pause(ctx, "k", time.Second); err != nil {
		t.Fatal(err)
	}
	w2, _, err := s.Reserve(ctx, "k", time.Second, time.Hour)
	if err != nil || w2 < w+500*time.Millisecond {
		t.Fatalf("slot after a shorter pause: %v (the one before %v), %v", w2, w, err)
	}
	// A pause of a key nobody reserved yet holds its first slot.
	if err := s.Pause(ctx, "fresh", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if w, _, err := s.Reserve(ctx, "fresh", time.Second, time.Hour); err != nil || w < 15*time.Second {
		t.Fatalf("first slot of a paused key: %v, %v", w, err)
	}
}

// slotTaker is one replica taking slots of a budget as the scheduler does:
// it asks again once a slot past the horizon comes within it, and sends in
// the slot it got. Slots are noted on the local clock, which is the
// store's here (one machine), the wait added to the time before the call.
type slotTaker struct {
	t                *testing.T
	spacing, horizon time.Duration
}

func (st slotTaker) take(s replica, key string) time.Time {
	st.t.Helper()
	for {
		before := time.Now()
		w, ok, err := s.Reserve(context.Background(), key, st.spacing, st.horizon)
		if err != nil {
			st.t.Fatal(err)
		}
		if ok {
			return before.Add(w)
		}
		if w <= st.horizon {
			st.t.Fatalf("a slot %s away, within the horizon %s, was not taken", w, st.horizon)
		}
		// As the scheduler does: it waits on its timer, then asks again.
		<-time.After(w - st.horizon)
	}
}

// The store emptied while replicas poll (FLUSHALL, a restart without its
// data) forgets neither the slots it handed out nor a pause: the first
// replica that had used the budget and finds it gone starts it again after
// the horizon, so slots old and new are still spacing apart. Slots are
// compared on the store's clock, where the scripts place them, so that
// however long a call takes on a loaded machine moves none of them.
func TestBudgetSurvivesAnEmptiedStore(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b, c := open(t, r, "a", ""), open(t, r, "b", ""), open(t, r, "c", "")
	rdb := raw(t, r)
	ctx := context.Background()
	// Scaled down from the scheduler's 1 s spacing and 62 s horizon.
	st := slotTaker{t: t, spacing: 100 * time.Millisecond, horizon: 300 * time.Millisecond}
	// slot is the slot s takes, in µs on the store's clock: the next one
	// the key holds, less the spacing (nothing else takes one meanwhile).
	slot := func(s replica, key string) int64 {
		t.Helper()
		st.take(s, key)
		return nextSlot(t, s, key) - micros(st.spacing)
	}

	// Each replica holds a slot, and has sent in none yet.
	var slots []int64
	for _, s := range []replica{a, b, c} {
		slots = append(slots, slot(s, "k"))
	}
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The replicas go on, and so does one that never used the budget.
	d := open(t, r, "d", "")
	for _, s := range []replica{a, b, c, d, a, b} {
		slots = append(slots, slot(s, "k"))
	}
	slices.Sort(slots)
	for i := 1; i < len(slots); i++ {
		if gap := time.Duration(slots[i]-slots[i-1]) * time.Microsecond; gap < st.spacing {
			t.Errorf("slots %d and %d of %d are %s apart, want at least %s", i-1, i, len(slots), gap, st.spacing)
		}
	}

	// A 429's pause, then the store emptied: no slot before it ends.
	if _, ok, err := b.Reserve(ctx, "p", st.spacing, st.horizon); err != nil || !ok {
		t.Fatalf("first slot: %v, %v", ok, err)
	}
	if err := a.Pause(ctx, "p", 250*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	pausedUntil := nextSlot(t, a, "p")
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := slot(b, "p"); got < pausedUntil {
		t.Errorf("a slot %s before the 250ms pause ended", time.Duration(pausedUntil-got)*time.Microsecond)
	}
}

// nextSlot is the time the budget key of s holds, in µs on the store's
// clock: when its next slot starts.
func nextSlot(t *testing.T, s replica, key string) int64 {
	t.Helper()
	v, err := s.rdb.Get(context.Background(), s.key("budget", key)).Int64()
	if err != nil {
		t.Fatalf("the budget key of %s: %v", key, err)
	}
	return v
}

// A budget nobody used for longer than its key lives is new, not lost:
// its first slot is at once.
func TestBudgetUnusedPastItsLifeStartsAtOnce(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "")
	ctx := context.Background()
	if _, ok, err := a.Reserve(ctx, "k", time.Second, time.Minute); err != nil || !ok {
		t.Fatalf("first slot: %v, %v", ok, err)
	}
	// As if the last use were budgetKeep ago, and the key had expired.
	a.budgetMu.Lock()
	u := a.budgets["k"]
	u.last = u.last.Add(-budgetKeep)
	a.budgets["k"] = u
	a.budgetMu.Unlock()
	if err := raw(t, r).Del(ctx, "breach_exporter:budget:k").Err(); err != nil {
		t.Fatal(err)
	}
	if w, ok, err := a.Reserve(ctx, "k", time.Second, time.Minute); err != nil || !ok || w != 0 {
		t.Fatalf("first slot after the key expired: %v, %v, %v; want at once", w, ok, err)
	}
	// A key this replica used lately that is gone was lost: its budget
	// starts after the horizon and the spacing.
	if err := raw(t, r).Del(ctx, "breach_exporter:budget:k").Err(); err != nil {
		t.Fatal(err)
	}
	if w, ok, err := a.Reserve(ctx, "k", time.Second, time.Minute); err != nil || ok || w < time.Minute {
		t.Fatalf("a slot after the key was lost: %v, %v, %v; want none within the horizon", w, ok, err)
	}
}

// Prune pages through a hash larger than one page and keeps exactly what
// keep accepts; Forget removes what it names.
func TestPruneAndForget(t *testing.T) {
	r := testkit.StartRedis(t)
	s := open(t, r, "a", "")
	rdb := raw(t, r)
	ctx := context.Background()
	const n = 2*forgetBatch + 500
	values := make([]any, 0, 2*n)
	for i := range n {
		values = append(values, fmt.Sprint(i), "1")
	}
	if err := rdb.HSet(ctx, "breach_exporter:ready:acct", values...).Err(); err != nil {
		t.Fatal(err)
	}
	even := func(item string) bool {
		var i int
		fmt.Sscan(item, &i)
		return i%2 == 0
	}
	if err := s.Prune(ctx, "acct", even); err != nil {
		t.Fatal(err)
	}
	left, err := rdb.HKeys(ctx, "breach_exporter:ready:acct").Result()
	if err != nil || len(left) != n/2 {
		t.Fatalf("after the prune %d fields are left (%v), want %d", len(left), err, n/2)
	}
	for _, f := range left {
		if !even(f) {
			t.Fatalf("field %s was not pruned", f)
		}
	}
	if err := s.Forget(ctx, "acct", left[1:]); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.HKeys(ctx, "breach_exporter:ready:acct").Result(); err != nil || !slices.Equal(got, left[:1]) {
		t.Fatalf("after forgetting all but %s: %v, %v", left[0], got, err)
	}
}

func TestClaimAndRelease(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()
	claim := func(s replica, scope, item string, lease time.Duration, urgent bool) bool {
		t.Helper()
		ok, err := s.Claim(ctx, scope, item, lease, urgent)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	release := func(s replica, scope, item string, readyIn time.Duration) {
		t.Helper()
		if err := s.Release(ctx, scope, item, readyIn); err != nil {
			t.Fatal(err)
		}
	}

	if !claim(a, "poll", "x", time.Minute, false) {
		t.Fatal("a free item was not claimed")
	}
	if claim(b, "poll", "x", time.Minute, false) || claim(b, "poll", "x", time.Minute, true) {
		t.Fatal("an item claimed twice")
	}
	if claim(a, "poll", "x", time.Minute, false) {
		t.Fatal("the holder claimed its item again")
	}
	if !claim(b, "other", "x", time.Minute, false) {
		t.Fatal("another scope's item of the same name was not claimed")
	}

	// Only the holder's release frees the claim.
	release(b, "poll", "x", 0)
	if claim(b, "poll", "x", time.Minute, true) {
		t.Fatal("another replica's release freed a's claim")
	}
	release(a, "poll", "x", time.Hour)
	if claim(b, "poll", "x", time.Minute, false) {
		t.Fatal("an item claimed before its ready time")
	}
	if !claim(b, "poll", "x", time.Minute, true) {
		t.Fatal("an urgent claim waited for the ready time")
	}

	// A lease runs out.
	if !claim(a, "poll", "lease", 50*time.Millisecond, false) {
		t.Fatal("a free item was not claimed")
	}
	waitFor(t, 10*time.Second, "the lease to run out", func() bool {
		return claim(b, "poll", "lease", time.Minute, false)
	})

	// A ready time passes.
	if !claim(a, "poll", "ready", time.Minute, false) {
		t.Fatal("a free item was not claimed")
	}
	release(a, "poll", "ready", 100*time.Millisecond)
	start := time.Now()
	waitFor(t, 10*time.Second, "the ready time to pass", func() bool {
		return claim(b, "poll", "ready", time.Minute, false)
	})
	if time.Since(start) < 50*time.Millisecond {
		t.Error("claimed before the ready time")
	}
}

func TestPublishOnceAddsOneOfConcurrentDuplicates(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()
	const rounds = 20
	for i := range rounds {
		digest := fmt.Sprint("d", i)
		start := make(chan struct{})
		added := make(chan bool, 2)
		var wg sync.WaitGroup
		for _, s := range []replica{a, b} {
			wg.Go(func() {
				<-start
				ok, err := publishOnce(s, digest, time.Hour, []byte(digest))
				if err != nil {
					t.Error(err)
				}
				added <- ok
			})
		}
		close(start)
		wg.Wait()
		if n := btoi(<-added) + btoi(<-added); n != 1 {
			t.Fatalf("round %d: %d of 2 added", i, n)
		}
	}
	var got []string
	if _, err := a.Read(ctx, "0-0", "+", func(e Event) { got = append(got, string(e.Data)) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != rounds {
		t.Fatalf("%d events for %d digests: %v", len(got), rounds, got)
	}

	// Once the ttl has passed, the digest is new again.
	if ok, err := publishOnce(a, "short", 50*time.Millisecond, nil); !ok || err != nil {
		t.Fatalf("first publication: %v, %v", ok, err)
	}
	waitFor(t, 10*time.Second, "the digest to expire", func() bool {
		ok, err := publishOnce(b, "short", time.Hour, nil)
		return ok && err == nil
	})
}

// publishOnce publishes one alert event with PublishOnceBatch.
func publishOnce(s replica, digest string, ttl time.Duration, data []byte) (bool, error) {
	ids, err := s.PublishOnceBatch(context.Background(), ttl, []Once{{Digest: digest, Kind: "alert", Data: data}})
	if err != nil {
		return false, err
	}
	return ids[0] != "", nil
}

// A batch adds its events in order, a digest repeated in it once.
func TestPublishOnceBatchInOrder(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "")
	ctx := context.Background()
	ids, err := a.PublishOnceBatch(ctx, time.Hour, []Once{
		{Digest: "x", Kind: "alert", Data: []byte("1")},
		{Digest: "y", Kind: "alert", Data: []byte("2")},
		{Digest: "x", Kind: "alert", Data: []byte("3")},
	})
	if err != nil || len(ids) != 3 || ids[0] == "" || ids[1] == "" || ids[2] != "" {
		t.Fatalf("ids %q, %v; want two IDs and a duplicate", ids, err)
	}
	var got, gotIDs, prevs []string
	if _, err := a.Read(ctx, "0-0", "+", func(e Event) {
		got, gotIDs, prevs = append(got, string(e.Data)), append(gotIDs, e.ID), append(prevs, e.Prev)
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"1", "2"}) || !slices.Equal(gotIDs, ids[:2]) {
		t.Fatalf("stream %v with IDs %v, want [1 2] with %v", got, gotIDs, ids[:2])
	}
	// Each names the newest ID before it: trimming does not move it back,
	// deleting the stream does.
	if !slices.Equal(prevs, []string{"0-0", ids[0]}) {
		t.Fatalf("prev %q, want 0-0 then the first ID", prevs)
	}
	prevOfNext := func(digest string) string {
		t.Helper()
		ids, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: digest, Kind: "alert", Data: []byte(digest)}})
		if err != nil {
			t.Fatal(err)
		}
		prev := ""
		if _, err := a.Read(ctx, "0-0", "+", func(e Event) {
			if e.ID == ids[0] {
				prev = e.Prev
			}
		}); err != nil {
			t.Fatal(err)
		}
		return prev
	}
	rdb := raw(t, r)
	if err := rdb.XTrimMaxLen(ctx, "breach_exporter:events", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if prev := prevOfNext("z"); prev != ids[1] {
		t.Errorf("after trimming: prev %q, want %q", prev, ids[1])
	}
	if err := rdb.Del(ctx, "breach_exporter:events").Err(); err != nil {
		t.Fatal(err)
	}
	if prev := prevOfNext("w"); prev != "0-0" {
		t.Errorf("after deleting the stream: prev %q, want 0-0", prev)
	}
}

// TestPublishOnceBatchFindsEarlierOnesPastAThousand publishes a batch
// longer than the script's duplicate check reads at once: the digests
// this replica and another published before, on both sides of the
// thousandth, are told apart from the new ones.
func TestPublishOnceBatchFindsEarlierOnesPastAThousand(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()
	digest := func(i int) string { return fmt.Sprintf("d%04d", i) }
	before := map[int]replica{3: a, 999: b, 1000: a, 1001: b, 1499: a}
	earlier := map[int]string{}
	for i, s := range before {
		ids, err := s.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: digest(i), Kind: "alert", Data: []byte("old")}})
		if err != nil || ids[0] == "" {
			t.Fatalf("publishing %d first: %q, %v", i, ids, err)
		}
		if s == a {
			earlier[i] = ids[0] // this replica's: its ID again
		} else {
			earlier[i] = "" // another's: none
		}
	}
	events := make([]Once, 1500)
	for i := range events {
		events[i] = Once{Digest: digest(i), Kind: "alert", Data: []byte("new")}
	}
	ids, err := a.PublishOnceBatch(ctx, time.Hour, events)
	if err != nil || len(ids) != len(events) {
		t.Fatalf("%d ids, %v", len(ids), err)
	}
	for i, id := range ids {
		want, old := earlier[i]
		if old && id != want || !old && id == "" {
			t.Errorf("event %d (published before: %v): ID %q, want %q (a new one when not)", i, old, id, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestReadInOrderAcrossPages(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	ctx := context.Background()
	if last, err := a.Last(ctx); err != nil || last != "0-0" {
		t.Fatalf("Last of no events: %q, %v", last, err)
	}
	if last, err := a.Read(ctx, "0-0", "+", func(Event) { t.Error("an event where there is none") }); err != nil || last != "0-0" {
		t.Fatalf("Read of no events: %q, %v", last, err)
	}
	const n = 1234 // more than two pages
	ids := make([]string, n)
	for i := range n {
		s := a
		if i%3 == 0 {
			s = b
		}
		id, err := s.Publish(ctx, fmt.Sprint("kind", i%2), []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	if last, err := b.Last(ctx); err != nil || last != ids[n-1] {
		t.Fatalf("Last: %q, %v; want %q", last, err, ids[n-1])
	}
	check := func(from, to int, after, until string) {
		t.Helper()
		i := from
		last, err := a.Read(ctx, after, until, func(e Event) {
			// Each names the one before it, the first the stream's start.
			prev := "0-0"
			if i > 0 {
				prev = ids[i-1]
			}
			want := Event{ID: ids[i], Kind: fmt.Sprint("kind", i%2), Origin: map[bool]string{true: "b", false: "a"}[i%3 == 0], Data: []byte(fmt.Sprint(i)), Prev: prev}
			if fmt.Sprint(e) != fmt.Sprint(want) {
				t.Fatalf("event %d: %+v, want %+v", i, e, want)
			}
			i++
		})
		if err != nil || i != to || last != ids[to-1] {
			t.Fatalf("Read(%s, %s): to %d, last %q, %v; want to %d, last %q", after, until, i, last, err, to, ids[to-1])
		}
	}
	check(0, n, "0-0", ids[n-1])
	check(0, n, "", "")
	check(600, 900, ids[599], ids[899])
}

// follow runs s.Follow until the test ends and hands over what it applies.
func follow(t *testing.T, s replica, after string) <-chan Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event, 10000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Follow(ctx, after, func(e Event) { events <- e })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return events
}

func nextEvent(t *testing.T, events <-chan Event, d time.Duration) Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(d):
		t.Fatalf("no event in %v", d)
		return Event{}
	}
}

// run runs s.Run until the test ends.
func run(t *testing.T, s replica) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func TestFollowGoesOnAfterTheStoreWasUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage and a restart of redis-server, about 3 s of real time: the full run checks it")
	}
	r := testkit.StartOwnRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "b", "")
	a.pingEvery, a.recheckEvery = 100*time.Millisecond, 300*time.Millisecond
	ctx := context.Background()
	first, err := b.Publish(ctx, "k", []byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "k", []byte("one")); err != nil {
		t.Fatal(err)
	}
	run(t, a)
	events := follow(t, a, first)
	if e := nextEvent(t, events, 10*time.Second); string(e.Data) != "one" || e.Origin != "b" {
		t.Fatalf("first event followed: %+v", e)
	}
	waitFor(t, 10*time.Second, "the store to be up", func() bool { return testutil.ToFloat64(a.up) == 1 })

	r.Pause()
	waitFor(t, 30*time.Second, "the store to be down", func() bool { return testutil.ToFloat64(a.up) == 0 })
	r.Resume()
	waitFor(t, 30*time.Second, "the store to be up again", func() bool { return testutil.ToFloat64(a.up) == 1 })
	for i := range 3 {
		if _, err := b.Publish(ctx, "k", []byte(fmt.Sprint("after", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if e := nextEvent(t, events, 30*time.Second); string(e.Data) != fmt.Sprint("after", i) {
			t.Fatalf("event %d after the outage: %+v", i, e)
		}
	}
	if n := a.log.Count("level=warn", "does not answer"); n != 1 {
		t.Errorf("%d warnings of the outage, want 1:\n%s", n, a.log)
	}
	if n := a.log.Count("level=info", "answers"); n != 2 {
		t.Errorf("%d lines of the store answering, want 2 (the start, the end of the outage):\n%s", n, a.log)
	}
	if testutil.ToFloat64(a.errs.WithLabelValues("ping"))+testutil.ToFloat64(a.errs.WithLabelValues("follow")) == 0 {
		t.Error("no error counted in the outage")
	}
	if strings.Contains(a.log.String(), "redis://") {
		t.Errorf("the log names the URL:\n%s", a.log)
	}

	// A restart loses the stream (no persistence here); Follow reconnects
	// and takes the events published after it.
	r.Stop()
	r.Start()
	waitFor(t, 30*time.Second, "a publication after the restart", func() bool {
		_, err := b.Publish(ctx, "k", []byte("restarted"))
		return err == nil
	})
	if e := nextEvent(t, events, 30*time.Second); string(e.Data) != "restarted" {
		t.Fatalf("event after the restart: %+v", e)
	}
}

func TestFollowAndReadReportATrimmedGapOnce(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "")
	a.recheckEvery = 200 * time.Millisecond
	ctx := context.Background()
	var ids []string
	for i := range 50 {
		id, err := a.Publish(ctx, "k", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := raw(t, r).XTrimMaxLen(ctx, "breach_exporter:events", 10).Err(); err != nil {
		t.Fatal(err)
	}
	// From an event that is still there: no gap.
	if _, err := a.Read(ctx, ids[45], "+", func(Event) {}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(a.missed); got != 0 {
		t.Fatalf("missed %v without a gap", got)
	}
	var got []string
	if _, err := a.Read(ctx, ids[5], "+", func(e Event) { got = append(got, string(e.Data)) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || got[0] != "40" {
		t.Fatalf("read after the gap: %v", got)
	}
	events := follow(t, a, ids[5])
	for i := 40; i < 50; i++ {
		if e := nextEvent(t, events, 10*time.Second); string(e.Data) != fmt.Sprint(i) {
			t.Fatalf("followed %+v, want event %d", e, i)
		}
	}
	if got := testutil.ToFloat64(a.missed); got != 1 {
		t.Errorf("missed_total %v after one gap read twice from the same event, want 1", got)
	}
	if n := a.log.Count("level=warn", "trimmed"); n != 1 {
		t.Errorf("%d warnings of the gap, want 1:\n%s", n, a.log)
	}
}

func TestPrefixesKeepDeploymentsApart(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", ""), open(t, r, "a", "other")
	ctx := context.Background()
	if _, err := a.Publish(ctx, "k", nil); err != nil {
		t.Fatal(err)
	}
	if last, err := b.Last(ctx); err != nil || last != "0-0" {
		t.Fatalf("another prefix sees the event: %q, %v", last, err)
	}
	if ok, _ := a.Claim(ctx, "s", "i", time.Minute, false); !ok {
		t.Fatal("claim")
	}
	if ok, _ := b.Claim(ctx, "s", "i", time.Minute, false); !ok {
		t.Fatal("another prefix shares the claim")
	}
	keys, err := raw(t, r).Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	want := []string{"breach_exporter:alive:a", "breach_exporter:claim:s:i", "breach_exporter:deployment", "breach_exporter:events",
		"other:alive:a", "other:claim:s:i", "other:deployment"}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
}

func TestCommandsWhileTheStoreIsDownFailInTime(t *testing.T) {
	r := testkit.StartOwnRedis(t)
	s := open(t, r, "a", "")
	ctx := context.Background()
	if _, _, err := s.Reserve(ctx, "k", time.Second, time.Hour); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	start := time.Now()
	_, _, err := s.Reserve(ctx, "k", time.Second, time.Hour)
	if err == nil {
		t.Fatal("Reserve succeeded with the store stopped")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Reserve took %v to fail", d)
	}
	if testutil.ToFloat64(s.up) != 0 || testutil.ToFloat64(s.errs.WithLabelValues("reserve")) != 1 {
		t.Errorf("after a failed reserve: up %v, errors %v", testutil.ToFloat64(s.up), testutil.ToFloat64(s.errs.WithLabelValues("reserve")))
	}
	// A caller that gives up says nothing about the store.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Claim(cctx, "s", "i", time.Second, false); !errors.Is(err, context.Canceled) {
		t.Errorf("Claim with a cancelled context: %v", err)
	}
	if n := testutil.ToFloat64(s.errs.WithLabelValues("claim")); n != 0 {
		t.Errorf("a cancelled claim counted as %v errors", n)
	}
	r.Start()
	waitFor(t, 30*time.Second, "a reservation after the restart", func() bool {
		_, _, err := s.Reserve(ctx, "k", time.Second, time.Hour)
		return err == nil
	})
	if testutil.ToFloat64(s.up) != 1 {
		t.Error("not up after a command succeeded")
	}
}

// A store that answers but refuses writes (out of memory under noeviction,
// a read-only replica after a failover, a failing RDB save) does none of
// the work: it is down, so that BreachExporterStoreDown fires, until it
// takes writes again.
func TestStoreThatRefusesWritesIsDown(t *testing.T) {
	r := testkit.StartOwnRedis(t)
	a := open(t, r, "a", "")
	a.pingEvery = 50 * time.Millisecond
	run(t, a)
	waitFor(t, 10*time.Second, "the store to be up", func() bool { return testutil.ToFloat64(a.up) == 1 })

	ctx := context.Background()
	c := raw(t, r)
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Reserve(ctx, "k", time.Second, time.Hour); err == nil {
		t.Fatal("Reserve succeeded on a store out of memory")
	}
	waitFor(t, 10*time.Second, "the store to be down", func() bool { return testutil.ToFloat64(a.up) == 0 })
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the store to be up again", func() bool { return testutil.ToFloat64(a.up) == 1 })
}

// Stream IDs order as pairs of numbers, not as strings.
func TestAfter(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"10-0", "9-0", true}, {"9-0", "10-0", false}, {"5-2", "5-10", false}, {"5-10", "5-2", true},
		{"5-1", "5-1", false}, {"1-0", "", true}, {"", "0-0", false}, {"x", "1-0", false},
	} {
		if got := After(c.a, c.b); got != c.want {
			t.Errorf("After(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// Scan looks back at events as they are: from a place before the first
// entry left (trimmed since), it reads what is left up to until, and counts
// no gap, which is a reader's, not a look back's.
func TestScanLooksBackWithoutAGap(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "")
	ctx := context.Background()
	var ids []string
	for i := range 4 {
		id, err := a.Publish(ctx, "kind", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := raw(t, r).XTrimMinID(ctx, a.key("events"), ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := a.Scan(ctx, "1-0", ids[2], func(e Event) { got = append(got, e.ID) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(ids[1:3]) {
		t.Errorf("Scan read %v, want %v", got, ids[1:3])
	}
	if n := testkit.Samples(t, a.reg)[testkit.Series("breach_exporter_store_events_missed_total")]; n != 0 {
		t.Errorf("events_missed_total = %v after a look back, want 0", n)
	}
}
