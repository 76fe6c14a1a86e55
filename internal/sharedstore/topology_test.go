// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The store topologies on real servers: make store-topologies-test runs
// them (testkit.StoreTopologies).

// openOn opens and joins a Client of o named name.
func openOn(t *testing.T, o Options, name string) replica {
	t.Helper()
	reg, buf := prometheus.NewRegistry(), &testkit.SyncBuffer{}
	o.Replica, o.Registerer, o.Logger = name, reg, log.NewLogfmtLogger(buf)
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Join(context.Background()); err != nil {
		t.Fatalf("%s: join: %v", name, err)
	}
	return replica{s, reg, buf}
}

// noErrors fails t when a replica counted a failed command: on a
// cluster, a CROSSSLOT refusal is one.
func noErrors(t *testing.T, rs ...replica) {
	t.Helper()
	for _, r := range rs {
		for series, v := range testkit.Samples(t, r.reg) {
			if strings.HasPrefix(series, "breach_exporter_store_errors_total") && v != 0 {
				t.Errorf("%s: %s = %v\n%s", r.replica, series, v, r.log.String())
			}
		}
	}
}

// On a 3-master cluster over TLS, as the least-privilege ACL user of
// docs/replicas.md, every operation works for replicas that share it:
// budgets, claims, the stream, the checkpoint. Every key is in one hash
// slot. Before the hash tag, the health check, claims and publishes
// failed with CROSSSLOT.
func TestTopologyClusterOverTLS(t *testing.T) {
	testkit.StoreTopologies(t)
	cluster := testkit.StartRedisCluster(t, 3)
	ctx := context.Background()
	for _, addr := range cluster.Addrs {
		must(t, cluster.Node(t, addr).Do(ctx, aclLine(t, "pw", true)...).Err())
	}
	o := Options{Servers: cluster.Addrs, TLS: cluster.TLS(t), Username: "breach_exporter", Password: "pw", KeyPrefix: "breach_exporter", Deployment: "d"}
	a, b := openOn(t, o, "a"), openOn(t, o, "b")
	st := slotTaker{t: t}
	seen := map[time.Time]bool{}
	for i := range 20 {
		at := st.take([]replica{a, b}[i%2], "k")
		if seen[at] {
			t.Fatalf("slot %v handed out twice", at)
		}
		seen[at] = true
	}
	must(t, a.Pause(ctx, "k", time.Millisecond))
	claimed := 0
	for _, r := range []replica{a, b} {
		ok, err := r.Claim(ctx, "s", "item", time.Minute, false)
		must(t, err)
		claimed += btoi(ok)
	}
	if claimed != 1 {
		t.Fatalf("%d claims of one item, want 1", claimed)
	}
	must(t, a.Release(ctx, "s", "item", 0))
	must(t, b.Release(ctx, "s", "item", 0))
	must(t, a.Prune(ctx, "s", func(string) bool { return false }))
	publishEach(t, []replica{a, b}, 50)
	n := 0
	last, err := b.Read(ctx, "0-0", "+", func(Event) { n++ })
	must(t, err)
	if n != 50 {
		t.Fatalf("%d events in the stream for 50 digests", n)
	}
	saved, err := a.WriteCheckpoint(ctx, onePart(last, "L", "state", "x"), "")
	if err != nil || !saved {
		t.Fatalf("checkpoint: %v, %v", saved, err)
	}
	c, ok, err := b.LoadCheckpoint(ctx, 1<<20)
	if err != nil || !ok || c.ID != last || c.Lineage != "L" || readOnePart(t, b.Client, c) != "state" {
		t.Fatalf("checkpoint read back: %+v %v %v", c, ok, err)
	}
	if h, err := b.Head(ctx); err != nil || !h.HasCheckpoint || h.ID != last {
		t.Fatalf("head: %+v, %v", h, err)
	}
	// The alive keys are on the shard of the hash tag: both replicas'.
	if lowest, complete, err := b.Formats(ctx); err != nil || lowest != storeFormat || !complete {
		t.Errorf("Formats on a cluster: %d, %v, %v; want %d, complete", lowest, complete, err, storeFormat)
	}
	must(t, a.MarkSynced(ctx, time.Second))
	a.countReplicas(ctx)
	if a.waitRefused.Load() || a.storeReplicas.Load() != 0 {
		t.Errorf("INFO on the keys' shard: refused %v, replicas %d; want it answered, 0", a.waitRefused.Load(), a.storeReplicas.Load())
	}
	if first := nextEvent(t, follow(t, b, "0-0"), 10*time.Second); first.ID == "" {
		t.Error("follow brought no event")
	}
	oneSlot(t, cluster, "{breach_exporter}:")
	noErrors(t, a, b)
}

// publishEach has every replica publish each of n digests once, all at
// once, and fails t unless exactly one adds each.
func publishEach(t *testing.T, rs []replica, n int) {
	t.Helper()
	added := make([]int, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				ok, err := publishOnce(r, fmt.Sprint("digest-", i), time.Hour, []byte(fmt.Sprint(i)))
				if err != nil {
					t.Errorf("%s: publish %d: %v", r.replica, i, err)
					return
				}
				mu.Lock()
				added[i] += btoi(ok)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for i, c := range added {
		if c != 1 {
			t.Errorf("digest %d added %d times, want 1", i, c)
		}
	}
}

// oneSlot fails t unless every key of the cluster starts with prefix and
// all are in one node.
func oneSlot(t *testing.T, cluster *testkit.RedisCluster, prefix string) {
	t.Helper()
	holding := 0
	for _, addr := range cluster.Addrs {
		keys, err := cluster.Node(t, addr).Keys(context.Background(), "*").Result()
		must(t, err)
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Errorf("key %q outside the hash tag %q", k, prefix)
			}
		}
		if len(keys) > 0 {
			holding++
		}
	}
	if holding != 1 {
		t.Errorf("the keys are on %d nodes, want 1", holding)
	}
}

// Through Sentinels, a SIGKILL of the primary while replicas publish:
// every publish the store confirmed (no error: a replica of the store
// held it) is in the stream after the failover, once; the rest are
// published again until one is confirmed, as the exporter's journal does.
func TestTopologySentinelFailoverLosesNothingConfirmed(t *testing.T) {
	testkit.StoreTopologies(t)
	s := testkit.StartSentinels(t)
	o := Options{Servers: s.Addrs, MasterName: s.MasterName, SentinelPassword: s.Password, KeyPrefix: "p", Deployment: "d"}
	a, b := openOn(t, o, "a"), openOn(t, o, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, r := range []replica{a, b} {
		r.countReplicas(ctx)
		if r.storeReplicas.Load() != 1 {
			t.Fatalf("%s sees %d replicas of the store, want 1", r.replica, r.storeReplicas.Load())
		}
	}
	const n = 200
	confirmed := make(chan string, 2*n)
	var wg sync.WaitGroup
	for i, r := range []replica{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range n {
				digest := fmt.Sprintf("%s-%d", r.replica, j)
				publishUntilConfirmed(ctx, t, r, digest)
				confirmed <- digest
				if i == 0 && j == n/4 {
					s.Primary.Kill()
				}
			}
		}()
	}
	wg.Wait()
	close(confirmed)
	s.WaitFailover(t)
	got := map[string]int{}
	_, err := a.Read(ctx, "0-0", "+", func(e Event) { got[string(e.Data)]++ })
	must(t, err)
	for digest := range confirmed {
		if got[digest] != 1 {
			t.Errorf("confirmed publish %s is %d times in the stream after the failover, want 1", digest, got[digest])
		}
	}
	if len(got) != 2*n {
		t.Errorf("%d events in the stream, want %d", len(got), 2*n)
	}
}

// publishUntilConfirmed publishes digest until the store confirms it,
// through errors and a failover.
func publishUntilConfirmed(ctx context.Context, t *testing.T, r replica, digest string) {
	var err error
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = r.PublishOnceBatch(pctx, time.Hour, []Once{{Digest: digest, Kind: "alert", Data: []byte(digest)}})
		cancel()
		if err == nil {
			return
		}
		r.countReplicas(ctx)              // what the health check (Run) does every 5 s
		time.Sleep(50 * time.Millisecond) // a retry's pace, as the journal's
	}
	t.Errorf("%s: %s never confirmed: %v", r.replica, digest, err)
}

// An ACL user whose password is in a file (store.username and
// store.password_file) with the least privilege docs/replicas.md gives;
// the default user is off, so nothing works without them.
func TestTopologyACLUser(t *testing.T) {
	testkit.StoreTopologies(t)
	r := testkit.StartOwnRedis(t)
	ctx := context.Background()
	c := raw(t, r)
	must(t, c.Do(ctx, aclLine(t, "pw", false)...).Err())
	must(t, c.Do(ctx, "ACL", "SETUSER", "default", "off").Err())
	o := Options{URL: r.URL(), Username: "breach_exporter", Password: "pw", KeyPrefix: "breach_exporter", Deployment: "d"}
	a := openOn(t, o, "a")
	publishEach(t, []replica{a}, 5)
	bad, err := Open(Options{URL: r.URL(), Username: "breach_exporter", Password: "wrong", Replica: "b"})
	must(t, err)
	defer bad.Close()
	if err := bad.Join(ctx); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a wrong password: %v, want WRONGPASS", err)
	}
	noErrors(t, a)
}
