// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Once the deployment is signed only, a store that loses every key does
// not unlatch it: a replica that restarts on its folder is latched by its
// snapshot, one that starts on an empty folder by the signed checkpoint
// written again; and a well-formed alert entry added by hand then (no
// sig) is counted on neither.
func TestSignedOnlySurvivesAnEmptiedStore(t *testing.T) {
	c, dir := withStoreClient(t)
	ctx := context.Background()
	alerts, signedOnly := alertsOf("a@example.com"), testkit.Series("breach_exporter_store_signed_only")
	unverified := testkit.Series("breach_exporter_store_unverified_total", "what", "event")

	one := startReplica(t, dir, filepath.Join(dir, "one"))
	if code := one.post(t, alertNumbered("a@example.com", 0)); code != 204 {
		t.Fatalf("the alert answered %d", code)
	}
	testkit.Eventually(t, "the alert counted, the replica synced", func() bool { return one.scrape(t)[alerts] == 1 && one.synced(t) })
	one.exp.replicas.shared.Latch() // as a minute of every replica signing does
	// Whole, or in parts (every replica here announces them): the meta
	// part holds it.
	checkpointSignedOnly := func() bool {
		data, err := c.HGet(ctx, "breach_exporter:checkpoint", "data").Bytes()
		if st, derr := persist.DecodeShared(data); err == nil && derr == nil {
			return st.SignedOnly
		}
		body, err := c.HGet(ctx, "breach_exporter:checkpoint:parts", metaPart).Bytes()
		if err != nil {
			return false
		}
		dec, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		raw, err := dec.DecodeAll(body, nil)
		if err != nil {
			return false
		}
		meta, err := decodePart(sharedstore.Part{Name: metaPart, Digest: partDigest(raw)}, raw)
		return err == nil && meta.state.SignedOnly
	}
	testkit.Eventually(t, "a checkpoint that says signed only", checkpointSignedOnly)
	genuine := lastAlertEntry(t, c)
	if err := one.stop(); err != nil {
		t.Fatal(err)
	}

	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	one = startReplica(t, dir, filepath.Join(dir, "one"))
	testkit.Eventually(t, "the restarted replica latched by its snapshot", func() bool { return one.scrape(t)[signedOnly] == 1 })
	testkit.Eventually(t, "the checkpoint written again", checkpointSignedOnly)
	two := startReplica(t, dir, filepath.Join(dir, "two"))
	testkit.Eventually(t, "a replica on an empty folder latched by the checkpoint", func() bool { return two.scrape(t)[signedOnly] == 1 })

	data, _ := genuine["data"].(string)
	a, err := persist.DecodeAlert([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	a.Digest[0] ^= 1
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "breach_exporter:events", Values: []any{
		"kind", genuine["kind"], "origin", genuine["origin"], "deployment", genuine["deployment"], "data", persist.EncodeAlert(a),
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "both replicas skipped the forged entry", func() bool {
		return one.scrape(t)[unverified] == 1 && two.scrape(t)[unverified] == 1
	})
	if n1, n2 := one.scrape(t)[alerts], two.scrape(t)[alerts]; n1 != 1 || n2 != 1 {
		t.Errorf("alerts counted %v and %v after a forged entry, want 1 on each", n1, n2)
	}
}
