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

// keyOf is a signing key of the tests.
func keyOf(name string) []byte { return []byte("test signing key " + name) }

// keysOf is the key set of a signing_key_file with lines, without a
// derived key: the first signs, all verify.
func keysOf(lines ...string) Keys {
	k := Keys{Sign: [][]byte{keyOf(lines[0])}}
	for _, l := range lines {
		k.Verify = append(k.Verify, keyOf(l))
	}
	return k
}

// openSigned is a replica of deployment "alpha" with keys.
func openSigned(t *testing.T, r *testkit.Redis, name string, keys Keys) replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	buf := &testkit.SyncBuffer{}
	s, err := Open(Options{URL: r.URL(), Replica: name, Deployment: "alpha", Keys: keys, Registerer: reg, Logger: log.NewLogfmtLogger(buf)})
	must(t, err)
	t.Cleanup(func() { s.Close() })
	must(t, s.Join(context.Background()))
	return replica{s, reg, buf}
}

// signedPair starts a store with two replicas of one key set, a and b,
// and a plain client of the store.
func signedPair(t *testing.T) (r *testkit.Redis, a, b replica, c *redis.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r = testkit.StartRedis(t)
	return r, openSigned(t, r, "a", keysOf("one")), openSigned(t, r, "b", keysOf("one")), raw(t, r)
}

func unverifiedCount(s replica, what string) float64 {
	return testutil.ToFloat64(s.unverified.WithLabelValues(what))
}

// readData is the data of every event r reads, in order.
func readData(t *testing.T, r replica) []string {
	t.Helper()
	var got []string
	if _, err := r.Read(context.Background(), "0-0", "", func(e Event) { got = append(got, string(e.Data)) }); err != nil {
		t.Fatal(err)
	}
	return got
}

// forgeAlert adds a well-formed alert entry of deployment alpha, as
// anyone who can write to the store can, with sig (none when empty).
func forgeAlert(t *testing.T, c *redis.Client, data, sig string) {
	t.Helper()
	values := []any{"prev", "0-0", "kind", "alert", "origin", "a", "deployment", "alpha", "data", data}
	if sig != "" {
		values = append(values, "sig", sig)
	}
	must(t, c.XAdd(context.Background(), &redis.XAddArgs{Stream: "breach_exporter:events", Values: values}).Err())
}

// A well-formed alert entry added by hand is not applied once the
// deployment is signed only, nor before it when it carries a sig that
// does not verify; each is counted. Entries a replica published are.
func TestForgedEntriesAreSkippedAndCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r := testkit.StartRedis(t)
	c := raw(t, r)
	a := openSigned(t, r, "a", keysOf("one"))
	_, err := a.Publish(context.Background(), "alert", []byte("genuine"))
	must(t, err)
	forgeAlert(t, c, "forged with a sig", "00112233445566778899aabbccddeeff")
	forgeAlert(t, c, "unsigned, before", "")
	if got, want := readData(t, a), []string{"genuine", "unsigned, before"}; !slices.Equal(got, want) {
		t.Errorf("before the latch, Read applied %q, want %q", got, want)
	}
	if got := unverifiedCount(a, unverifiedEvent); got != 1 {
		t.Errorf("%v entries counted unverified before the latch, want 1 (the forged sig)", got)
	}
	a.Latch()
	forgeAlert(t, c, "unsigned, after", "")
	if got, want := readData(t, a), []string{"genuine"}; !slices.Equal(got, want) {
		t.Errorf("signed only, Read applied %q, want %q", got, want)
	}
	if got := unverifiedCount(a, unverifiedEvent); got != 1+3 {
		t.Errorf("%v entries counted unverified, want 4 (the forged sig twice, two unsigned)", got)
	}
	var scanned []string
	must(t, a.Scan(context.Background(), "0-0", "+", func(e Event) { scanned = append(scanned, string(e.Data)) }))
	if !slices.Equal(scanned, []string{"genuine"}) {
		t.Errorf("Scan gave %q, want the genuine entry only", scanned)
	}
	if testutil.ToFloat64(a.signedGauge) != 1 {
		t.Error("breach_exporter_store_signed_only is not 1 after the latch")
	}
}

// A replica whose keys share none with the writer's skips its entries,
// lease and checkpoint, also before the latch for entries.
func TestEntriesOfAnotherKeyAreSkipped(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r := testkit.StartRedis(t)
	a, b := openSigned(t, r, "a", keysOf("one")), openSigned(t, r, "b", keysOf("two"))
	ctx := context.Background()
	_, err := a.PublishOnceBatch(ctx, time.Hour, []Once{{Digest: "d1", Kind: "alert", Data: []byte("a's")}})
	must(t, err)
	if got := readData(t, b); len(got) != 0 {
		t.Errorf("a replica of other keys applied %q", got)
	}
	if got := unverifiedCount(b, unverifiedEvent); got != 1 {
		t.Errorf("%v entries counted, want 1", got)
	}
	if got := readData(t, a); !slices.Equal(got, []string{"a's"}) {
		t.Errorf("the writer read back %q", got)
	}
}

// Rotating the signing_key_file: each configuration reads what the one
// before and the one after it write: [one], then [one, two] (two verifies),
// then [two, one] (two signs), then [two].
func TestSigningKeyFileRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r := testkit.StartRedis(t)
	steps := []Keys{keysOf("one"), keysOf("one", "two"), keysOf("two", "one"), keysOf("two")}
	var rs []replica
	for i, k := range steps {
		rs = append(rs, openSigned(t, r, fmt.Sprintf("r%d", i), k))
		rs[i].Latch()
	}
	ctx := context.Background()
	for i := range rs {
		_, err := rs[i].Publish(ctx, "k", fmt.Appendf(nil, "%d", i))
		must(t, err)
	}
	for i := range rs {
		got := readData(t, rs[i])
		for j := max(i-1, 0); j <= min(i+1, len(rs)-1); j++ {
			if !slices.Contains(got, fmt.Sprint(j)) {
				t.Errorf("configuration %d did not read what its neighbour %d wrote (read %q)", i, j, got)
			}
		}
	}
	if got := readData(t, rs[3]); slices.Contains(got, "0") {
		t.Errorf("[two] read what [one] signed: %q", got)
	}
}

// The checkpoint: one this deployment signed loads as signed; a forged or
// previous-release one loads unsigned before the latch and is refused after
// it, counted.
func TestCheckpointSignature(t *testing.T) {
	_, a, b, c := signedPair(t)
	ctx := context.Background()
	saved, err := a.WriteCheckpoint(ctx, Checkpoint{ID: "1-0", Lineage: "L", Data: []byte("state")}, "")
	must(t, err)
	if !saved {
		t.Fatal("not saved")
	}
	b.Latch()
	if cp, ok, err := b.LoadCheckpoint(ctx, 1<<20); err != nil || !ok || !cp.Signed || string(cp.Data) != "state" {
		t.Fatalf("a signed checkpoint: %+v, %v, %v; want it loaded, signed", cp, ok, err)
	}
	// The previous release writes id and data over it, and leaves the sig.
	must(t, c.HSet(ctx, "breach_exporter:checkpoint", "id", "2-0", "data", "forged").Err())
	if cp, ok, err := a.LoadCheckpoint(ctx, 1<<20); err != nil || !ok || cp.Signed {
		t.Errorf("before the latch, an unsigned checkpoint: %+v, %v, %v; want it loaded, unsigned", cp, ok, err)
	}
	if _, _, err := b.LoadCheckpoint(ctx, 1<<20); !errors.Is(err, ErrUnverifiedCheckpoint) {
		t.Errorf("signed only, an unsigned checkpoint: %v, want ErrUnverifiedCheckpoint", err)
	}
	if got := unverifiedCount(b, unverifiedCheckpoint); got != 1 {
		t.Errorf("%v checkpoints counted, want 1", got)
	}

	// In parts, the sig covers every part's name and digest (the exporter
	// checks each part's bytes against its digest): a digest changed in
	// the store, or a part added, no longer verifies.
	var sent []string
	saved, err = a.WriteCheckpoint(ctx, partsOf("3-0", map[string]string{"meta": "m", "a1": "one", "a2": "two"}, &sent), "2-0")
	must(t, err)
	if !saved {
		t.Fatal("the checkpoint in parts not saved")
	}
	if cp, ok, err := b.LoadCheckpoint(ctx, 1<<20); err != nil || !ok || !cp.Signed || len(cp.Parts) != 3 {
		t.Fatalf("a signed checkpoint in parts: %+v, %v, %v; want it loaded, signed, 3 parts", cp, ok, err)
	}
	for _, forge := range []func() error{
		func() error { return c.HSet(ctx, "breach_exporter:checkpoint:digests", "a1", "forged").Err() },
		func() error { return c.HSet(ctx, "breach_exporter:checkpoint:digests", "a3", "added").Err() },
	} {
		must(t, forge())
		if _, _, err := b.LoadCheckpoint(ctx, 1<<20); !errors.Is(err, ErrUnverifiedCheckpoint) {
			t.Errorf("signed only, parts changed in the store: %v, want ErrUnverifiedCheckpoint", err)
		}
	}
}

// A lease written by hand, or signed with other keys, names no replica:
// no scrape is passed to its URL. A lease of a replica of this deployment
// does.
func TestForgedServingLeaseIsNone(t *testing.T) {
	r, a, b, c := signedPair(t)
	other := openSigned(t, r, "x", keysOf("other"))
	ctx := context.Background()
	const urlA = "http://127.0.0.1:1/metrics"
	if _, err := a.HoldServing(ctx, urlA, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	if sv, err := b.HoldServing(ctx, "http://127.0.0.1:2/metrics", time.Minute, true); err != nil || sv.URL != urlA {
		t.Fatalf("a signed lease of this deployment: %+v, %v; want its URL", sv, err)
	}
	if sv, _ := other.HoldServing(ctx, "http://127.0.0.1:3/metrics", time.Minute, true); sv.URL != "" || sv.Replica != "" {
		t.Errorf("a lease signed with other keys read as %+v, want none", sv)
	}
	must(t, c.Set(ctx, "breach_exporter:serving", "a\nhttp://attacker.example/", 0).Err())
	b.Latch()
	if sv, _ := b.HoldServing(ctx, "http://127.0.0.1:2/metrics", time.Minute, true); sv.URL != "" || sv.Replica != "" {
		t.Errorf("a forged lease read as %+v, want none", sv)
	}
	must(t, c.Del(ctx, "breach_exporter:serving:sig").Err())
	if sv, _ := b.HoldServing(ctx, "http://127.0.0.1:2/metrics", time.Minute, true); sv.URL != "" {
		t.Errorf("signed only, an unsigned lease read as %+v, want none", sv)
	}
	if got := unverifiedCount(b, unverifiedServing); got != 2 {
		t.Errorf("%v leases counted, want 2", got)
	}
}

// The latch: closed until the passes that see every replica sign span
// latchAfter, while a replica announces the previous format, or
// while more replicas are alive than Formats reads; open once all announce
// this one for latchAfter; and a latched replica stays so when the store
// loses every key. accept_unsigned never latches.
func TestLatch(t *testing.T) {
	_, a, b, c := signedPair(t)
	ctx := context.Background()
	a.latchAfter = time.Hour
	a.watchFormats(ctx)
	a.watchFormats(ctx)
	if a.SignedOnly() {
		t.Fatal("latched before the passes that saw every replica sign spanned latchAfter")
	}
	a.latchAfter = 0
	if lowest, complete, err := a.Formats(ctx); err != nil || lowest != storeFormat || !complete {
		t.Fatalf("Formats = %d, %v, %v; want %d, complete", lowest, complete, err, storeFormat)
	}
	must(t, c.Set(ctx, "breach_exporter:alive:old", "1", time.Minute).Err())
	for range 3 {
		a.watchFormats(ctx)
	}
	if a.SignedOnly() {
		t.Fatal("latched while a replica of the previous release is alive")
	}
	for i := range maxAlive {
		must(t, c.Set(ctx, fmt.Sprintf("breach_exporter:alive:r%d", i), "2", time.Minute).Err())
	}
	must(t, c.Del(ctx, "breach_exporter:alive:old").Err())
	if _, complete, _ := a.Formats(ctx); complete {
		t.Error("Formats complete with more alive keys than its bound")
	}
	a.watchFormats(ctx)
	a.watchFormats(ctx)
	if a.SignedOnly() {
		t.Fatal("latched without reading every alive key")
	}
	for i := range maxAlive {
		must(t, c.Del(ctx, fmt.Sprintf("breach_exporter:alive:r%d", i)).Err())
	}
	a.watchFormats(ctx) // the wait starts
	a.watchFormats(ctx) // latchAfter (0 here) passed
	if !a.SignedOnly() {
		t.Fatal("not latched with every replica signing")
	}
	must(t, c.FlushDB(ctx).Err())
	forgeAlert(t, c, "after the flush", "")
	must(t, a.Join(ctx))
	if got := readData(t, a); len(got) != 0 {
		t.Errorf("after the store lost its keys, a latched replica applied %q", got)
	}
	b.acceptUnsigned, b.latchAfter = true, 0
	b.Latch()
	b.watchFormats(ctx)
	b.watchFormats(ctx)
	if b.SignedOnly() || !slices.Equal(readData(t, b), []string{"after the flush"}) {
		t.Error("a replica with accept_unsigned latched, or refused an unsigned entry")
	}
}

// A store whose ACL is the previous release's least privilege (no SCAN, no
// MGET) keeps the deployment from latching, says so once, and stays up.
func TestFormatsRefusedLeavesTheStoreUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real redis-server")
	}
	r := testkit.StartOwnRedis(t) // its ACL
	ctx := context.Background()
	must(t, raw(t, r).Do(ctx, append(aclLine(t, "pw", false), "-scan", "-mget")...).Err())
	buf := &testkit.SyncBuffer{}
	s, err := Open(Options{URL: "redis://breach_exporter@" + r.Addr(), Password: "pw", Replica: "a", Deployment: "d", Keys: keysOf("one"), Logger: log.NewLogfmtLogger(buf)})
	must(t, err)
	defer s.Close()
	must(t, s.Join(ctx))
	s.latchAfter = 0
	for range 3 {
		s.watchFormats(ctx)
	}
	if s.SignedOnly() || !s.Up() {
		t.Errorf("signed only %v, up %v; want neither latched nor down", s.SignedOnly(), s.Up())
	}
	if n := strings.Count(buf.String(), "refuses SCAN or MGET"); n != 1 {
		t.Errorf("the refusal logged %d times, want once:\n%s", n, buf)
	}
}
