// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Formats reads the format every alive replica of the deployment
// announces: this release's health check announces storeFormat, the previous
// release's "1"; a value that is no number counts as 1 (the releases before formats), another prefix's
// replicas do not count (also when the prefix holds a glob's characters), and more alive keys than it reads make it
// incomplete.
func TestFormatsReadsTheAliveReplicasAnnouncements(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "") // joined: its alive key written
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	check := func(what string, lowest int, complete bool) {
		t.Helper()
		l, c, err := a.Formats(ctx)
		if err != nil || l != lowest || c != complete {
			t.Fatalf("%s: Formats %d, %v, %v; want %d, %v", what, l, c, err, lowest, complete)
		}
	}
	check("this release alone", storeFormat, true)
	set := func(key, value string) {
		t.Helper()
		if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("other:alive:old", "1")
	check("another prefix's replica of the previous release", storeFormat, true)
	set("breach_exporter:alive:old", "1") // 28b5cca's health check
	check("a replica of the previous release", 1, true)
	set("breach_exporter:alive:old", "x")
	check("a replica that announces no number", 1, true)
	if err := rdb.Del(ctx, "breach_exporter:alive:old").Err(); err != nil {
		t.Fatal(err)
	}
	check("the replica of the previous release gone", storeFormat, true)
	// A prefix with a glob's characters matches its own keys only.
	g := open(t, r, "g", "g*[")
	set("gx[:alive:old", "1")
	if l, c, err := g.Formats(ctx); err != nil || l != storeFormat || !c {
		t.Fatalf("a prefix with a glob's characters: Formats %d, %v, %v; want %d, true", l, c, err, storeFormat)
	}
	for i := range maxAlive {
		set(fmt.Sprintf("breach_exporter:alive:r%d", i), "2")
	}
	check("more alive keys than it reads", 0, false)
}

// On a keyspace that holds many keys besides the alive ones (a seen key
// per alert of the dedup window), the pass of the SCAN ends within its
// pace and sees a replica of the previous release among them; the SCAN
// calls it sends stay within scansPerSecond, which the store's own count
// (INFO commandstats) checks. The pace is on the clock by design, so the
// test polls, for at most 40 s (a pass at this size takes 15).
func TestFormatsEndsOnAManyKeyStore(t *testing.T) {
	if testing.Short() {
		t.Skip("a pass over 150,000 keys at its pace takes 15 s")
	}
	r := testkit.StartOwnRedis(t) // its commandstats
	a := open(t, r, "a", "")
	ctx := context.Background()
	rdb := raw(t, r)
	must(t, rdb.Eval(ctx, `for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'breach_exporter:seen:' .. i, '1', 'EX', 3600) end return 0`, nil, 150000).Err())
	must(t, rdb.Set(ctx, "breach_exporter:alive:old", "1", time.Hour).Err()) // 28b5cca's
	must(t, rdb.ConfigResetStat(ctx).Err())
	start := time.Now()
	var lowest int
	var complete bool
	waitFor(t, 40*time.Second, "a pass over 150,000 keys", func() bool {
		var err error
		lowest, complete, err = a.Formats(ctx)
		must(t, err)
		return complete
	})
	took := time.Since(start)
	if lowest != 1 {
		t.Fatalf("Formats after %v over 150,000 keys: %d, want 1: the previous release's replica unseen", took.Round(time.Millisecond), lowest)
	}
	calls, usec := scanStats(t, rdb)
	t.Logf("the pass took %v: %d SCAN calls, %d µs of the store's time, %.1f ms per second", took.Round(time.Millisecond), calls, usec, float64(usec)/1000/took.Seconds())
	if bound := int64(took.Seconds()*scansPerSecond) + scansPerSecond + 1; calls > bound {
		t.Errorf("%d SCAN calls in %v, more than the pace allows (%d)", calls, took, bound)
	}
}

// scanStats reads the SCAN calls the store counted and their time.
func scanStats(t *testing.T, rdb *redis.Client) (calls, usec int64) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	must(t, err)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_scan:"); ok {
			_, err := fmt.Sscanf(rest, "calls=%d,usec=%d", &calls, &usec)
			must(t, err)
		}
	}
	return calls, usec
}
