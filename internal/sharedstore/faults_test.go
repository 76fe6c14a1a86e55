// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// maxID is the largest stream ID: nothing can be added after it.
const maxID = "18446744073709551615-18446744073709551615"

// A publish whose XADD fails at run time leaves no seen key behind: once
// the store is repaired, the alert is added, not taken for a duplicate:
// Redis does not roll back a script's writes when a later one fails.
func TestPublishThatFailsLeavesNothingBehind(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "failed")
	c := raw(t, r)
	ctx := context.Background()
	// A stream key of the wrong type: XADD fails inside the script.
	if err := c.Set(ctx, "failed:events", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d", Kind: "alert", Data: []byte("x")}}); err == nil {
		t.Fatal("a publish onto a key of the wrong type succeeded")
	}
	if n, _ := c.Exists(ctx, "failed:seen:d").Result(); n != 0 {
		t.Error("the failed publish left its seen key behind")
	}
	if err := c.Del(ctx, "failed:events").Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d", Kind: "alert", Data: []byte("x")}})
	if err != nil || len(ids) != 1 || ids[0] == "" {
		t.Fatalf("after the store was repaired: ids %q, %v; want the alert added", ids, err)
	}
}

// farAhead is a stream ID a day ahead of now.
func farAhead() string {
	return strconv.FormatInt(time.Now().Add(24*time.Hour).UnixMilli(), 10) + "-0"
}

// Stream IDs that would stall every reader: the largest one, one far ahead
// of the store's clock, a reader's position past a stream that was
// deleted. Each is detected, counted, logged and recovered from: XADD
// gives every later entry an ID after such an entry, or none at all.
func TestStreamIDsThatWouldStallAreRecovered(t *testing.T) {
	r := testkit.StartRedis(t)
	a, b := open(t, r, "a", "stall"), open(t, r, "b", "stall")
	a.recheckEvery = 200 * time.Millisecond
	c := raw(t, r)
	ctx := context.Background()
	if _, err := b.Publish(ctx, "k", []byte("first")); err != nil {
		t.Fatal(err)
	}
	events := follow(t, a, "0-0")
	if e := nextEvent(t, events, 10*time.Second); string(e.Data) != "first" {
		t.Fatalf("first event: %+v", e)
	}

	// The largest ID, written behind the replicas' backs.
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "stall:events", ID: maxID, Values: []any{"kind", "k", "origin", "x", "data", "forged"}}).Err(); err != nil {
		t.Fatal(err)
	}
	after, err := b.Publish(ctx, "k", []byte("after the largest ID"))
	if err != nil {
		t.Errorf("publish after the largest ID: %v", err)
	}
	// Deleted and recreated: the followers' positions are past it. The
	// recreated stream's first entry is of a later millisecond than the
	// last one read, as any deletion by hand is (within the same
	// millisecond the new stream's ID can equal the reader's position,
	// which no reader can tell from the old entry: docs/replicas.md).
	if ms, _, ok := parseID(after); ok {
		waitFor(t, 5*time.Second, "the store's clock past the last entry", func() bool {
			now, err := c.Time(ctx).Result()
			return err == nil && uint64(now.UnixMilli()) > ms
		})
	}
	if err := c.Del(ctx, "stall:events").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, "k", []byte("recreated")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) == 0 || got[len(got)-1] != "recreated" {
		e := nextEvent(t, events, 10*time.Second)
		if string(e.Data) == "forged" {
			t.Errorf("the follower applied the entry at the largest ID: %+v", e)
		}
		got = append(got, string(e.Data))
	}
	// Whichever came first, the publisher or the reader, removed it.
	aheadResets := testkit.Series("breach_exporter_store_stream_resets_total", "reason", "ahead")
	if n := testkit.Samples(t, a.reg)[aheadResets] + testkit.Samples(t, b.reg)[aheadResets]; n == 0 {
		t.Error("the entry at the largest ID was not counted")
	}
	if !strings.Contains(a.log.String()+b.log.String(), "stream") {
		t.Errorf("no log line of the reset:\n%s%s", a.log, b.log)
	}

	// A reader whose position is far ahead of the store's clock goes on
	// with what is added now.
	recreated := testkit.Series("breach_exporter_store_stream_resets_total", "reason", "recreated")
	before := testkit.Samples(t, a.reg)[recreated]
	ahead := follow(t, a, farAhead())
	waitFor(t, 10*time.Second, "the reader far ahead to move back", func() bool { return testkit.Samples(t, a.reg)[recreated] > before })
	if _, err := b.Publish(ctx, "k", []byte("now")); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, ahead, 10*time.Second); string(e.Data) != "now" {
		t.Fatalf("a reader far ahead read %+v, want the event added now", e)
	}

	// An entry far ahead of the store's clock is not delivered, and the
	// events after it get IDs on the store's clock.
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "stall:events", ID: farAhead(), Values: []any{"kind", "k", "origin", "x", "data", "forged ahead"}}).Err(); err != nil {
		t.Fatal(err)
	}
	id, err := b.Publish(ctx, "k", []byte("after the forged one"))
	if err != nil {
		t.Fatal(err)
	}
	if ms, _, _ := parseID(id); time.UnixMilli(int64(ms)).After(time.Now().Add(time.Hour)) {
		t.Errorf("an event published after an entry far ahead got the ID %s", id)
	}
	for _, ch := range []<-chan Event{events, ahead} {
		for {
			e := nextEvent(t, ch, 10*time.Second)
			if string(e.Data) == "forged ahead" {
				t.Fatalf("an entry far ahead of the store's clock was delivered: %+v", e)
			}
			if string(e.Data) == "after the forged one" {
				break
			}
		}
	}
}

// refuseWrites makes the store refuse every write in one of the two ways
// a real one does, and returns what undoes it.
func refuseWrites(t *testing.T, c *redis.Client, how string) func() {
	t.Helper()
	ctx := context.Background()
	switch how {
	case "maxmemory":
		must(t, c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
		must(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
		return func() { must(t, c.ConfigSet(ctx, "maxmemory", "0").Err()) }
	default:
		// A replica of a master that does not answer: read-only.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		host, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		must(t, c.ReplicaOf(ctx, host, port).Err())
		return func() { must(t, c.ReplicaOf(ctx, "NO", "ONE").Err()) }
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// store_up means that reads and writes work: a store that answers reads
// but refuses writes is down however many reads succeed, and the log has
// one line of it, so that BreachExporterStoreDown's for: is not reset
// by a read that worked.
func TestStoreUpStaysDownWhileWritesAreRefused(t *testing.T) {
	r := testkit.StartOwnRedis(t)
	for _, how := range []string{"maxmemory", "read-only"} {
		t.Run(how, func(t *testing.T) {
			a := open(t, r, "a", "up-"+how)
			a.pingEvery = 50 * time.Millisecond
			run(t, a)
			waitFor(t, 10*time.Second, "the store to be up", func() bool { return testutil.ToFloat64(a.up) == 1 })
			// An item not ready for an hour: claiming it is a script that
			// succeeds without writing, also on a store that refuses writes.
			if err := a.Release(context.Background(), "s", "later", time.Hour); err != nil {
				t.Fatal(err)
			}
			undo := refuseWrites(t, raw(t, r), how)
			undone := false
			t.Cleanup(func() {
				if !undone {
					undo()
				}
			})
			waitFor(t, 10*time.Second, "the store to be down", func() bool { return testutil.ToFloat64(a.up) == 0 })
			ctx := context.Background()
			for i := range 20 {
				if _, err := a.Read(ctx, "0-0", "+", func(Event) {}); err != nil {
					t.Fatal(err)
				}
				if _, _, err := a.LoadCheckpoint(ctx, 1<<20); err != nil {
					t.Fatal(err)
				}
				if _, err := a.Head(ctx); err != nil {
					t.Fatal(err)
				}
				if got := testutil.ToFloat64(a.up); got != 0 {
					t.Fatalf("read %d on a store that refuses writes: store_up %v", i, got)
				}
				if claimed, err := a.Claim(ctx, "s", "later", time.Minute, false); err != nil || claimed {
					t.Fatalf("claim of an item not ready: %v, %v", claimed, err)
				}
				if got := testutil.ToFloat64(a.up); got != 0 {
					t.Fatalf("a claim that wrote nothing, %d, on a store that refuses writes: store_up %v", i, got)
				}
			}
			if n := a.log.Count("level=warn", "does not"); n != 1 {
				t.Errorf("%d warnings of the store down, want 1:\n%s", n, a.log)
			}
			undo()
			undone = true
			waitFor(t, 10*time.Second, "the store to be up again", func() bool { return testutil.ToFloat64(a.up) == 1 })
		})
	}
}

// A publish with the store's replicas online waits for one of them: while
// none acknowledges, the publish is not confirmed (ErrNotReplicated), and
// publishing it again finds this replica's own entry.
func TestPublishWaitsForAReplicaOfTheStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two redis-servers")
	}
	primary, secondary := testkit.StartOwnRedis(t), testkit.StartOwnRedis(t)
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(primary.Addr())
	p := raw(t, primary)
	// The first sync at once, not after the default 5 s.
	must(t, p.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	must(t, raw(t, secondary).ReplicaOf(ctx, host, port).Err())
	waitFor(t, 30*time.Second, "the replica online", func() bool {
		info, err := p.Info(ctx, "replication").Result()
		return err == nil && onlineReplicas(info) == 1
	})
	a := open(t, primary, "a", "wait")
	a.countReplicas(ctx)
	if n := a.storeReplicas.Load(); n != 1 {
		t.Fatalf("%d replicas of the store seen, want 1", n)
	}
	if _, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d1", Kind: "alert"}}); err != nil {
		t.Fatalf("a publish the replica holds: %v", err)
	}
	secondary.Pause()
	ids, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d2", Kind: "alert"}})
	if !errors.Is(err, ErrNotReplicated) || len(ids) != 1 || ids[0] == "" {
		t.Fatalf("a publish no replica acknowledged: %q, %v; want its ID and ErrNotReplicated", ids, err)
	}
	secondary.Resume()
	again, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d2", Kind: "alert"}})
	if err != nil || len(again) != 1 || again[0] != ids[0] {
		t.Fatalf("published again once the replica is back: %q, %v; want %q", again, err, ids[0])
	}
}

// The least privilege docs/replicas.md gives is enough for every
// operation of the client.
func TestLeastPrivilegeACL(t *testing.T) {
	r := testkit.StartOwnRedis(t)
	ctx := context.Background()
	c := raw(t, r)
	must(t, c.Do(ctx, aclLine(t, "pw", false)...).Err())
	s, err := Open(Options{URL: "redis://breach_exporter@" + r.Addr(), Password: "pw", KeyPrefix: "breach_exporter", Replica: "a", Deployment: "d"})
	must(t, err)
	defer s.Close()
	must(t, s.Join(ctx))
	s.countReplicas(ctx)
	if s.waitRefused.Load() {
		t.Error("INFO refused")
	}
	_, _, err = s.Reserve(ctx, "k", time.Second, time.Minute)
	must(t, err)
	must(t, s.Pause(ctx, "k", time.Second))
	_, err = s.Claim(ctx, "s", "i", time.Minute, false)
	must(t, err)
	must(t, s.Release(ctx, "s", "i", time.Second))
	_, err = s.Publish(ctx, "k", []byte("x"))
	must(t, err)
	// An entry far ahead: the next publish repairs the stream.
	must(t, c.XAdd(ctx, &redis.XAddArgs{Stream: "breach_exporter:events", ID: farAhead(), Values: []any{"data", "y"}}).Err())
	ids, err := s.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d", Kind: "alert"}})
	must(t, err)
	_, err = s.Read(ctx, "0-0", "+", func(Event) {})
	must(t, err)
	_, err = s.Last(ctx)
	must(t, err)
	if lowest, complete, err := s.Formats(ctx); err != nil || lowest != storeFormat || !complete {
		t.Errorf("Formats: %d, %v, %v; want %d, complete", lowest, complete, err, storeFormat)
	}
	_, err = s.WriteCheckpoint(ctx, Checkpoint{ID: ids[0], Lineage: "L", Data: []byte("whole")}, "")
	must(t, err)
	_, err = s.WriteCheckpoint(ctx, onePart(ids[0], "L", "c", ""), "")
	must(t, err)
	ck, _, err := s.LoadCheckpoint(ctx, 1<<20)
	must(t, err)
	_, err = s.ReadParts(ctx, ck.Gen, []string{"s"}, 1<<20)
	must(t, err)
	_, err = s.Head(ctx)
	must(t, err)
	must(t, s.MarkSynced(ctx, time.Second))
	must(t, s.repairAhead(ctx, "read"))
	f := follower{last: "0-0", apply: func(Event) {}}
	_, err = s.followOnce(ctx, &f)
	must(t, err)
	must(t, s.Forget(ctx, "s", []string{"i"}))
	_, _, err = s.Formats(ctx)
	must(t, err)
	must(t, s.Prune(ctx, "s", func(string) bool { return false }))
}

// aclLine is the ACL SETUSER command docs/replicas.md gives, with
// password: the one for a cluster (its keys in the hash tag) or the one
// for one server and Sentinels.
func aclLine(t *testing.T, password string, cluster bool) []any {
	t.Helper()
	doc, err := os.ReadFile("../../docs/replicas.md")
	must(t, err)
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(line, "ACL SETUSER breach_exporter ") || strings.Contains(line, "~{") != cluster {
			continue
		}
		var acl []any
		for _, f := range strings.Fields(strings.ReplaceAll(line, ">PASSWORD", ">"+password)) {
			acl = append(acl, f)
		}
		return acl
	}
	t.Fatalf("docs/replicas.md gives no ACL SETUSER line (cluster: %v)", cluster)
	return nil
}

// A replica of another deployment under the same prefix is refused, by
// Join and by every command after it; the first deployment goes on.
func TestJoinRefusesAnotherDeployment(t *testing.T) {
	r := testkit.StartOwnRedis(t)
	ctx := context.Background()
	a := open(t, r, "a", "shared") // deployment ""
	b, err := Open(Options{URL: r.URL(), KeyPrefix: "shared", Replica: "b", Deployment: "other"})
	must(t, err)
	defer b.Close()
	var foreign *ErrForeign
	if err := b.Join(ctx); !errors.As(err, &foreign) || !strings.Contains(err.Error(), `"shared"`) {
		t.Fatalf("Join of another deployment: %v", err)
	}
	if _, err := b.Publish(ctx, "k", nil); !errors.As(err, &foreign) {
		t.Errorf("a publish after a refused join: %v", err)
	}
	if _, err := a.Publish(ctx, "k", nil); err != nil {
		t.Errorf("the first deployment: %v", err)
	}
	// A store that evicts keys is worth a warning.
	must(t, raw(t, r).ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	a.countReplicas(ctx)
	if !strings.Contains(a.log.String(), "maxmemory_policy=allkeys-lru") {
		t.Errorf("no warning of a store that evicts keys:\n%s", a.log)
	}
	// Before any check, nothing reaches the store.
	c, err := Open(Options{URL: r.URL(), KeyPrefix: "unchecked", Replica: "c"})
	must(t, err)
	defer c.Close()
	if _, err := c.Publish(ctx, "k", nil); !errors.Is(err, errNotJoined) {
		t.Errorf("a publish before the identity was checked: %v", err)
	}
}
