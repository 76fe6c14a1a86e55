// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// signedOnlyTimeout bounds the wait for the latch: a minute of every
// replica announcing a signing release, plus health checks.
const signedOnlyTimeout = 3 * time.Minute

// TestReplicasSkipForgedEntries proves, on three built replicas, that
// someone who can write to the store cannot add an alert: once the
// deployment is signed only, a well-formed alert entry added by hand
// (a copy of a real one with another digest, no sig), and one with a
// made-up sig, are skipped and counted on every replica, and the alert
// counts do not move.
//
// It runs with BREACH_E2E_REPLICAS=1 (make replicas-test), in about two
// minutes.
func TestReplicasSkipForgedEntries(t *testing.T) {
	if os.Getenv("BREACH_E2E_REPLICAS") != "1" {
		t.Skip("set BREACH_E2E_REPLICAS=1 to run the three-replica tests (make replicas-test)")
	}
	dir := t.TempDir()
	exporterBin := filepath.Join(dir, "breach_exporter")
	goBuild(testContext(t, buildTimeout), t, repoRoot(t), exporterBin, ".")
	ctx := testContext(t, replicasRunTimeout)
	rs := newSmallReplicaSet(ctx, t, dir, exporterBin)
	const genuine = 5
	rs.checkRun(ctx, t, rs.send(ctx, rs.bodies(t, 0, genuine, -1), 100*time.Millisecond, nil, nil), genuine)
	rs.eventually(ctx, t, "every replica signed only", signedOnlyTimeout, rs.everyReplica(testkit.Series("breach_exporter_store_signed_only"), 1))

	c := redis.NewClient(&redis.Options{Addr: rs.store.Addr(), Protocol: 2})
	defer c.Close()
	forgeAlerts(ctx, t, c, replicasKeyPrefix+":events")
	rs.eventually(ctx, t, "every replica skipped the forged entries", convergeTimeout,
		rs.everyReplica(testkit.Series("breach_exporter_store_unverified_total", "what", "event"), 2))
	if err := rs.converged(genuine)(ctx); err != nil {
		t.Errorf("after the forged entries: %v", err)
	}
}

// forgeAlerts adds two alert entries to stream as anyone who can write to
// the store can: copies of the newest alert entry with another digest,
// one without a sig and one with a made-up sig.
func forgeAlerts(ctx context.Context, t *testing.T, c *redis.Client, stream string) {
	t.Helper()
	entries, err := c.XRevRange(ctx, stream, "+", "-").Result() // a short run's stream: a few hundred entries
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Values["kind"] != "alert" {
			continue
		}
		data, _ := e.Values["data"].(string)
		a, err := persist.DecodeAlert([]byte(data))
		if err != nil {
			t.Fatalf("the alert entry %s: %v", e.ID, err)
		}
		for i, sig := range []string{"", "00112233445566778899aabbccddeeff"} {
			a.Digest[0] ^= byte(i + 1)
			values := []any{"prev", e.ID, "kind", "alert", "origin", e.Values["origin"], "deployment", e.Values["deployment"], "data", persist.EncodeAlert(a)}
			if sig != "" {
				values = append(values, "sig", sig)
			}
			if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err(); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	t.Fatal("no alert entry in the stream to copy")
}

// everyReplica holds when series has at least want on every replica.
func (rs *replicaSet) everyReplica(series string, want float64) func(context.Context) error {
	return func(ctx context.Context) error {
		for i, r := range rs.replicas {
			m, err := scrape(ctx, r)
			if err != nil {
				return err
			}
			if got := m[series]; got < want {
				return fmt.Errorf("replica %d: %s is %v, want %v", i, series, got, want)
			}
		}
		return nil
	}
}
