// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// openAs is open for a replica of deployment (the default prefix).
func openAs(t *testing.T, r *testkit.Redis, name, deployment string) replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	buf := &testkit.SyncBuffer{}
	s, err := Open(Options{URL: r.URL(), Replica: name, Deployment: deployment, Registerer: reg, Logger: log.NewLogfmtLogger(buf)})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	must(t, s.Join(context.Background()))
	return replica{s, reg, buf}
}

// alphaOnStore starts a store with a replica of the deployment "alpha"
// joined, and a plain client of the store.
func alphaOnStore(t *testing.T) (*testkit.Redis, replica, *redis.Client) {
	t.Helper()
	r := testkit.StartRedis(t)
	return r, openAs(t, r, "a", "alpha"), raw(t, r)
}

func foreignCount(s replica, what string) float64 {
	return testutil.ToFloat64(s.foreign.WithLabelValues(what))
}

// Once the store holds another deployment's identity (emptied, then
// claimed by the other before this replica's next health check), every
// write of this replica is refused by the store in the same step, writes
// nothing, and locks the replica out: counted, logged, store_up 0.
func TestEveryWriteChecksTheDeployment(t *testing.T) {
	_, a, c := alphaOnStore(t)
	ctx := context.Background()
	must(t, c.FlushDB(ctx).Err())
	must(t, c.Set(ctx, "breach_exporter:deployment", "beta", 0).Err())
	writes := []struct {
		name string
		do   func() error
	}{
		{"health check", func() error { return a.check(ctx) }},
		{"reserve", func() error { _, _, err := a.Reserve(ctx, "k", time.Second, time.Minute); return err }},
		{"pause", func() error { return a.Pause(ctx, "k", time.Second) }},
		{"claim", func() error { _, err := a.Claim(ctx, "s", "i", time.Minute, true); return err }},
		{"release", func() error { return a.Release(ctx, "s", "i", time.Minute) }},
		{"forget", func() error { return a.Forget(ctx, "s", []string{"i"}) }},
		{"publish", func() error { _, err := a.Publish(ctx, "k", []byte("x")); return err }},
		{"publish once", func() error {
			_, err := a.PublishOnceBatch(ctx, time.Minute, []Once{{Digest: "d", Kind: "alert", Data: []byte("x")}})
			return err
		}},
		{"repair", func() error { return a.repairAhead(ctx, "read") }},
		{"checkpoint", func() error {
			_, err := a.WriteCheckpoint(ctx, Checkpoint{ID: "1-0", Lineage: "L", Data: []byte("x")}, "")
			return err
		}},
		{"synced", func() error { return a.MarkSynced(ctx, time.Minute) }},
	}
	for _, w := range writes {
		// As before any health check noticed: the gate lets it through.
		a.joined.Store(joinOK)
		var foreign *ErrForeign
		if err := w.do(); !errors.As(err, &foreign) || foreign.Theirs != "beta" {
			t.Errorf("%s on another deployment's store: %v, want *ErrForeign naming beta", w.name, err)
		}
		if a.joined.Load() != joinForeign {
			t.Errorf("%s refused without locking the replica out", w.name)
		}
		if keys, err := c.Keys(ctx, "*").Result(); err != nil || fmt.Sprint(keys) != "[breach_exporter:deployment]" {
			t.Errorf("after %s the store holds %v (%v), want the other deployment's identity only", w.name, keys, err)
		}
	}
	if got := foreignCount(a, "write"); got != float64(len(writes)) {
		t.Errorf("%v writes counted refused, want %d", got, len(writes))
	}
	if testutil.ToFloat64(a.up) != 0 {
		t.Error("store_up 1 on another deployment's store")
	}
	if !strings.Contains(a.log.String(), "holds another deployment") {
		t.Errorf("the lock-out is not logged:\n%s", a.log)
	}
	// Locked out, nothing is sent at all, reads included.
	// The refusal names the other deployment, not a placeholder.
	var refused *ErrForeign
	if _, err := a.Last(ctx); !errors.As(err, &refused) || refused.Theirs != "beta" {
		t.Errorf("a read after the lock-out: %v, want *ErrForeign naming beta", err)
	}
}

// After the store lost its keys, the first deployment to write claims it,
// whichever write that is, and the other is refused.
func TestFirstDeploymentToWriteClaimsAnEmptiedStore(t *testing.T) {
	r, a, c := alphaOnStore(t)
	ctx := context.Background()
	must(t, c.FlushDB(ctx).Err())
	if _, err := a.Publish(ctx, "k", []byte("x")); err != nil {
		t.Fatalf("the first write to the emptied store: %v", err)
	}
	if got, _ := c.Get(ctx, "breach_exporter:deployment").Result(); got != "alpha" {
		t.Fatalf("the store's identity after the first write: %q, want alpha", got)
	}
	b, err := Open(Options{URL: r.URL(), Replica: "b", Deployment: "beta"})
	must(t, err)
	defer b.Close()
	if err := b.Join(ctx); !errors.As(err, new(*ErrForeign)) {
		t.Fatalf("the second deployment joined: %v", err)
	}

	// The other way round: the other deployment's start claims it first.
	must(t, c.FlushDB(ctx).Err())
	must(t, b.Join(ctx))
	if _, err := a.Publish(ctx, "k", []byte("y")); !errors.As(err, new(*ErrForeign)) {
		t.Fatalf("a write after the other deployment claimed the store: %v", err)
	}
	if n, _ := c.XLen(ctx, "breach_exporter:events").Result(); n != 0 {
		t.Errorf("the stream holds %d entries, want none of the refused write", n)
	}
}

// Readers apply the stream entries of their deployment and those that
// name none (the previous release writes none), and skip another
// deployment's, counted; every entry added names its deployment.
func TestReadersSkipAnotherDeploymentsEntries(t *testing.T) {
	_, a, c := alphaOnStore(t)
	ctx := context.Background()
	add := func(values ...any) {
		must(t, c.XAdd(ctx, &redis.XAddArgs{Stream: "breach_exporter:events", Values: values}).Err())
	}
	add("kind", "k", "origin", "old", "data", "previous release")
	add("kind", "k", "origin", "b", "deployment", "beta", "data", "beta's")
	if _, err := a.Publish(ctx, "k", []byte("alpha's")); err != nil {
		t.Fatal(err)
	}
	entries, err := c.XRange(ctx, "breach_exporter:events", "-", "+").Result()
	must(t, err)
	if got := entries[2].Values["deployment"]; got != "alpha" {
		t.Errorf("a published entry names deployment %v, want alpha", got)
	}
	want := []string{"previous release", "alpha's"}
	var read []string
	if _, err := a.Read(ctx, "0-0", "", func(e Event) { read = append(read, string(e.Data)) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(read, want) {
		t.Errorf("Read applied %q, want %q", read, want)
	}
	events := follow(t, a, "0-0")
	var followed []string
	for range want {
		followed = append(followed, string(nextEvent(t, events, 5*time.Second).Data))
	}
	if !slices.Equal(followed, want) {
		t.Errorf("Follow applied %q, want %q", followed, want)
	}
	if got := foreignCount(a, "event"); got != 2 {
		t.Errorf("%v entries of another deployment counted, want 2 (one each by Read and Follow)", got)
	}
}

// A checkpoint another deployment left behind is not loaded (its data is
// not even fetched), is counted once, and a replica of this deployment
// writes over it whatever its lineage and ID; one that names no
// deployment (the previous release's) is loaded.
func TestCheckpointOfAnotherDeploymentIsNotLoaded(t *testing.T) {
	_, a, c := alphaOnStore(t)
	ctx := context.Background()
	must(t, c.HSet(ctx, "breach_exporter:checkpoint", "id", "9-0", "lineage", "L", "data", "beta's", "deployment", "beta").Err())
	h, err := a.Head(ctx)
	if err != nil || !h.Foreign || h.ID != "9-0" {
		t.Fatalf("Head of another deployment's checkpoint: %+v, %v; want it foreign", h, err)
	}
	cp, _, err := a.LoadCheckpoint(ctx, 1<<20)
	if !errors.Is(err, ErrForeignCheckpoint) || cp.Data != nil {
		t.Fatalf("LoadCheckpoint of another deployment's: %q, %v; want ErrForeignCheckpoint and no data", cp.Data, err)
	}
	if got := foreignCount(a, "checkpoint"); got != 1 {
		t.Errorf("the other deployment's checkpoint counted %v times, want once", got)
	}
	saved, err := a.WriteCheckpoint(ctx, Checkpoint{ID: "1-0", Lineage: "M", Data: []byte("alpha's")}, "")
	if err != nil || !saved {
		t.Fatalf("writing over another deployment's checkpoint: %v, %v", saved, err)
	}
	if got, _ := c.HGet(ctx, "breach_exporter:checkpoint", "deployment").Result(); got != "alpha" {
		t.Errorf("the checkpoint written names deployment %q, want alpha", got)
	}
	must(t, c.HDel(ctx, "breach_exporter:checkpoint", "deployment").Err())
	if cp, ok, err := a.LoadCheckpoint(ctx, 1<<20); err != nil || !ok || string(cp.Data) != "alpha's" {
		t.Errorf("a checkpoint that names no deployment: %q, %v, %v; want it loaded", cp.Data, ok, err)
	}
}
